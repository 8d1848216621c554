#!/usr/bin/env python3
"""End-to-end (issue 4): a GitHub token wrapped in encodings, in each request location,
through a real `sluice run` to a TLS origin on loopback, must be denied (403 dlp_finding)
and never reach the origin; Content-Encoding bodies are decoded (gzip, deflate, br is
not available in the standard library), an unknown coding is 400 bad_request, a gzip
bomb (1 GiB of zeros) is 413 decode_budget with bounded sluice memory, and benign
look-alikes pass.

Reuses tests/e2e/test_proxy.py (certificates, recording origin, `sluice run`, the
hand-driven client) by importing it.
Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_variants.py -v
"""

import base64
import gzip
import json
import os
import sys
import unittest
import urllib.parse
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)


def setUpModule():
    tp.setUpModule()


def tearDownModule():
    tp.tearDownModule()


def pct_all(s):
    return "".join("%%%02X" % b for b in s.encode())


def js_u(s):
    return "".join("\\u%04x" % ord(c) for c in s)


WRAPPINGS = {
    "base64": lambda t: base64.b64encode(t.encode()).decode(),
    "base64url": lambda t: base64.urlsafe_b64encode(t.encode()).decode().rstrip("="),
    "hex": lambda t: t.encode().hex(),
    "hex-colon": lambda t: ":".join("%02x" % b for b in t.encode()),
    "pct3": lambda t: pct_all(pct_all(pct_all(t))),
    "json-u": js_u,
    "html": lambda t: "".join("&#x%x;" % ord(c) for c in t),
    "zero-width": lambda t: "\u200b".join(t),
    "full-width": lambda t: "".join(chr(0xFF01 + ord(c) - 0x21) if "!" <= c <= "~" else c
                                    for c in t),
    "gzip-base64": lambda t: base64.b64encode(gzip.compress(t.encode())).decode(),
    "base64-of-pct": lambda t: base64.b64encode(pct_all(t).encode()).decode(),
}


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class variants_test(unittest.TestCase):
    maxDiff = 4000

    def send(self, path, headers=None, body=b""):
        return tp.via_proxy("localhost", tp.S.origin.port, "POST", path, headers, body)

    def assert_denied(self, r, label, m):
        self.assertEqual(r.status, 403, "%s: %r" % (label, r.body[:300]))
        doc = r.json()
        self.assertEqual(doc.get("reason"), "dlp_finding", label)
        self.assertIn("github-pat-classic", doc.get("rules", []), label)
        self.assertEqual(tp.S.origin.requests_for(m), [], label + ": origin received it")

    def test_wrapped_token_in_every_location_is_denied(self):
        token = tp.S.token
        for name, wrap in WRAPPINGS.items():
            w = wrap(token)
            m = tp.marker()
            body = json.dumps({"input": w}).encode()
            self.assert_denied(self.send("/json-%s" % m, {"Content-Type": "application/json"},
                                         body), name + " json", m)
            m = tp.marker()
            form = ("a=1&data=" + urllib.parse.quote(w, safe="") + "&b=2").encode()
            self.assert_denied(self.send("/form-%s" % m, {
                "Content-Type": "application/x-www-form-urlencoded"}, form), name + " form", m)
            m = tp.marker()
            mp = ("--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n"
                  "Content-Type: text/plain\r\n\r\n" + w + "\r\n--XyZ--\r\n").encode()
            self.assert_denied(self.send("/mp-%s" % m, {
                "Content-Type": "multipart/form-data; boundary=XyZ"}, mp), name + " multipart", m)
            if all(32 <= ord(c) < 127 for c in w):
                m = tp.marker()
                self.assert_denied(self.send("/hdr-%s" % m, {"X-Data": w}), name + " header", m)
            m = tp.marker()
            q = "/q-%s?q=%s&page=2" % (m, urllib.parse.quote(w, safe=""))
            self.assert_denied(self.send(q), name + " query", m)
        self.assertFalse(tp.S.origin.saw_bytes(token), "the token reached the origin")

    def test_content_encodings(self):
        body = json.dumps({"k": tp.S.token}).encode()
        for coding, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body)),
                             ("gzip, gzip", gzip.compress(gzip.compress(body)))):
            m = tp.marker()
            self.assert_denied(self.send("/ce-%s" % m, {"Content-Encoding": coding}, data),
                               coding, m)
        m = tp.marker()
        clean = self.send("/ce-clean-%s" % m, {"Content-Encoding": "gzip",
                                               "Content-Type": "application/json"},
                          gzip.compress(b'{"messages": ["hello"]}'))
        self.assertEqual(clean.status, 200, clean.body[:300])
        m = tp.marker()
        r = self.send("/ce-unknown-%s" % m, {"Content-Encoding": "lzma"}, body)
        self.assertEqual(r.status, 400, r.body[:300])
        self.assertEqual(r.json().get("reason"), "bad_request")
        self.assertEqual(tp.S.origin.requests_for(m), [])

    def test_gzip_bomb_is_413_with_bounded_memory(self):
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        zeros = bytes(1 << 20)
        parts = [z.compress(zeros) for _ in range(1024)]
        parts.append(z.flush())
        bomb = b"".join(parts)
        self.assertLess(len(bomb), 4 << 20)
        before = vm_hwm_kib(tp.S.sluice.pid)
        m = tp.marker()
        r = self.send("/bomb-%s" % m, {"Content-Encoding": "gzip"}, bomb)
        after = vm_hwm_kib(tp.S.sluice.pid)
        self.assertEqual(r.status, 413, r.body[:300])
        self.assertEqual(r.json().get("reason"), "decode_budget")
        self.assertEqual(tp.S.origin.requests_for(m), [])
        self.assertLess(after - before, 256 * 1024, "peak RSS grew by %d KiB" % (after - before))

    def test_benign_look_alikes_pass(self):
        png = b"\x89PNG\r\n\x1a\n" + os.urandom(4000)
        bodies = [
            json.dumps({"image": "data:image/png;base64," + base64.b64encode(png).decode()}),
            "\n".join(os.urandom(32).hex() for _ in range(20)),
            "Привет, мир! Καλημέρα κόσμε. Съешь же ещё этих мягких французских булок.",
        ]
        for b in bodies:
            m = tp.marker()
            r = self.send("/benign-%s" % m, {"Content-Type": "text/plain"}, b.encode())
            self.assertEqual(r.status, 200, r.body[:300])


if __name__ == "__main__":
    unittest.main()
