#!/usr/bin/env python3
"""End-to-end (issue 6): WebSockets through sluice, every client message inspected.

Real parts only: `sluice run` on loopback; origins are Python `websockets` servers
(Debian's python3-websockets 10.4): a wss:// origin that negotiates permessage-deflate,
a wss:// origin that refuses it, and a plain ws:// origin. Clients are `websockets`
clients through a CONNECT tunnel opened by hand (websockets 10 has no proxy support),
trusting sluice's CA, and, for ws://, an absolute-form upgrade on the proxy port.
Every origin records each message it receives, per request path, so a test can prove
that a denied message never reached it.

Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_websocket.py -v
(Debian's python3 has `websockets`; another python3 gets /usr/lib/python3/dist-packages.)
"""

import asyncio
import atexit
import base64
import http
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)

try:
    import websockets  # noqa: E402
except ImportError:  # pyenv or venv python3: use Debian's python3-websockets
    sys.path.append("/usr/lib/python3/dist-packages")
    import websockets  # noqa: E402
import websockets.exceptions  # noqa: E402
import websockets.legacy.client  # noqa: E402

IO_TIMEOUT_S = 15.0
MAX_BODY = 256 * 1024  # dlp.max_body in the suite's policy: the WebSocket message limit


class st:
    tmp = None
    origin_pmd = None   # wss://, permessage-deflate allowed
    origin_raw = None   # wss://, compression off
    origin_plain = None  # ws://
    sluice = None
    stderr = None
    stdout = None
    proxy_port = None
    metrics_port = None
    sup_port = None     # listener bound to the `supervised` identity
    tls_port = None     # a TLS proxy listener (identity `local`)
    reflector = None    # wss://, sends back what sluice brokered (credentials' destination)
    ws_secret = None    # the brokered secret (sluice's side only)
    admin_port = None
    audit = None
    sluice_ca = None
    token = None


# ---------------------------------------------------------------- origins

class threaded_ws_server:
    """A `websockets` server in its own thread and event loop: start() with the arguments
    of websockets.serve after the handler, stop() at the end."""

    def start(self, handler, **serve_kw):
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                websockets.serve(handler, "127.0.0.1", 0, **serve_kw))
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError("websocket origin did not start")

    def stop(self):
        async def shut():
            self.server.close()
            await self.server.wait_closed()
        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def server_tls(certfile, keyfile):
    if not certfile:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


class ws_origin(threaded_ws_server):
    """A `websockets` server in its own thread and event loop. Echoes each message with
    its type; records per path: messages received (str or bytes), the extensions and
    subprotocol it negotiated, the close code it saw, and 'pong' after /ping/ paths.
    /close-me/ paths: the origin closes with 4001 'bye' after the first message.
    /refuse/ paths: the upgrade is answered 418 with a body."""

    def __init__(self, certfile=None, keyfile=None, compression="deflate"):
        self.got = {}
        self.info = {}
        self.lock = threading.Lock()
        self.start(self.handler, ssl=server_tls(certfile, keyfile), compression=compression,
                   subprotocols=["chat.v2", "chat.v1"], process_request=self.process_request,
                   max_size=8 << 20)

    def process_request(self, path, headers):
        with self.lock:
            self.info.setdefault(path, {})["request_headers"] = dict(headers.raw_items())
        if path.startswith("/refuse/"):
            return http.HTTPStatus(418), [("X-Origin", "refused")], b"origin says no\n"
        return None

    def messages(self, path):
        with self.lock:
            return list(self.got.get(path, []))

    def details(self, path):
        with self.lock:
            return dict(self.info.get(path, {}))

    async def handler(self, ws):
        path = ws.path
        with self.lock:
            d = self.info.setdefault(path, {})
            d["extensions"] = [e.name for e in ws.extensions]
            d["subprotocol"] = ws.subprotocol
        try:
            if path.startswith("/ping/"):
                await asyncio.wait_for(await ws.ping(b"origin-ping"), 5)
                with self.lock:
                    self.info[path]["pong"] = True
            async for msg in ws:
                with self.lock:
                    self.got.setdefault(path, []).append(msg)
                if path.startswith("/close-me/"):
                    await ws.close(4001, "bye")
                    break
                await ws.send(msg)
        except websockets.exceptions.ConnectionClosed:
            pass
        finally:
            with self.lock:
                self.info[path]["close_code"] = ws.close_code


class ws_reflector(threaded_ws_server):
    """A wss:// `websockets` origin that gives back what sluice brokered into the upgrade:
    it selects the last subprotocol offered (as an API taking its token that way may), and
    on /split/ sends the Authorization it received in two messages cut after 20 bytes, on
    /bytes/ one byte per message; then it waits for the close."""

    def __init__(self, certfile, keyfile):
        self.offered = {}

        def last_offered(client, server):
            return client[-1] if client else None

        self.start(self.handler, ssl=server_tls(certfile, keyfile), compression=None,
                   subprotocols=["any"], select_subprotocol=last_offered)

    async def handler(self, ws):
        auth = ws.request_headers.get("Authorization", "")
        self.offered[ws.path] = ws.request_headers.get_all("Sec-WebSocket-Protocol")
        try:
            if ws.path.startswith("/split/"):
                await ws.send(auth[:20])
                await ws.send(auth[20:])
            elif ws.path.startswith("/bytes/"):
                for ch in auth:
                    await ws.send(ch)
            await ws.wait_closed()
        except websockets.exceptions.ConnectionClosed:
            pass


# ---------------------------------------------------------------- sluice

def config_text():
    ports = ", ".join([str(o.port) for o in (st.origin_pmd, st.origin_raw, st.origin_plain,
                                             st.reflector)] + [str(st.dead_port)])
    return f"""version: 1
data_dir: {os.path.join(st.tmp, "data")}
listeners:
  - address: 127.0.0.1:{st.proxy_port}
    identity: local
  - address: 127.0.0.1:{st.sup_port}
    identity: supervised
  - address: 127.0.0.1:{st.tls_port}
    identity: local
    tls: {{cert: {os.path.join(st.tmp, "origin.pem")}, key: {os.path.join(st.tmp, "origin.key")}}}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(st.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: local
  - name: supervised
policies:
""" + "".join(f"""  - identity: {who}
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{ports}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: {action}
      max_body: {MAX_BODY}
    private_destinations: [127.0.0.1/32, "::1/128"]
""" for who, action in (("local", "deny"), ("supervised", "supervise"))) + f"""credentials:
  - name: ws-bearer
    placeholder: "sluice-ws-bearer"
    source: {{env: SLUICE_E2E_WS_SECRET}}
    hosts: [localhost]
    ports: [{st.reflector.port}]
    header: {{name: Authorization, value: "Bearer {{secret}}"}}
  - name: ws-proto
    placeholder: "sluice-ws-proto"
    source: {{env: SLUICE_E2E_WS_SECRET}}
    hosts: [localhost]
    ports: [{st.reflector.port}]
    header: {{name: Sec-WebSocket-Protocol}}
supervise: {{timeout: 30s}}
admin: {{address: "127.0.0.1:{st.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{st.metrics_port}"}}
audit: {{path: {st.audit}, fsync: always}}
"""


def stop_everything():
    tp.stop_run(st.sluice, (st.origin_pmd, st.origin_raw, st.origin_plain, st.reflector),
                (st.stderr, st.stdout), st.tmp)
    st.origin_pmd = st.origin_raw = st.origin_plain = st.reflector = None


def setUpModule():
    binary = tp.sluice_binary()
    atexit.register(stop_everything)
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-ws-")
    try:
        tp.make_certificates(st.tmp)
        cert, key = os.path.join(st.tmp, "origin.pem"), os.path.join(st.tmp, "origin.key")
        st.origin_pmd = ws_origin(cert, key, "deflate")
        st.origin_raw = ws_origin(cert, key, None)
        st.origin_plain = ws_origin(None, None, "deflate")
        st.reflector = ws_reflector(cert, key)
        st.ws_secret = "sk-ws-" + tp.marker() + tp.marker()
        st.proxy_port, st.metrics_port = tp.free_port(), tp.free_port()
        st.sup_port, st.admin_port = tp.free_port(), tp.free_port()
        st.tls_port = tp.free_port()
        st.dead_port = tp.free_port()  # allowed by the policy, nothing listens on it
        st.audit = os.path.join(st.tmp, "audit.jsonl")
        st.sluice_ca = os.path.join(st.tmp, "data", "ca.pem")
        st.token = tp.github_classic_token()
        config = os.path.join(st.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(config_text())
        st.stderr = open(os.path.join(st.tmp, "sluice.stderr"), "wb")
        st.stdout = open(os.path.join(st.tmp, "sluice.stdout"), "wb")
        st.sluice = subprocess.Popen([binary, "run", "--config", config], stdout=st.stdout,
                                     stderr=st.stderr, stdin=subprocess.DEVNULL,
                                     env=dict(tp.client_env(),
                                              SLUICE_E2E_WS_SECRET=st.ws_secret))
        if not tp.wait_for_port(st.proxy_port, st.sluice, tp.START_TIMEOUT_S):
            raise RuntimeError("sluice did not start (exit %s)" % st.sluice.poll())
        tp.S.tmp, tp.S.audit_path = st.tmp, st.audit  # tp.wait_for_audit reads these
    except BaseException:
        stop_everything()
        raise


def tearDownModule():
    stop_everything()


# ---------------------------------------------------------------- clients

def tunnel(port, proxy_port=None):
    """A socket to sluice with an accepted CONNECT localhost:port (read to the blank line
    only, so no TLS byte is lost)."""
    sock = socket.create_connection(("127.0.0.1", proxy_port or st.proxy_port),
                                    timeout=IO_TIMEOUT_S)
    authority = "localhost:%d" % port
    sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        c = sock.recv(1)
        if not c:
            raise ConnectionError("sluice closed the CONNECT: %r" % head)
        head += c
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        sock.close()
        raise ConnectionError("CONNECT answered %d" % status)
    sock.settimeout(None)
    return sock


async def open_wss(origin, path, compression="deflate", proxy_port=None, **kw):
    sock = await asyncio.get_running_loop().run_in_executor(None, tunnel, origin.port,
                                                            proxy_port)
    ctx = ssl.create_default_context(cafile=st.sluice_ca)
    return await websockets.connect("wss://localhost:%d%s" % (origin.port, path), sock=sock,
                                    ssl=ctx, server_hostname="localhost",
                                    compression=compression, open_timeout=IO_TIMEOUT_S,
                                    close_timeout=5, max_size=8 << 20, **kw)


class absolute_form_protocol(websockets.legacy.client.WebSocketClientProtocol):
    """Sends the upgrade in absolute-form, as to an HTTP proxy (RFC 9112 section 3.2.2)."""
    authority = None

    def write_http_request(self, path, headers):
        super().write_http_request("http://%s%s" % (self.authority, path), headers)


async def open_ws_plain(origin, path):
    authority = "127.0.0.1:%d" % origin.port

    class proto(absolute_form_protocol):
        pass
    proto.authority = authority
    sock = socket.create_connection(("127.0.0.1", st.proxy_port), timeout=IO_TIMEOUT_S)
    sock.settimeout(None)
    return await websockets.connect("ws://%s%s" % (authority, path), sock=sock,
                                    create_protocol=proto, open_timeout=IO_TIMEOUT_S,
                                    close_timeout=5)


class tls_in_tls:
    """The client side of TLS carried inside another TLS socket (ssl.SSLObject over memory
    BIOs): a CONNECT tunnel opened on sluice's TLS proxy listener, intercepted in turn.
    `sendall` and `recv` as a socket's."""

    def __init__(self, outer, ctx, hostname):
        self.outer = outer
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=hostname)
        self._io(self.tls.do_handshake)

    def _io(self, call, *args):
        while True:
            try:
                result = call(*args)
                self.outer.sendall(self.outgoing.read())
                return result
            except ssl.SSLWantReadError:
                self.outer.sendall(self.outgoing.read())
                data = self.outer.recv(65536)
                if not data:
                    raise EOFError("the outer TLS connection closed")
                self.incoming.write(data)

    def sendall(self, data):
        self._io(self.tls.write, data)

    def recv(self, n):
        try:
            return self._io(self.tls.read, n)
        except (EOFError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""


class sans_io_ws:
    """A WebSocket client over any object with sendall/recv (blocking): websockets'
    sans-I/O ClientConnection, so it runs where asyncio cannot (TLS inside TLS).
    `target` replaces the request target (absolute-form for an HTTP proxy)."""

    def __init__(self, stream, uri, target=None):
        import collections
        import websockets.client
        import websockets.uri
        self.stream = stream
        self.events = collections.deque()
        self.conn = websockets.client.ClientConnection(websockets.uri.parse_uri(uri))
        request = self.conn.connect()
        if target:
            request.path = target
        self.conn.send_request(request)
        self._flush()
        self.response = self.next_event()
        if self.conn.handshake_exc is not None:
            raise self.conn.handshake_exc

    def _flush(self):
        for data in self.conn.data_to_send():
            if data:
                self.stream.sendall(data)

    def next_event(self):
        """The next event (the handshake Response, then Frames); None at the end."""
        while not self.events:
            data = self.stream.recv(65536)
            if data:
                self.conn.receive_data(data)
            else:
                self.conn.receive_eof()
            self.events.extend(self.conn.events_received())
            self._flush()  # close replies
            if not data and not self.events:
                return None
        return self.events.popleft()

    def send_text(self, text):
        self.conn.send_text(text.encode())
        self._flush()

    def close(self, code=1000):
        self.conn.send_close(code, "")
        self._flush()

    def close_code(self):
        """Reads to the peer's close frame; its code (None if the stream just ended)."""
        import websockets.frames
        while True:
            ev = self.next_event()
            if ev is None:
                return None
            if getattr(ev, "opcode", None) == websockets.frames.Opcode.CLOSE:
                return websockets.frames.Close.parse(ev.data).code


def tls_listener_socket():
    """A TLS connection to sluice's TLS proxy listener (its certificate is the test CA's)."""
    ctx = ssl.create_default_context(cafile=os.path.join(st.tmp, "test-ca.pem"))
    raw = socket.create_connection(("127.0.0.1", st.tls_port), timeout=IO_TIMEOUT_S)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def expect_closed(ws):
    """Waits for sluice to close the session; returns (code, reason) as the client saw."""
    try:
        while True:
            await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S)
    except websockets.exceptions.ConnectionClosed:
        pass
    return ws.close_code, ws.close_reason


def origin_close_code(origin, path):
    """The close code the origin saw. Its handler notes it when its side has finished
    closing, which can be a moment after the client saw its own close."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while origin.details(path).get("close_code") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return origin.details(path).get("close_code")


def admin_token():
    with open(os.path.join(st.tmp, "data", "admin.token")) as f:
        return f.read().strip()


def admin_call(method, path, body=None):
    data = json.dumps(body or {}).encode() if method == "POST" else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (st.admin_port, path),
                                 method=method, data=data,
                                 headers={"Authorization": "Bearer " + admin_token(),
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT_S) as r:
        return r.status, json.loads(r.read())


def admin_post(path):
    return admin_call("POST", path)[0]


def wait_for_approval(path):
    deadline = time.monotonic() + IO_TIMEOUT_S
    while time.monotonic() < deadline:
        for a in admin_call("GET", "/v1/approvals")[1]["approvals"]:
            if path in a["url"]:
                return a
        time.sleep(0.05)
    raise AssertionError("no approval entry for " + path)


def metrics_text():
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % st.metrics_port,
                                timeout=IO_TIMEOUT_S) as r:
        return r.read().decode()


def ws_metric(direction, decision):
    for line in metrics_text().splitlines():
        if line.startswith("sluice_ws_messages_total{") and \
                'direction="%s"' % direction in line and 'decision="%s"' % decision in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# ---------------------------------------------------------------- tests

class websocket_test(unittest.TestCase):
    maxDiff = 4000

    def path(self, kind):
        return "/%s/%s" % (kind, tp.marker())

    def session_record(self, path):
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("decision") == "allow" and
            "ws_messages_up" in r)
        self.assertEqual(len(hits), 1, path)
        return hits[0]

    def test_echo_text_and_binary_with_and_without_compression(self):
        binary = bytes(range(256)) * 64 + b"\x00\xff"
        text = "h\u00e9llo \u2713 " * 200
        for origin, origin_pmd in ((st.origin_pmd, True), (st.origin_raw, False)):
            for compression in ("deflate", None):
                label = "origin pmd=%s client pmd=%s" % (origin_pmd, compression)
                path = self.path("echo")

                async def go():
                    ws = await open_wss(origin, path, compression, subprotocols=["chat.v1"])
                    out = []
                    for m in (text, binary, "short", b"\x01"):
                        await ws.send(m)
                        out.append(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S))
                    ext = [e.name for e in ws.extensions]
                    await ws.close(1000, "done")
                    return out, ext, ws.subprotocol, ws.close_code

                out, ext, proto, code = run(go())
                self.assertEqual(out, [text, binary, "short", b"\x01"], label)
                self.assertEqual([type(x) for x in out], [str, bytes, str, bytes], label)
                self.assertEqual(origin.messages(path), [text, binary, "short", b"\x01"], label)
                self.assertEqual(proto, "chat.v1", label)
                self.assertEqual(code, 1000, label)
                # Each side negotiated permessage-deflate on its own.
                self.assertEqual(ext, ["permessage-deflate"] if compression else [], label)
                info = origin.details(path)
                self.assertEqual(info.get("extensions"),
                                 ["permessage-deflate"] if origin_pmd else [], label)
                self.assertEqual(info.get("subprotocol"), "chat.v1", label)
                # The client's extension offer is sluice's business, never the origin's.
                hdrs = {k.lower(): v for k, v in info["request_headers"].items()}
                self.assertNotIn("proxy-authorization", hdrs, label)
                rec = self.session_record(path)
                self.assertEqual(rec["ws_messages_up"], 4, label)
                self.assertEqual(rec["ws_messages_down"], 4, label)
                self.assertEqual(rec["bytes_up"], len(text.encode()) + len(binary) + 6, label)
                self.assertEqual(rec["bytes_down"], rec["bytes_up"], label)

    def test_benign_chat_passes_byte_for_byte(self):
        before = ws_metric("up", "allow")
        path = self.path("chat")
        msgs = ["hi there", '{"role":"user","content":"what is 2+2?"}',
                "ghp_ is a prefix GitHub uses; sk- too", "line1\nline2\r\n\ttabbed",
                "\u3053\u3093\u306b\u3061\u306f \U0001F600", "x" * 70000,
                b"\x89PNG\r\n\x1a\n" + bytes(1000), "aGVsbG8gd29ybGQ="]

        async def go():
            ws = await open_wss(st.origin_pmd, path)
            got = []
            for m in msgs:
                await ws.send(m)
                got.append(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S))
            await ws.close()
            return got

        self.assertEqual(run(go()), msgs)
        self.assertEqual(st.origin_pmd.messages(path), msgs)
        rec = self.session_record(path)
        self.assertEqual(rec["findings"], [])
        self.assertEqual(rec["ws_messages_up"], len(msgs))
        self.assertGreaterEqual(ws_metric("up", "allow") - before, len(msgs))
        self.assertGreaterEqual(ws_metric("down", "allow"), len(msgs))

    def assert_denied(self, origin, path, forbidden, code, label, index, reason="dlp_finding"):
        got = origin.messages(path)
        for m in got:
            probe = m if isinstance(m, bytes) else m.encode()
            self.assertNotIn(forbidden, probe, label + ": the origin received it")
        self.assertEqual(code, 1008 if reason == "dlp_finding" else 1009, label)
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("decision") == "deny")
        self.assertEqual(len(hits), 1, label)
        self.assertEqual(hits[0]["reason"], reason, label)
        if reason == "dlp_finding":
            rules = {f["rule"] for f in hits[0]["findings"]}
            self.assertIn("github-pat-classic", rules, label)
            self.assertEqual({f["location"] for f in hits[0]["findings"]},
                             {"ws:message:%d" % index}, label)
        self.assertEqual(origin_close_code(origin, path), code, label)

    def test_secret_in_messages_closes_1008(self):
        t = st.token
        half = len(t) // 2
        cases = {
            # name: (client compression, messages to send; the last one carries it)
            "text": (None, ["hello", "please use %s for the repo" % t]),
            "binary": (None, ["hello", b"\x00\x01" + t.encode() + b"\xfe"]),
            "compressed": ("deflate", ["hello", ("padding " * 300) + t + (" tail" * 300)]),
            "fragmented": (None, ["hello", ["token part one: " + t[:half], t[half:] + " end"]]),
            "base64": ("deflate", ["hello", base64.b64encode(("auth=" + t).encode()).decode()]),
            "split": (None, ["hello", "first half " + t[:half], t[half:] + " second half"]),
            # Issue 21: labels and JSON structure between the halves (the seam of two
            # messages, dlp/seam.hpp), which the byte tail alone does not join.
            "labelled": (None, ["hello", "part1: " + t[:half], "part2: " + t[half:]]),
            "json-chunks": (None, ["hello", json.dumps({"chunk": 0, "data": t[:half]}),
                                   json.dumps({"chunk": 1, "data": t[half:]})]),
        }
        for name, (compression, sends) in cases.items():
            path = self.path("deny-" + name)

            async def go():
                ws = await open_wss(st.origin_pmd, path, compression)
                for m in sends[:-1]:
                    await ws.send(m)
                    self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), m)
                await ws.send(sends[-1])
                return await expect_closed(ws)

            code, _ = run(go())
            last = sends[-1]
            if isinstance(last, list):
                forbidden = last[-1].encode()
            elif isinstance(last, bytes):
                forbidden = last
            else:
                forbidden = last.encode()
            self.assert_denied(st.origin_pmd, path, forbidden, code, name, len(sends))
            # The messages before it went through.
            self.assertEqual(st.origin_pmd.messages(path), sends[:-1], name)
        # Also with an origin that does not compress (sluice re-frames either way).
        path = self.path("deny-raw-origin")

        async def go2():
            ws = await open_wss(st.origin_raw, path, "deflate")
            await ws.send("x " + t)
            return await expect_closed(ws)

        code, _ = run(go2())
        self.assert_denied(st.origin_raw, path, t.encode(), code, "raw origin", 1)
        data, _ = tp.read_audit()
        self.assertNotIn(t.encode(), data)
        self.assertNotIn(t, tp.sluice_stderr_text())

    def test_secret_in_upgrade_header_is_403(self):
        path = self.path("deny-header")

        async def go():
            await open_wss(st.origin_pmd, path, extra_headers={
                "Authorization": "Bearer " + st.token})

        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as cm:
            run(go())
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(st.origin_pmd.details(path), {})
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("decision") == "deny")
        self.assertEqual(len(hits), 1)
        self.assertEqual(hits[0]["reason"], "dlp_finding")
        self.assertEqual(hits[0]["findings"][0]["location"], "header:authorization")

    def test_over_size_closes_1009(self):
        path = self.path("big")
        big = "y" * (MAX_BODY + 1)

        async def go():
            ws = await open_wss(st.origin_pmd, path, None)
            await ws.send("small")
            self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), "small")
            await ws.send(big)
            return await expect_closed(ws)

        code, _ = run(go())
        self.assertEqual(st.origin_pmd.messages(path), ["small"])
        self.assert_denied(st.origin_pmd, path, big.encode(), code, "over size", 2,
                           reason="body_too_large")

    def test_close_codes_and_ping_pong_both_ways(self):
        # Origin closes: its code and reason reach the client.
        path = self.path("close-me")

        async def origin_closes():
            ws = await open_wss(st.origin_pmd, path)
            await ws.send("bye please")
            return await expect_closed(ws)

        self.assertEqual(run(origin_closes()), (4001, "bye"))
        # Client closes: its code reaches the origin.
        path = self.path("ping")

        async def client_closes():
            ws = await open_wss(st.origin_pmd, path)
            await asyncio.wait_for(await ws.ping(b"client-ping"), IO_TIMEOUT_S)
            await ws.send("after ping")
            self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), "after ping")
            await ws.close(4002, "client done")

        run(client_closes())
        self.assertEqual(origin_close_code(st.origin_pmd, path), 4002)
        info = st.origin_pmd.details(path)
        self.assertTrue(info.get("pong"), info)  # the origin's ping was answered

    def test_supervised_message_is_held_until_decided(self):
        for decision in ("approve", "deny"):
            path = self.path("sup-" + decision)
            secret_msg = "deploy with %s now" % st.token

            async def go():
                ws = await open_wss(st.origin_pmd, path, "deflate", proxy_port=st.sup_port)
                await ws.send("hello")
                self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), "hello")
                await ws.send(secret_msg)
                entry = await asyncio.get_running_loop().run_in_executor(
                    None, wait_for_approval, path)
                self.assertEqual(entry["reason"], "dlp_finding")
                self.assertEqual({f["location"] for f in entry["findings"]}, {"ws:message:2"})
                self.assertNotIn(st.token, json.dumps(entry))
                # Held: the origin has only the first message.
                self.assertEqual(st.origin_pmd.messages(path), ["hello"])
                status = await asyncio.get_running_loop().run_in_executor(
                    None, admin_post, "/v1/approvals/%s/%s" % (entry["id"], decision))
                self.assertEqual(status, 200)
                if decision == "deny":
                    return await expect_closed(ws)
                self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), secret_msg)
                await ws.send("after")
                self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), "after")
                await ws.close()
                return None

            code = run(go())
            if decision == "approve":
                self.assertEqual(st.origin_pmd.messages(path), ["hello", secret_msg, "after"])
                _, _, hits = tp.wait_for_audit(
                    lambda r: path in r.get("url", "") and
                    r.get("decision") == "supervise_approved")
                self.assertEqual(hits[0]["approval"]["by"], "admin")
                self.assertEqual(hits[0]["findings"][0]["location"], "ws:message:2")
            else:
                self.assertEqual(code[0], 1008)
                self.assertEqual(st.origin_pmd.messages(path), ["hello"])
                _, _, hits = tp.wait_for_audit(
                    lambda r: path in r.get("url", "") and
                    r.get("decision") == "supervise_denied")
                self.assertEqual(hits[0]["reason"], "approval_denied")

    def test_kill_closes_an_open_websocket_of_that_identity_only(self):
        path_k, path_l = self.path("kill-me"), self.path("live-on")

        async def go():
            killed = await open_wss(st.origin_pmd, path_k, "deflate", proxy_port=st.sup_port)
            alive = await open_wss(st.origin_pmd, path_l, "deflate")
            for ws in (killed, alive):
                await ws.send("ping")
                self.assertEqual(await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S), "ping")
            flows = (await asyncio.get_running_loop().run_in_executor(
                None, admin_call, "GET", "/v1/flows"))[1]["flows"]
            mine = [f for f in flows if f["identity"] == "supervised"]
            self.assertEqual([f["kind"] for f in mine], ["websocket"], flows)
            status, doc = await asyncio.get_running_loop().run_in_executor(
                None, admin_call, "POST", "/v1/kill", {"identity": "supervised"})
            self.assertEqual((status, doc["closed"]), (200, 1))
            started = time.monotonic()
            with self.assertRaises(websockets.exceptions.ConnectionClosed):
                await asyncio.wait_for(killed.recv(), IO_TIMEOUT_S)
            self.assertLess(time.monotonic() - started, 2.0)
            # The other identity's session goes on.
            await alive.send("still here")
            self.assertEqual(await asyncio.wait_for(alive.recv(), IO_TIMEOUT_S), "still here")
            await alive.close()
            # New sessions of the killed identity: 503 killed, until revived.
            with self.assertRaises(Exception) as cm:
                await open_wss(st.origin_pmd, self.path("after-kill"), proxy_port=st.sup_port)
            self.assertIn("503", str(cm.exception))
            status, _ = await asyncio.get_running_loop().run_in_executor(
                None, admin_call, "POST", "/v1/revive", {"identity": "supervised"})
            self.assertEqual(status, 200)
            again = await open_wss(st.origin_pmd, self.path("revived"), proxy_port=st.sup_port)
            await again.close()

        run(go())

    def test_refused_upgrade_is_relayed(self):
        path = self.path("refuse")

        async def go():
            await open_wss(st.origin_pmd, path)

        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as cm:
            run(go())
        self.assertEqual(cm.exception.status_code, 418)
        self.assertEqual(cm.exception.headers.get("X-Origin"), "refused")

    def test_upgrade_to_an_origin_that_is_down_is_502_and_sluice_lives(self):
        """The WebSocket front end's own refusal path (connect failure before the 101).
        Under AddressSanitizer this crashed sluice (a refusal destroyed twice by GCC 12,
        docs/ARCHITECTURE.md "Coroutines")."""
        path = self.path("down")
        authority = "127.0.0.1:%d" % st.dead_port
        head = ("GET http://%s%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n" % (authority, path, authority))
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", st.proxy_port),
                                          timeout=IO_TIMEOUT_S) as c:
                c.sendall(head.encode())
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            self.assertTrue(answer.startswith(b"HTTP/1.1 502 "), answer[:200])
            self.assertIsNone(st.sluice.poll(), "sluice exited")
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("reason") == "upstream_connect")
        self.assertGreaterEqual(len(hits), 1)

    def test_through_a_tls_proxy_listener_wss_and_ws(self):
        # The two stream pairs of a TLS proxy listener: wss:// in a CONNECT tunnel (TLS
        # inside the listener's TLS, intercepted) and ws:// in absolute-form.
        t = st.token
        for kind in ("wss", "ws"):
            outer = tls_listener_socket()
            try:
                if kind == "wss":
                    origin, path = st.origin_pmd, self.path("tls-listener-wss")
                    authority = "localhost:%d" % origin.port
                    outer.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" %
                                   (authority, authority)).encode())
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        c = outer.recv(1)
                        self.assertTrue(c, head)
                        head += c
                    self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
                    inner = tls_in_tls(outer, ssl.create_default_context(cafile=st.sluice_ca),
                                       "localhost")
                    ws = sans_io_ws(inner, "wss://%s%s" % (authority, path))
                else:
                    origin, path = st.origin_plain, self.path("tls-listener-ws")
                    authority = "127.0.0.1:%d" % origin.port
                    ws = sans_io_ws(outer, "ws://%s%s" % (authority, path),
                                    target="http://%s%s" % (authority, path))
                self.assertEqual(ws.response.status_code, 101, kind)
                ws.send_text("hello " + kind)
                echo = ws.next_event()
                self.assertEqual(echo.data, ("hello " + kind).encode(), kind)
                ws.send_text("x " + t)
                self.assertEqual(ws.close_code(), 1008, kind)
            finally:
                outer.close()
            self.assert_denied(origin, path, t.encode(), 1008, kind, 2)
            self.assertEqual(origin.messages(path), ["hello " + kind], kind)

    def test_brokered_subprotocol_is_answered_as_the_client_offered_it(self):
        # The credential goes upstream in Sec-WebSocket-Protocol and the origin selects it:
        # the client's 101 names the placeholder it offered, never the secret.
        path = "/proto/%s" % tp.marker()

        async def go():
            ws = await open_wss(st.reflector, path, None, subprotocols=["sluice-ws-proto"])
            proto = ws.subprotocol
            await ws.close()
            return proto

        self.assertEqual(run(go()), "sluice-ws-proto")
        self.assertEqual(st.reflector.offered[path], [st.ws_secret])
        data, _ = tp.read_audit()
        self.assertNotIn(st.ws_secret.encode(), data)

    def test_secret_split_across_server_messages_is_masked(self):
        # Two messages cut after 20 bytes, then one byte per message: the client gets
        # stars wherever the joined messages hold 12 or more bytes of the secret.
        want = "Bearer " + st.ws_secret
        for kind, count in (("split", 2), ("bytes", len(want))):
            path = "/%s/%s" % (kind, tp.marker())

            async def go():
                ws = await open_wss(st.reflector, path, None,
                                    extra_headers={"Authorization": "Bearer sluice-ws-bearer"})
                got = [await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S) for _ in range(count)]
                await ws.close()
                return "".join(got)

            joined = run(go())
            self.assertEqual(len(joined), len(want), kind)
            self.assertTrue(joined.startswith("Bearer "), (kind, joined))
            self.assertNotIn(st.ws_secret[:12], joined, kind)
            # At most the first 11 bytes of the secret (min_prefix - 1) can pass unmasked.
            self.assertEqual(joined[7 + 11:], "*" * (len(st.ws_secret) - 11), (kind, joined))

    def test_plain_ws_absolute_form(self):
        path = self.path("plain")
        t = st.token

        async def go():
            ws = await open_ws_plain(st.origin_plain, path)
            await ws.send("plain hello")
            echo = await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S)
            await ws.send(b"bin " + t.encode())
            return echo, await expect_closed(ws)

        echo, (code, _) = run(go())
        self.assertEqual(echo, "plain hello")
        self.assert_denied(st.origin_plain, path, t.encode(), code, "ws://", 2)
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("decision") == "deny")
        self.assertTrue(hits[0]["url"].startswith("http://127.0.0.1:"), hits[0]["url"])


if __name__ == "__main__":
    unittest.main()
