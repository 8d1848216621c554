#!/usr/bin/env python3
"""End-to-end tests for issue 7 through a real `sluice run`: supervise holds (approve,
deny, timeout, a client that disconnects, DLP on_finding: supervise), the kill switch
(a long download, an opaque and an intercepted tunnel, a held approval of one identity
cut while another identity's flow lives on; 503 killed; revive; kill survives a restart)
and the admin API's bearer token.

Real curl and Python clients through sluice to TLS origins on loopback; identities by
source address (127.0.0.2 alpha, .3 beta, .4 sup). Reuses tests/e2e/test_proxy.py's
helpers (certificates, recording origin, process handling).

Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_supervise.py -v
"""

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)

WAIT_S = 15.0  # bound on every poll; never a sleep used for synchronisation
SRC = {"alpha": "127.0.0.2", "beta": "127.0.0.3", "sup": "127.0.0.4"}


class slow_origin(tp.recording_origin):
    """The recording origin plus /slow/: a chunked body trickled for up to 30 s (a long
    download), ending early when the peer goes away."""

    def respond(self, h, body):
        if "/slow/" not in h.path:
            return super().respond(h, body)
        with self.lock:
            self.records.append({"method": h.command, "path": h.path, "headers": [],
                                 "body": body, "client_port": h.client_address[1],
                                 "response": b""})
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            for _ in range(300):
                h.wfile.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
                h.wfile.flush()
                time.sleep(0.1)
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        h.close_connection = True


class st:
    tmp = None
    sluice = None
    stderr = None
    origin = None   # intercepted
    opaque = None   # reached through an uninspected tunnel
    hook = None     # receives supervise.webhook posts
    proxy_port = None
    admin_port = None
    metrics_port = None
    data_dir = None
    config = None
    audit = None
    sluice_ca = None
    token = None


# A hook URL's path is usually its secret: it must never reach sluice's output.
HOOK_SECRET = "T0-hook-s3cret-" + os.urandom(6).hex()
HOOK_PATH = "/hooks/" + HOOK_SECRET


def write_config(timeout):
    o, p = st.origin.port, st.opaque.port
    with open(st.config, "w") as f:
        f.write(f"""version: 1
data_dir: {st.data_dir}
listeners:
  - address: 127.0.0.1:{st.proxy_port}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(st.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: alpha
    source_cidrs: [127.0.0.2/32]
  - name: beta
    source_cidrs: [127.0.0.3/32]
  - name: sup
    source_cidrs: [127.0.0.4/32]
policies:
  - identity: "*"
    rules:
      - hosts: ["localhost"]
        ports: [{o}]
        path_prefix: /held/
        action: supervise
      - hosts: ["localhost"]
        ports: [{o}]
        action: allow
      - hosts: ["localhost"]
        ports: [{p}]
        action: allow
        inspect: false
    dlp:
      detectors: [all]
      on_finding: supervise
    private_destinations: [127.0.0.1/32]
supervise: {{timeout: {timeout}, webhook: "https://localhost:{st.hook.port}{HOOK_PATH}"}}
admin: {{address: "127.0.0.1:{st.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{st.metrics_port}"}}
audit: {{path: {st.audit}, fsync: always}}
logging: {{level: info, format: json}}
""")


def start_sluice(timeout="30s"):
    write_config(timeout)
    if st.stderr is None:
        st.stderr = open(os.path.join(st.tmp, "sluice.stderr"), "ab")
    st.sluice = subprocess.Popen([tp.sluice_binary(), "run", "--config", st.config],
                                 stdout=subprocess.DEVNULL, stderr=st.stderr,
                                 stdin=subprocess.DEVNULL, env=tp.client_env())
    for port in (st.proxy_port, st.admin_port):
        if not tp.wait_for_port(port, st.sluice, tp.START_TIMEOUT_S):
            raise RuntimeError("sluice did not start (exit %s); stderr:\n%s"
                               % (st.sluice.poll(), stderr_text()[-4000:]))
    with open(os.path.join(st.data_dir, "admin.token")) as f:
        st.token = f.read().strip()


def stop_sluice():
    tp.stop_run(st.sluice, (), (), None)
    st.sluice = None


def stderr_text():
    try:
        with open(os.path.join(st.tmp, "sluice.stderr"), "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def setUpModule():
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-supervise-")
    tp.make_certificates(st.tmp)
    cert, key = os.path.join(st.tmp, "origin.pem"), os.path.join(st.tmp, "origin.key")
    st.origin = slow_origin("held", cert, key)
    st.opaque = tp.recording_origin("opaque", cert, key)
    st.hook = tp.recording_origin("hook", cert, key)
    st.proxy_port, st.admin_port, st.metrics_port = tp.free_port(), tp.free_port(), tp.free_port()
    st.data_dir = os.path.join(st.tmp, "data")
    st.config = os.path.join(st.tmp, "sluice.yaml")
    st.audit = os.path.join(st.tmp, "audit.jsonl")
    start_sluice()
    st.sluice_ca = os.path.join(st.data_dir, "ca.pem")


def tearDownModule():
    tp.stop_run(st.sluice, (st.origin, st.opaque, st.hook), (st.stderr,), st.tmp)


# ---------------------------------------------------------------- clients

def admin(method, path, body=None, token=True, bearer=None):
    """(status, JSON document) from the admin API."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (st.admin_port, path), method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", "Bearer " + (bearer or st.token))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def poll(fn, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def approval_for(mark):
    def find():
        status, doc = admin("GET", "/v1/approvals")
        assert status == 200, doc
        hits = [a for a in doc["approvals"] if mark in a["url"]]
        return hits[0] if hits else None
    return poll(find, "an approval for " + mark)


def curl_bg(who, url, *extra, data=None):
    """A real curl through sluice from `who`'s address, in the background."""
    d = tempfile.mkdtemp(dir=st.tmp)
    out, hdr = os.path.join(d, "body"), os.path.join(d, "headers")
    cmd = ["curl", "-q", "-sS", "--max-time", "60", "--proxy",
           "http://127.0.0.1:%d" % st.proxy_port, "--interface", SRC[who], "--cacert",
           st.sluice_ca, "-D", hdr, "-o", out, "-w", "%{http_code}", *extra]
    if data is not None:
        cmd += ["--data-binary", data]
    p = subprocess.Popen(cmd + [url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=tp.client_env())
    p.out, p.hdr = out, hdr
    return p


def curl_result(p):
    """(exit code, last header block (status, headers), body) of a finished curl_bg."""
    p.wait(timeout=WAIT_S * 4)
    blocks = []
    if os.path.exists(p.hdr):
        with open(p.hdr, encoding="latin-1") as f:
            blocks = tp.parse_header_dump(f.read())
    body = b""
    if os.path.exists(p.out):
        with open(p.out, "rb") as f:
            body = f.read()
    return p.returncode, (blocks[-1] if blocks else (None, {})), body


def curl(who, url, *extra, data=None):
    return curl_result(curl_bg(who, url, *extra, data=data))


def url(path, port=None):
    return "https://localhost:%d%s" % (port or st.origin.port, path)


def connect_from(who):
    return socket.create_connection(("127.0.0.1", st.proxy_port), timeout=10,
                                    source_address=(SRC[who], 0))


def open_tunnel(who, port):
    """A CONNECT tunnel from `who` to localhost:port; returns the raw socket after 200."""
    s = connect_from(who)
    s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (port, port))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise AssertionError("tunnel closed before 200: %r" % head)
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


def keep_alive_session(who):
    """An intercepted tunnel with TLS to sluice's leaf; returns the TLS socket after one
    exchange, left open (keep-alive)."""
    s = open_tunnel(who, st.origin.port)
    ctx = ssl.create_default_context(cafile=st.sluice_ca)
    t = ctx.wrap_socket(s, server_hostname="localhost")
    status, _ = exchange(t, "/ka/" + tp.marker())
    assert status == 200, status
    return t


def exchange(t, path):
    t.sendall(("GET %s HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (path, st.origin.port)).encode())
    r = http.client.HTTPResponse(t, method="GET")
    r.begin()
    body = r.read()
    return r.status, body


def closed_by_peer(s):
    """True once `s` sees EOF or a reset (bounded wait)."""
    s.settimeout(WAIT_S)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionError, ssl.SSLError, OSError) as e:
        return not isinstance(e, socket.timeout)


def audit_records():
    try:
        with open(st.audit, "rb") as f:
            recs = tp.audit_lines(f.read())
        return [r for r in recs if r.get("event") != "start"]  # completions: one per exchange
    except FileNotFoundError:
        return []


def audit_where(pred, what):
    return poll(lambda: [r for r in audit_records() if pred(r)], "audit record: " + what)


# ---------------------------------------------------------------- tests

class supervise_test(unittest.TestCase):
    maxDiff = 4000

    def assert_sluice_answer(self, status, headers, body, want_status, want_reason):
        self.assertEqual(status, want_status, body)
        self.assertIn("x-sluice-flow", headers, headers)
        doc = json.loads(body)
        self.assertEqual(doc.get("reason"), want_reason, doc)
        self.assertEqual(doc.get("flow"), headers["x-sluice-flow"], doc)

    def test_approved_request_waits_then_reaches_the_origin_unchanged(self):
        mark = tp.marker()
        payload = '{"patch": "%s"}' % mark
        p = curl_bg("sup", url("/held/%s?q=1" % mark), data=payload)
        a = approval_for(mark)
        self.assertEqual(a["identity"], "sup")
        self.assertEqual(a["method"], "POST")
        self.assertEqual(a["reason"], "policy_supervise")
        self.assertEqual(a["findings"], [])
        self.assertTrue(a["url"].startswith("https://localhost:%d/held/%s" % (st.origin.port,
                                                                              mark)), a)
        self.assertGreater(a["expires_in_ms"], 0)
        self.assertIn("T", a["created"])
        self.assertIsNone(p.poll(), "curl must still be waiting")
        self.assertEqual(st.origin.requests_for(mark), [], "held: the origin saw nothing yet")

        status, doc = admin("POST", "/v1/approvals/%s/approve" % a["id"], {"by": "alice"})
        self.assertEqual((status, doc), (200, {"id": a["id"], "decision": "approved",
                                               "by": "alice"}))
        code, (st_, hdrs), body = curl_result(p)
        self.assertEqual((code, st_), (0, 200), body)
        seen = st.origin.requests_for(mark)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["body"], payload.encode())
        self.assertEqual(json.loads(body)["path"], "/held/%s?q=1" % mark)
        recs = audit_where(lambda r: mark in r["url"] and r["decision"] == "supervise_approved",
                           "supervise_approved")
        self.assertEqual(recs[0]["approval"]["id"], a["id"])
        self.assertEqual(recs[0]["approval"]["by"], "alice")
        self.assertIn("T", recs[0]["approval"]["at"])
        # Decided once: a second decision is an unknown approval.
        status, doc = admin("POST", "/v1/approvals/%s/deny" % a["id"], {})
        self.assertEqual((status, doc.get("reason")), (404, "unknown_approval"))

    def test_webhook_receives_each_new_entry(self):
        mark = tp.marker()
        p = curl_bg("sup", url("/held/" + mark))
        a = approval_for(mark)

        def posted():
            return [r for r in st.hook.snapshot() if a["id"].encode() in r["body"]]
        got = poll(posted, "the webhook post for " + a["id"])
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0]["method"], got[0]["path"]), ("POST", HOOK_PATH))
        headers = {k.lower(): v for k, v in got[0]["headers"]}
        self.assertEqual(headers.get("content-type"), "application/json")
        self.assertEqual(headers.get("x-sluice-event"), "approval.pending")
        doc = json.loads(got[0]["body"])
        listed = [x for x in admin("GET", "/v1/approvals")[1]["approvals"] if x["id"] == a["id"]]
        self.assertEqual(set(doc), set(listed[0]))
        for k in ("id", "flow", "identity", "method", "url", "reason", "findings"):
            self.assertEqual(doc[k], listed[0][k], k)
        status, _ = admin("POST", "/v1/approvals/%s/deny" % a["id"], {})
        self.assertEqual(status, 200)
        self.assertEqual(curl_result(p)[1][0], 403)
        self.assertNotIn(HOOK_SECRET, stderr_text())

    def test_denied_request_gets_403_and_never_reaches_the_origin(self):
        mark = tp.marker()
        p = curl_bg("sup", url("/held/" + mark))
        a = approval_for(mark)
        status, doc = admin("POST", "/v1/approvals/%s/deny" % a["id"],
                            {"by": "bob", "reason": "not today"})
        self.assertEqual((status, doc["decision"], doc["by"]), (200, "denied", "bob"))
        code, (st_, hdrs), body = curl_result(p)
        self.assert_sluice_answer(st_, hdrs, body, 403, "approval_denied")
        self.assertEqual(st.origin.requests_for(mark), [])
        recs = audit_where(lambda r: mark in r["url"] and r["decision"] == "supervise_denied",
                           "supervise_denied")
        self.assertEqual(recs[0]["reason"], "approval_denied")
        self.assertEqual(recs[0]["approval"]["by"], "bob")
        self.assertEqual(recs[0]["flow"], hdrs["x-sluice-flow"])

    def test_client_that_disconnects_withdraws_its_entry(self):
        mark = tp.marker()
        p = curl_bg("sup", url("/held/" + mark))
        a = approval_for(mark)
        p.kill()
        p.wait(timeout=WAIT_S)

        def gone():
            status, doc = admin("GET", "/v1/approvals")
            return all(x["id"] != a["id"] for x in doc["approvals"])
        poll(gone, "the entry to be withdrawn")
        status, doc = admin("POST", "/v1/approvals/%s/approve" % a["id"])
        self.assertEqual((status, doc.get("reason")), (404, "unknown_approval"))
        self.assertEqual(st.origin.requests_for(mark), [])
        recs = audit_where(lambda r: mark in r["url"] and r["reason"] == "approval_withdrawn",
                           "approval_withdrawn")
        self.assertEqual(recs[0]["approval"]["id"], a["id"])

    def test_dlp_finding_with_supervise_holds_and_lists_findings_without_the_secret(self):
        mark = tp.marker()
        token = tp.github_classic_token()
        p = curl_bg("sup", url("/upload/" + mark), data='{"token": "%s"}' % token)
        a = approval_for(mark)
        self.assertEqual(a["reason"], "dlp_finding")
        self.assertTrue(a["findings"], a)
        f = a["findings"][0]
        self.assertEqual(f["location"], "body")
        self.assertTrue(f["fingerprint"].startswith("sha256:"), f)
        self.assertIn("rule", f)
        self.assertIn("offset", f)
        self.assertIn("variant", f)
        status, raw = admin("GET", "/v1/approvals")
        self.assertNotIn(token, json.dumps(raw))
        self.assertNotIn(token[4:], json.dumps(raw))
        admin("POST", "/v1/approvals/%s/deny" % a["id"])
        code, (st_, hdrs), body = curl_result(p)
        self.assert_sluice_answer(st_, hdrs, body, 403, "approval_denied")
        self.assertFalse(st.origin.saw_bytes(token))
        with open(st.audit, "rb") as fh:
            self.assertNotIn(token.encode(), fh.read())

    def test_a_head_finding_does_not_hide_the_bodys_from_the_approver(self):
        # A token in a header and another in the body: the entry and the audit list both,
        # so a person approving knows everything that would leave.
        mark = tp.marker()
        head_token, body_token = tp.github_classic_token(), tp.github_classic_token()
        p = curl_bg("sup", url("/upload/" + mark), "-H", "Authorization: token " + head_token,
                    data='{"k": "%s"}' % body_token)
        a = approval_for(mark)
        self.assertEqual({f["location"] for f in a["findings"]},
                         {"header:authorization", "body"}, a["findings"])
        admin("POST", "/v1/approvals/%s/deny" % a["id"], {"by": "carol", "reason": "two keys"})
        code, (st_, hdrs), body = curl_result(p)
        self.assert_sluice_answer(st_, hdrs, body, 403, "approval_denied")
        recs = audit_where(lambda r: mark in r["url"] and r["decision"] == "supervise_denied",
                           "supervise_denied")
        self.assertEqual({f["location"] for f in recs[0]["findings"]},
                         {"header:authorization", "body"})
        self.assertEqual((recs[0]["approval"]["by"], recs[0]["approval"]["reason"]),
                         ("carol", "two keys"))

    def test_admin_routes_need_the_token_and_change_nothing_without_it(self):
        mark = tp.marker()
        p = curl_bg("sup", url("/held/" + mark))
        a = approval_for(mark)
        for kw in ({"token": False}, {"bearer": "0" * 64}):
            for method, path, body in (
                    ("POST", "/v1/kill", {"identity": "beta"}),
                    ("POST", "/v1/kill", {"all": True}),
                    ("POST", "/v1/approvals/%s/approve" % a["id"], {}),
                    ("GET", "/v1/approvals", None),
                    ("GET", "/v1/flows", None)):
                status, doc = admin(method, path, body, **kw)
                self.assertEqual((status, doc.get("reason")), (401, "unauthorized"),
                                 (method, path, kw))
        status, doc = admin("GET", "/v1/flows")
        self.assertEqual(doc["killed"], {"all": False, "identities": []})
        self.assertIsNone(p.poll(), "still held")
        self.assertEqual(approval_for(mark)["id"], a["id"])
        code, (st_, _), body = curl("beta", url("/ok/" + tp.marker()))
        self.assertEqual(st_, 200, body)
        admin("POST", "/v1/approvals/%s/deny" % a["id"])
        curl_result(p)

    def test_bad_bodies_are_400(self):
        for body in ({}, {"identity": ""}, {"all": False}, {"identity": 3},
                     {"identity": "a", "all": True}, ["alpha"]):
            for path in ("/v1/kill", "/v1/revive"):
                status, doc = admin("POST", path, body)
                self.assertEqual((status, doc.get("reason")), (400, "bad_request"), (path, body))
        status, doc = admin("POST", "/v1/approvals/ap-nope/approve", {"by": "x"})
        self.assertEqual((status, doc.get("reason")), (404, "unknown_approval"))
        status, doc = admin("GET", "/v1/flows")
        self.assertEqual(doc["killed"], {"all": False, "identities": []})

    def test_kill_cuts_one_identitys_flows_and_revive_restores(self):
        # alpha: a long download, an opaque tunnel, an intercepted keep-alive tunnel and a
        # held approval; beta: an intercepted keep-alive tunnel.
        slow_mark = tp.marker()
        download = curl_bg("alpha", url("/slow/" + slow_mark))
        poll(lambda: st.origin.requests_for(slow_mark), "the download to start")
        opaque = open_tunnel("alpha", st.opaque.port)
        alpha_ka = keep_alive_session("alpha")
        beta_ka = keep_alive_session("beta")
        held_mark = tp.marker()
        held = curl_bg("alpha", url("/held/" + held_mark))
        a = approval_for(held_mark)

        def alpha_flows():
            status, doc = admin("GET", "/v1/flows")
            return [f for f in doc["flows"] if f["identity"] == "alpha"]
        flows = poll(lambda: len(alpha_flows()) >= 4 and alpha_flows(), "alpha's flows")
        kinds = {f["kind"] for f in flows}
        self.assertEqual(kinds, {"tunnel"}, flows)
        self.assertIn("localhost:%d" % st.opaque.port, {f["destination"] for f in flows})
        for f in flows:
            self.assertEqual(set(f), {"flow", "identity", "source", "kind", "destination",
                                      "started", "age_ms", "bytes_up", "bytes_down"})

        status, doc = admin("POST", "/v1/kill", {"identity": "alpha"})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["killed"], "alpha")
        self.assertGreaterEqual(doc["closed"], 4)

        code, (st_, _), body = curl_result(download)
        self.assertNotEqual(code, 0, "the download must be cut, not completed")
        self.assertLess(len(body), 300 * 1024)
        self.assertTrue(closed_by_peer(opaque), "opaque tunnel")
        self.assertTrue(closed_by_peer(alpha_ka), "intercepted tunnel")
        # The held request's tunnel is closed under it (curl fails after the CONNECT's
        # 200), or, if the 503 got out first, it says killed; never the origin's answer.
        code, (st_, _), body = curl_result(held)
        self.assertTrue(code != 0 or st_ == 503, (code, st_, body))
        self.assertNotIn(b"origin", body)
        self.assertEqual(st.origin.requests_for(held_mark), [])
        poll(lambda: all(x["id"] != a["id"] for x in admin("GET", "/v1/approvals")[1]["approvals"]),
             "the held approval to go")
        # A killed flow leaves the list once it has written its record (a few ms after
        # its socket is closed): bounded, never left behind.
        poll(lambda: alpha_flows() == [], "alpha's killed flows to leave /v1/flows")
        # beta's flow lives on.
        status, _ = exchange(beta_ka, "/ka/" + tp.marker())
        self.assertEqual(status, 200)

        # New alpha requests: 503 killed, audited; beta unaffected.
        r = connect_answer("alpha", st.origin.port)
        self.assert_sluice_answer(r.status, r.headers, r.body, 503, "killed")
        audit_where(lambda r_: r_["reason"] == "killed" and r_["identity"] == "alpha"
                    and r_["flow"] == r.headers["x-sluice-flow"], "killed")
        code, (st_, hdrs), body = curl("alpha", url("/new/" + tp.marker()))
        self.assertEqual(st_, 503)
        self.assertIn("x-sluice-flow", hdrs)
        r = connect_answer("beta", st.origin.port)
        self.assertEqual(r.status, 200)
        status, doc = admin("GET", "/v1/flows")
        self.assertEqual(doc["killed"], {"all": False, "identities": ["alpha"]})

        status, doc = admin("POST", "/v1/revive", {"identity": "alpha"})
        self.assertEqual((status, doc["revived"]), (200, "alpha"))
        code, (st_, _), body = curl("alpha", url("/again/" + tp.marker()))
        self.assertEqual(st_, 200, body)
        for s in (opaque, alpha_ka, beta_ka):
            s.close()

    def test_z_kill_survives_restart_and_timeout_answers_approval_timeout(self):
        status, doc = admin("POST", "/v1/kill", {"identity": "beta"})
        self.assertEqual(status, 200, doc)
        stop_sluice()
        with open(os.path.join(st.data_dir, "killed.json")) as f:
            self.assertEqual(json.load(f), {"all": False, "identities": ["beta"]})
        start_sluice(timeout="1s")
        r = connect_answer("beta", st.origin.port)
        self.assert_sluice_answer(r.status, r.headers, r.body, 503, "killed")
        code, (st_, _), body = curl("alpha", url("/after-restart/" + tp.marker()))
        self.assertEqual(st_, 200, body)

        # supervise.timeout 1s: nobody decides.
        mark = tp.marker()
        code, (st_, hdrs), body = curl("sup", url("/held/" + mark))
        self.assert_sluice_answer(st_, hdrs, body, 403, "approval_timeout")
        self.assertEqual(st.origin.requests_for(mark), [])
        recs = audit_where(lambda r: mark in r["url"] and r["reason"] == "approval_timeout",
                           "approval_timeout")
        self.assertEqual(recs[0]["decision"], "supervise_denied")
        self.assertEqual(recs[0]["approval"]["by"], "timeout")

        status, doc = admin("POST", "/v1/revive", {"all": True})
        self.assertEqual((status, doc["revived"]), (200, "all"))
        code, (st_, _), body = curl("beta", url("/revived/" + tp.marker()))
        self.assertEqual(st_, 200, body)


def connect_answer(who, port):
    """sluice's answer to a CONNECT from `who` (head and body; the tunnel is closed)."""
    s = connect_from(who)
    try:
        s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (port, port))
        r = http.client.HTTPResponse(s, method="CONNECT")
        r.begin()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        return tp.response(r.status, hdrs, r.read() if r.status != 200 else b"", "connect")
    finally:
        s.close()


if __name__ == "__main__":
    unittest.main()
