#!/usr/bin/env python3
"""End-to-end tests for per-identity limits (issue 7, CONTRACT.md `policies[].limits`):
requests per minute, upload bytes per minute and concurrent connections, each answered
429 with Retry-After and a JSON reason, audited, and scoped to one identity.

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_limits.py -v

One `sluice run` with four listeners, each bound to its own identity (so each test has
its own buckets): `rpm` (3 requests per minute), `upload` (8 KiB per minute), `conns`
(1 connection) and `free` (no limits). Origins from test_proxy.py record every request.
Standard library and curl only; every wait is bounded.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, helpers)

START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
CLIENT_TIMEOUT_S = 20.0


class L:
    tmp = None
    origin = None
    plain = None
    proc = None
    log = None
    ports = {}
    audit_path = None
    sluice_ca = None


def setUpModule():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    L.tmp = tempfile.mkdtemp(prefix="sluice-limits-")
    tp.make_certificates(L.tmp)
    L.origin = tp.recording_origin("tls", os.path.join(L.tmp, "origin.pem"),
                                   os.path.join(L.tmp, "origin.key"))
    L.plain = tp.recording_origin("plain")
    L.ports = {name: tp.free_port() for name in ("rpm", "upload", "conns", "free")}
    data_dir = os.path.join(L.tmp, "data")
    L.audit_path = os.path.join(L.tmp, "audit.jsonl")
    limits = {
        "rpm": "{requests_per_minute: 3}",
        "upload": "{upload_per_minute: 8KiB}",
        "conns": "{max_connections: 1}",
        "free": "{}",
    }
    listeners = "".join("  - address: 127.0.0.1:%d\n    identity: %s\n" % (port, name)
                        for name, port in L.ports.items())
    identities = "".join("  - name: %s\n" % name for name in L.ports)
    policies = "".join(f"""  - identity: {name}
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{L.origin.port}, {L.plain.port}]
        action: allow
    limits: {limits[name]}
    private_destinations: [127.0.0.1/32]
""" for name in L.ports)
    config = os.path.join(L.tmp, "sluice.yaml")
    with open(config, "w") as f:
        f.write(f"""version: 1
data_dir: {data_dir}
listeners:
{listeners}ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(L.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
{identities}policies:
{policies}admin: {{address: "127.0.0.1:{tp.free_port()}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{tp.free_port()}"}}
audit: {{path: {L.audit_path}, fsync: always}}
""")
    L.log = open(os.path.join(L.tmp, "sluice.log"), "wb")
    L.proc = subprocess.Popen([path, "run", "--config", config], stdout=L.log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=tp.client_env())
    for port in L.ports.values():
        if not tp.wait_for_port(port, L.proc, START_TIMEOUT_S):
            tearDownModule()
            raise RuntimeError("sluice did not start")
    L.sluice_ca = os.path.join(data_dir, "ca.pem")


def tearDownModule():
    tp.stop_run(L.proc, (L.origin, L.plain), (L.log,), L.tmp)


def plain_request(identity, method, path, body=None, chunked=False, conn=None):
    """One absolute-form request on a (possibly kept) connection to a listener."""
    c = conn or http.client.HTTPConnection("127.0.0.1", L.ports[identity],
                                           timeout=CLIENT_TIMEOUT_S)
    url = "http://127.0.0.1:%d%s" % (L.plain.port, path)
    if chunked:
        c.putrequest(method, url, skip_accept_encoding=True)
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        c.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    else:
        c.request(method, url, body=body)
    r = c.getresponse()
    data = r.read()
    status, headers = r.status, {k.lower(): v for k, v in r.getheaders()}
    if conn is None:
        c.close()
    return status, headers, data


def audit_records():
    deadline = time.monotonic() + 10
    while True:
        try:
            with open(L.audit_path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
            return [r for r in recs if r.get("event") != "start"]  # one per exchange
        except FileNotFoundError:
            if time.monotonic() > deadline:
                return []
            time.sleep(0.05)


def wait_for_record(pred):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        hits = [r for r in audit_records() if pred(r)]
        if hits:
            return hits
        time.sleep(0.05)
    return []


class limits_test(unittest.TestCase):
    def assert_limited(self, status, headers, body, reason, min_wait=1, max_wait=60):
        self.assertEqual(status, 429, body)
        doc = json.loads(body)
        self.assertEqual(doc["reason"], reason)
        self.assertEqual(headers.get("x-sluice-flow"), doc["flow"])
        wait = int(headers["retry-after"])
        self.assertGreaterEqual(wait, min_wait)
        self.assertLessEqual(wait, max_wait)
        hits = wait_for_record(lambda r: r.get("flow") == doc["flow"] and
                               r.get("reason") == reason)
        self.assertTrue(hits, "no audit record for the 429")
        self.assertEqual(hits[-1]["decision"], "deny")
        return doc

    def test_requests_per_minute_counts_requests_inside_a_tunnel_not_the_connect(self):
        # curl sends three requests through one intercepted tunnel: CONNECT + 3 requests,
        # all within the 3 per minute (the CONNECT of an inspected tunnel is not a request).
        urls = ["https://localhost:%d/rpm/%d" % (L.origin.port, i) for i in range(3)]
        r = subprocess.run(["curl", "-q", "-sS", "--max-time", "20", "--proxy",
                            "http://127.0.0.1:%d" % L.ports["rpm"], "--cacert", L.sluice_ca,
                            "-w", "%{http_code}\\n", *sum((["-o", "/dev/null", u] for u in urls),
                                                          [])],
                           capture_output=True, timeout=CLIENT_TIMEOUT_S, env=tp.client_env())
        self.assertEqual(r.stdout.decode().split(), ["200"] * 3, r.stderr)
        # The fourth, on a new connection, is over: 20 s until the next token.
        status, headers, body = plain_request("rpm", "GET", "/rpm/4")
        self.assert_limited(status, headers, body, "rate_limit", min_wait=1, max_wait=20)
        with L.plain.lock:
            self.assertFalse([x for x in L.plain.records if x["path"] == "/rpm/4"])
        # Another identity is not affected.
        for i in range(5):
            status, _, body = plain_request("free", "GET", "/free/%d" % i)
            self.assertEqual(status, 200, body)

    def test_upload_budget(self):
        # 8 KiB per minute: a chunked 1 KiB (charged after it is read) and a declared 6 KiB
        # pass; a declared 4 KiB is refused before its body is read; a chunked 4 KiB after.
        status, _, body = plain_request("upload", "POST", "/up/1", b"a" * 1024, chunked=True)
        self.assertEqual(status, 200, body)
        status, _, body = plain_request("upload", "POST", "/up/2", b"b" * 6144)
        self.assertEqual(status, 200, body)
        status, headers, body = plain_request("upload", "POST", "/up/3", b"c" * 4096)
        self.assert_limited(status, headers, body, "upload_budget", min_wait=2, max_wait=60)
        status, headers, body = plain_request("upload", "POST", "/up/4", b"d" * 4096,
                                              chunked=True)
        self.assert_limited(status, headers, body, "upload_budget", min_wait=2, max_wait=60)
        # More than a whole minute's budget can never pass: Retry-After is the minute.
        status, headers, body = plain_request("upload", "POST", "/up/5", b"e" * 9000)
        self.assert_limited(status, headers, body, "upload_budget", min_wait=60, max_wait=60)
        with L.plain.lock:
            paths = [x["path"] for x in L.plain.records if x["path"].startswith("/up/")]
        self.assertEqual(sorted(paths), ["/up/1", "/up/2"])

    def test_max_connections(self):
        # One connection held open (an established tunnel), the second is refused.
        held = socket.create_connection(("127.0.0.1", L.ports["conns"]), timeout=CLIENT_TIMEOUT_S)
        try:
            authority = "localhost:%d" % L.origin.port
            held.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
                         .encode())
            resp = http.client.HTTPResponse(held, method="CONNECT")
            resp.begin()
            self.assertEqual(resp.status, 200)
            status, headers, body = plain_request("conns", "GET", "/conns/refused")
            self.assert_limited(status, headers, body, "connection_limit", max_wait=1)
            # Other identities still connect.
            status, _, body = plain_request("free", "GET", "/free/while-held")
            self.assertEqual(status, 200, body)
        finally:
            # shutdown: the response object's file keeps the descriptor open past close().
            held.shutdown(socket.SHUT_RDWR)
            held.close()
        # Once the tunnel is gone its slot is free again (bounded wait for sluice to notice
        # the close); then requests on the one connection it holds are not limited.
        deadline = time.monotonic() + 10
        while True:
            c = http.client.HTTPConnection("127.0.0.1", L.ports["conns"],
                                           timeout=CLIENT_TIMEOUT_S)
            status, _, body = plain_request("conns", "GET", "/conns/after", conn=c)
            if status == 200 or time.monotonic() > deadline:
                break
            c.close()
            time.sleep(0.1)
        try:
            self.assertEqual(status, 200, body)
            for i in range(3):
                status, _, body = plain_request("conns", "GET", "/conns/keep/%d" % i, conn=c)
                self.assertEqual(status, 200, body)
        finally:
            c.close()

if __name__ == "__main__":
    unittest.main()
