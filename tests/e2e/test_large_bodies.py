#!/usr/bin/env python3
"""End-to-end tests for request bodies larger than `dlp.max_body` (issues 4 and 10):
with `dlp.large_bodies: stream` they are scanned window by window as they are relayed,
with the default (`deny`) they get 413 before a byte of the body is read.

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_large_bodies.py -v

One `sluice run` with two listeners: `streaming` (max_body 64KiB, large_bodies: stream)
and `strict` (max_body 64KiB, the default). Real curl uploads through an intercepted
tunnel to a TLS origin from test_proxy.py that records every complete request.
"""

import base64
import gzip
import hashlib
import http.client
import json
import os
import random
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, token maker)

START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
WINDOW = 64 * 1024  # = max_body below: the streaming window


class B:
    tmp = None
    origin = None
    proc = None
    log = None
    ports = {}
    audit_path = None
    sluice_ca = None


def setUpModule():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    B.tmp = tempfile.mkdtemp(prefix="sluice-large-")
    tp.make_certificates(B.tmp)
    B.origin = tp.recording_origin("tls", os.path.join(B.tmp, "origin.pem"),
                                   os.path.join(B.tmp, "origin.key"))
    B.ports = {"streaming": tp.free_port(), "strict": tp.free_port()}
    data_dir = os.path.join(B.tmp, "data")
    B.audit_path = os.path.join(B.tmp, "audit.jsonl")
    large = {"streaming": "\n      large_bodies: stream", "strict": ""}
    config = os.path.join(B.tmp, "sluice.yaml")
    with open(config, "w") as f:
        f.write(f"""version: 1
data_dir: {data_dir}
listeners:
""" + "".join("  - address: 127.0.0.1:%d\n    identity: %s\n" % (p, n)
              for n, p in B.ports.items()) + f"""ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(B.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: streaming
  - name: strict
policies:
""" + "".join(f"""  - identity: {n}
    rules:
      - hosts: ["localhost"]
        ports: [{B.origin.port}]
        action: allow
    dlp:
      detectors: [all]
      max_body: 64KiB{large[n]}
    private_destinations: [127.0.0.1/32]
""" for n in B.ports) + f"""admin: {{address: "127.0.0.1:{tp.free_port()}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{tp.free_port()}"}}
audit: {{path: {B.audit_path}, fsync: always}}
""")
    B.log = open(os.path.join(B.tmp, "sluice.log"), "wb")
    B.proc = subprocess.Popen([path, "run", "--config", config], stdout=B.log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=tp.client_env())
    for port in B.ports.values():
        if not tp.wait_for_port(port, B.proc, START_TIMEOUT_S):
            tearDownModule()
            raise RuntimeError("sluice did not start")
    B.sluice_ca = os.path.join(data_dir, "ca.pem")


def tearDownModule():
    tp.stop_run(B.proc, (B.origin,), (B.log,), B.tmp)


def filler(n, seed):
    """Clean, text-like bytes (no detector matches): repeated prose with a counter."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b"line %d of upload %s: the quick brown fox jumps over the lazy dog.\n" % (i, seed)
        i += 1
    return bytes(out[:n])


def upload(identity, path, body, *headers):
    """curl POSTs `body` (from a file, so curl sends Content-Length) through sluice."""
    d = tempfile.mkdtemp(dir=B.tmp)
    src = os.path.join(d, "body")
    with open(src, "wb") as f:
        f.write(body)
    out = os.path.join(d, "out")
    cmd = ["curl", "-q", "-sS", "--max-time", "60", "--proxy",
           "http://127.0.0.1:%d" % B.ports[identity], "--cacert", B.sluice_ca,
           "-H", "Content-Type: application/octet-stream", "-H", "Expect:",
           "--data-binary", "@" + src, "-o", out, "-w", "%{http_code}"]
    for h in headers:
        cmd += ["-H", h]
    cmd.append("https://localhost:%d%s" % (B.origin.port, path))
    r = subprocess.run(cmd, capture_output=True, timeout=90, env=tp.client_env())
    answer = b""
    if os.path.exists(out):
        with open(out, "rb") as f:
            answer = f.read()
    return r.stdout.decode().strip(), answer


def origin_got(path):
    with B.origin.lock:
        return [r for r in B.origin.records if r["path"] == path]


def audit_for(flow):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(B.audit_path) as f:
            hits = [json.loads(line) for line in f if flow in line]
        hits = [r for r in hits if r.get("event") != "start"]  # the exchange's completion
        if hits:
            return hits[-1]
        time.sleep(0.05)
    return None


class large_bodies_test(unittest.TestCase):
    def assert_denied(self, code, answer, path, reason="dlp_finding", body=b"", secret=None):
        self.assertEqual(code, str({"dlp_finding": 403, "body_too_large": 413}[reason]), answer)
        doc = json.loads(answer)
        self.assertEqual(doc["reason"], reason)
        # The origin never got the whole request: windows before the finding were relayed
        # (that is what streaming means) but the request was cut before it completed, and
        # the window holding the secret never left sluice.
        for got in origin_got(path):
            self.assertLess(len(got["body"]), len(body))
            if secret is not None:
                self.assertNotIn(secret, got["body"])
        return doc

    def test_clean_large_upload_streams_through_unchanged(self):
        body = filler(5 * 1024 * 1024 + 123, b"clean")
        code, answer = upload("streaming", "/large/clean", body)
        self.assertEqual(code, "200", answer)
        got = origin_got("/large/clean")
        self.assertEqual(len(got), 1)
        self.assertEqual(hashlib.sha256(got[0]["body"]).hexdigest(),
                         hashlib.sha256(body).hexdigest())

    def test_token_deep_in_a_large_body_is_denied(self):
        token = tp.github_classic_token().encode()
        body = bytearray(filler(4 * 1024 * 1024, b"deep"))
        body[3 * 1024 * 1024:3 * 1024 * 1024 + len(token)] = token
        code, answer = upload("streaming", "/large/deep", bytes(body))
        doc = self.assert_denied(code, answer, "/large/deep", body=body, secret=token)
        self.assertIn("github-pat-classic", doc["rules"])
        record = audit_for(doc["flow"])
        self.assertEqual(record["decision"], "deny")
        self.assertEqual(record["findings"][0]["location"], "body")
        self.assertEqual(record["findings"][0]["offset"], 3 * 1024 * 1024)
        # bytes_up counts what was relayed: windows before the token, never the rest.
        self.assertGreater(record["bytes_up"], 0)
        self.assertLessEqual(record["bytes_up"], 3 * 1024 * 1024)
        with open(B.audit_path, "rb") as f:
            self.assertNotIn(token, f.read())

    def test_token_across_a_window_boundary_is_denied(self):
        token = tp.github_classic_token().encode()
        body = bytearray(filler(1024 * 1024, b"straddle"))
        at = 5 * WINDOW - len(token) // 2  # half in one window, half in the next
        body[at:at + len(token)] = token
        code, answer = upload("streaming", "/large/straddle", bytes(body))
        doc = self.assert_denied(code, answer, "/large/straddle", body=body,
                                 secret=token[:len(token) // 2 + 1])
        self.assertIn("github-pat-classic", doc["rules"])

    def test_base64_wrapped_token_in_a_large_body_is_denied(self):
        token = tp.github_classic_token().encode()
        wrapped = base64.b64encode(b"GITHUB_TOKEN=" + token + b"\n")
        body = bytearray(filler(2 * 1024 * 1024, b"b64"))
        body[1500000:1500000 + len(wrapped)] = wrapped
        code, answer = upload("streaming", "/large/b64", bytes(body))
        doc = self.assert_denied(code, answer, "/large/b64", body=body, secret=wrapped)
        self.assertIn("github-pat-classic", doc["rules"])

    def test_compressed_large_body_is_refused(self):
        # 3 MiB that does not compress: curl is still sending (no Expect: 100-continue)
        # when sluice refuses, so the 413 only arrives if sluice reads the body off before
        # it closes (a close with unread bytes resets the connection).
        body = gzip.compress(os.urandom(3 * 1024 * 1024))
        self.assertGreater(len(body), 2 * 1024 * 1024)
        code, answer = upload("streaming", "/large/gzip", body, "Content-Encoding: gzip")
        self.assert_denied(code, answer, "/large/gzip", "body_too_large", body=body)
        self.assertEqual(origin_got("/large/gzip"), [])

    def test_base64_of_a_gzip_stream_longer_than_a_window_is_refused(self):
        # A gzip stream inside base64 spans many windows; each window's scan opens it and
        # finds it cut short by the window end, and no decoder follows it into the next
        # window: refused before the stream's end, never relayed whole (issue 25).
        token = tp.github_classic_token().encode()
        rng = random.Random(25)
        words = b" ".join(bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(7))
                          for _ in range(160000))
        wrapped = base64.b64encode(gzip.compress(words + b"\nGITHUB_TOKEN=" + token + b"\n"))
        self.assertGreater(len(wrapped), 10 * WINDOW)
        body = filler(40 * 1024, b"b64gz") + wrapped + b"\n" + filler(4096, b"end")
        code, answer = upload("streaming", "/large/b64gz", body)
        self.assertIn(code, ("403", "413"), answer)
        doc = json.loads(answer)
        self.assertIn(doc["reason"], ("dlp_finding", "decode_budget"))
        for got in origin_got("/large/b64gz"):
            self.assertLess(len(got["body"]), len(body) - 4096)
            self.assertNotIn(wrapped[-1024:], got["body"])

    def test_default_policy_refuses_a_large_body(self):
        body = filler(WINDOW + 1, b"strict")
        code, answer = upload("strict", "/large/strict", body)
        self.assert_denied(code, answer, "/large/strict", "body_too_large", body=body)
        self.assertEqual(origin_got("/large/strict"), [])

    def test_small_bodies_still_scanned_whole(self):
        token = tp.github_classic_token().encode()
        body = b"{\"k\": \"" + token + b"\"}"
        code, answer = upload("streaming", "/large/small", body)
        self.assert_denied(code, answer, "/large/small", body=body)
        self.assertEqual(origin_got("/large/small"), [])

    def test_refused_on_its_head_a_streamed_request_closes_the_connection(self):
        """A large body that would stream is still unread when its head is refused (a
        token in a header): the 403 says `Connection: close`, sluice reads the body off
        and closes, and never takes the body for the client's next request."""
        token = tp.github_classic_token()
        body = filler(4 * WINDOW, b"headdeny")
        ctx = ssl.create_default_context(cafile=B.sluice_ca)
        conn = http.client.HTTPSConnection("127.0.0.1", B.ports["streaming"], context=ctx,
                                           timeout=30)
        conn.set_tunnel("localhost", B.origin.port)
        try:
            conn.request("POST", "/large/headdeny", body=body,
                         headers={"Content-Type": "text/plain", "X-Debug-Token": token})
            r = conn.getresponse()
            doc = json.loads(r.read())
            self.assertEqual(r.status, 403, doc)
            self.assertEqual(doc["reason"], "dlp_finding")
            self.assertEqual((r.getheader("connection") or "").lower(), "close")
            # http.client opens a new tunnel for the next request, as any client would.
            conn.request("GET", "/large/after-headdeny")
            r2 = conn.getresponse()
            r2.read()
            self.assertEqual(r2.status, 200)
        finally:
            conn.close()
        self.assertEqual(origin_got("/large/headdeny"), [])
        record = audit_for(doc["flow"])
        self.assertIsNotNone(record)
        with open(B.audit_path) as f:
            same_flow = [json.loads(line) for line in f if doc["flow"] in line]
        same_flow = [r for r in same_flow if r.get("event") != "start"]
        self.assertEqual([(r["decision"], r["reason"]) for r in same_flow],
                         [("deny", "dlp_finding")], same_flow)


if __name__ == "__main__":
    unittest.main()
