#!/usr/bin/env python3
"""WebSocket relay throughput (issue 6): messages/s and MB/s for 1 KiB and 64 KiB
messages, with and without permessage-deflate, through sluice (wss:// in a CONNECT
tunnel, every client message scanned) versus directly to the same origin, in one run.

The origin is a Python `websockets` echo server (Debian's python3-websockets) on
loopback with TLS from a throwaway CA; sluice runs from SLUICE_BIN with a config like the
e2e suites'. Each case sends COUNT messages pipelined (a sender and a receiver task on one
connection, at most WINDOW messages in flight) and times until the last echo arrived, so
the figure covers both directions of the relay. Message content is random text (base62),
the worst case for compression; the client, origin and sluice share the machine, so the
direct figure bounds what the Python endpoints can do.

Run:  SLUICE_BIN=build/sluice /usr/bin/python3 bench/websocket_load.py [--count N]
"""

import argparse
import asyncio
import os
import random
import ssl
import string
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import test_proxy as tp  # noqa: E402  (certificates, ports, start-up helpers)
import test_websocket as tw  # noqa: E402  (the recording echo origin, CONNECT tunnel)

import websockets  # noqa: E402

WINDOW = 32


async def one_case(origin_port, size, compression, count, via_sluice):
    if via_sluice:
        sock = await asyncio.get_running_loop().run_in_executor(None, tw.tunnel, origin_port)
        ctx = ssl.create_default_context(cafile=tw.st.sluice_ca)
    else:
        sock = None
        ctx = ssl.create_default_context(cafile=os.path.join(tw.st.tmp, "test-ca.pem"))
    kw = dict(ssl=ctx, compression=compression, max_size=1 << 20, open_timeout=30)
    if sock is not None:
        kw.update(sock=sock, server_hostname="localhost")
    ws = await websockets.connect("wss://localhost:%d/bench" % origin_port, **kw)
    rnd = random.Random(size)
    alphabet = string.ascii_letters + string.digits
    msgs = ["".join(rnd.choice(alphabet) for _ in range(size)) for _ in range(8)]
    sem = asyncio.Semaphore(WINDOW)

    async def sender():
        for i in range(count):
            await sem.acquire()
            await ws.send(msgs[i % len(msgs)])

    async def receiver():
        for _ in range(count):
            await ws.recv()
            sem.release()

    started = time.perf_counter()
    await asyncio.gather(sender(), receiver())
    elapsed = time.perf_counter() - started
    await ws.close()
    return count / elapsed, count * size / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=4000, help="messages per 1 KiB case")
    args = ap.parse_args()
    tw.setUpModule()
    try:
        print("%-8s %-11s %-7s %12s %9s" % ("size", "compression", "path", "messages/s",
                                              "MB/s"))
        for size, count in ((1024, args.count), (65536, max(args.count // 16, 50))):
            for compression in (None, "deflate"):
                for via in (False, True):
                    rate, mbs = asyncio.run(one_case(tw.st.origin_pmd.port, size, compression,
                                                     count, via))
                    print("%-8s %-11s %-7s %12.0f %9.1f" % (
                        "%d KiB" % (size // 1024), compression or "off",
                        "sluice" if via else "direct", rate, mbs), flush=True)
    finally:
        tw.tearDownModule()


if __name__ == "__main__":
    main()
