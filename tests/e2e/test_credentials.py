#!/usr/bin/env python3
"""End-to-end tests for issue 11 (credential brokering) through a real `sluice run`.

The agent holds placeholders (`sluice:openai`, ...); sluice holds the real secrets (from
its own environment and from a file; the client processes never have them) and swaps them
in only for the right identity, destination and placement:

  * header credentials (template `Bearer {secret}`, default `{secret}`; header name matched
    case-insensitively) and query credentials (decoded value, re-encoded on the way out);
    `Accept-Encoding: identity` upstream in those exchanges;
  * scope: host, port (default [443]), credential identities, the policy's `credentials`
    list; a placeholder in any other place of the request head (another header, the path,
    another query parameter) -> 403 `credential_scope`, nothing reaches the origin, audited
    with the credential names;
  * a placeholder in a body is forwarded unchanged;
  * the real secret sent by the client (raw, base64, percent-encoded; any place, any host)
    and `protected_values` -> 403 `dlp_finding` with `protected-value`;
  * response reflection: an origin that echoes the injected secret (headers, body, small
    chunks) shows the client '*' of the same length;
  * `check-config` errors for missing/empty sources (FILE:LINE:COL, never the secret);
  * reload (admin API and SIGHUP) picks up a rewritten secret file; an emptied file is
    refused and the previous secret keeps working;
  * the secrets never appear in sluice's stderr/stdout or the audit file.

Clients: curl, Python http.client (CONNECT tunnel, sluice's CA) and urllib (HTTPS_PROXY).
Standard library + curl + openssl CLI; reuses tests/e2e/test_proxy.py's helpers.

Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_credentials.py -v
"""

import atexit
import base64
import concurrent.futures
import gzip
import http.client
import json
import os
import re
import secrets
import signal
import ssl
import string
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)

IO_TIMEOUT_S = 15.0
SRC_AGENT = "127.0.0.1"    # identity "agent": may use every credential that lists it
SRC_OTHER = "127.0.0.2"    # identity "other": not listed by `openai`
SRC_LIMITED = "127.0.0.3"  # identity "limited": policy `credentials: [anthropic]`

ENV_OPENAI = "SLUICE_E2E_OPENAI_KEY"
ENV_MAPS = "SLUICE_E2E_MAPS_KEY"
ENV_DEFPORT = "SLUICE_E2E_DEFPORT_KEY"
ENV_PROTECTED = "SLUICE_E2E_PROTECTED"

PH_OPENAI = "sluice:openai"
PH_ANTHROPIC = "sluice:anthropic"
PH_MAPS = "sluice:maps"
PH_DEFPORT = "sluice:defport"
PH_SCOPED = "sluice:scoped"
PH_CLEAR = "sluice:cleartext"  # in scope for the plain-HTTP origin, which must not matter
ENV_SCOPED = "SLUICE_E2E_SCOPED_KEY"

ALNUM = string.ascii_letters + string.digits


def rand(n):
    return "".join(secrets.choice(ALNUM) for _ in range(n))


class st:
    tmp = None
    sluice = None
    config = None
    stderr = None
    stdout = None
    origin = None        # echoing TLS origin; the credentials' destination (localhost:A)
    origin_b = None      # echoing TLS origin on another port (out of the credentials' scope)
    plain = None         # plain HTTP origin (absolute-form)
    proxy_port = None
    admin_port = None
    metrics_port = None
    sluice_ca = None
    audit = None
    data_dir = None
    anthropic_file = None
    protected_file = None
    # Secrets (sluice's side only). `anthropic` changes in the reload test.
    openai = None
    anthropic = None
    maps = None
    defport = None
    scoped = None
    protected_env = None
    protected_file_value = None
    all_secrets = []     # every secret value sluice ever held during the run


def sluice_env():
    """sluice's environment: the client environment plus the env-sourced secrets."""
    env = tp.client_env()
    env.update({ENV_OPENAI: st.openai, ENV_MAPS: st.maps, ENV_DEFPORT: st.defport,
                ENV_PROTECTED: st.protected_env, ENV_SCOPED: st.scoped})
    return env


def agent_env(**extra):
    """A client's environment: never any secret."""
    env = tp.client_env(**extra)
    for k, v in env.items():
        for s in st.all_secrets:
            assert s not in v, "a secret leaked into the client environment (%s)" % k
    return env


def write_atomic(path, data):
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- echoing origin

class echo_origin(tp.recording_origin):
    """Threaded HTTP/1.1 origin (TLS when given a certificate) that records every request
    (method, path, headers as received, body, response headers/body) and reflects what it
    got: `X-Echo-Authorization`, `X-Echo-Api-Key` and `X-Echo-Key` (the decoded `key` query
    parameter) response headers, and a JSON body with every request header, the decoded
    query and the body. A path containing `/chunked/` is answered with 5-byte chunks.
    The server side is test_proxy.recording_origin's."""

    def respond(self, h, body):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query,
                                      keep_blank_values=True)
        doc = {
            "origin": self.name,
            "method": h.command,
            "headers": [[k, v] for k, v in h.headers.items()],
            "query": query,
            "body": body.decode("utf-8", "replace"),
            "nonce": secrets.token_hex(8),
        }
        answer = json.dumps(doc, sort_keys=True).encode()
        hdrs = [("Content-Type", "application/json")]
        if h.headers.get("Authorization") is not None:
            hdrs.append(("X-Echo-Authorization", h.headers.get("Authorization")))
        if h.headers.get("X-Api-Key") is not None:
            hdrs.append(("X-Echo-Api-Key", h.headers.get("X-Api-Key")))
        if "key" in query:
            hdrs.append(("X-Echo-Key", query["key"][0]))
            hdrs.append(("X-Echo-Path", h.path))  # as sent: percent-encoded
        chunked = "/chunked/" in h.path
        auth = h.headers.get("Authorization")
        with self.lock:
            self.records.append({
                "method": h.command,
                "path": h.path,
                "headers": list(h.headers.items()),
                "body": body,
                "response_headers": hdrs,
                "response": answer,
            })
            if auth is not None:
                self.last_auth = auth
            last_auth = getattr(self, "last_auth", "")
        if self.special(h, auth or "", last_auth):
            return
        h.send_response(200)
        for k, v in hdrs:
            h.send_header(k, v)
        if chunked:
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for i in range(0, len(answer), 5):
                part = answer[i:i + 5]
                h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        else:
            h.send_header("Content-Length", str(len(answer)))
            h.end_headers()
            h.wfile.write(answer)

    def special(self, h, auth, last_auth):
        """Answers that reflect the Authorization header in the less obvious places:
        /trailer/ a chunked trailer, /early/ a 103 interim answer, /reason/ the reason
        phrase, /last/ the Authorization of an earlier request (a stored secret),
        /two-ce/ a gzip body behind "Content-Encoding: identity" + "Content-Encoding: gzip",
        /last-gz/ the stored Authorization gzip-coded whatever the request accepts.
        Returns True when it answered."""
        if "/trailer/" in h.path:
            h.send_response(200)
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("Trailer", "X-Trailer-Auth")
            h.end_headers()
            h.wfile.write(b"5\r\nhello\r\n0\r\nX-Trailer-Auth: %s\r\n\r\n" % auth.encode())
        elif "/early/" in h.path:
            h.wfile.write(b"HTTP/1.1 103 Early Hints\r\nX-Early-Auth: %s\r\n\r\n" % auth.encode())
            h.send_response(200)
            h.send_header("Content-Length", "2")
            h.end_headers()
            h.wfile.write(b"ok")
        elif "/reason/" in h.path:
            h.send_response(401, "Invalid " + auth)
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif "/last/" in h.path:
            doc = json.dumps({"stored": last_auth}).encode()
            h.send_response(200)
            h.send_header("X-Stored-Auth", last_auth)
            h.send_header("Content-Length", str(len(doc)))
            h.end_headers()
            h.wfile.write(doc)
        elif "/last-gz/" in h.path:
            doc = gzip.compress(json.dumps({"stored": last_auth}).encode())
            h.send_response(200)
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(doc)))
            h.end_headers()
            h.wfile.write(doc)
        elif "/transformed/" in h.path:
            # The secret of the last Authorization (after "Bearer "), as an origin might
            # echo it otherwise: re-cased, reversed, \u00XX-escaped (every byte, or the
            # HTML-unsafe ones), split by a space, cut short, a piece from its middle.
            sec = last_auth.split(" ", 1)[-1]
            u = "".join("\\u%04X" % ord(c) for c in sec)
            safe = "".join("\\u%04x" % ord(c) if c in "<>&'=+/" else c for c in sec)
            forms = [sec.upper(), sec.lower(), sec[::-1], u, safe,
                     sec[:16] + " " + sec[16:], sec[:20], sec[8:28]]
            doc = ("[" + ",".join('"%s"' % f for f in forms) + "]").encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(doc)))
            h.end_headers()
            h.wfile.write(doc)
        elif "/two-ce/" in h.path:
            doc = gzip.compress(json.dumps({"auth": auth}).encode())
            h.send_response(200)
            h.send_header("Content-Encoding", "identity")
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(doc)))
            h.end_headers()
            h.wfile.write(doc)
        else:
            return False
        return True

    def saw(self, needle):
        return self.saw_bytes(needle)


def header_values(record, name):
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


# ---------------------------------------------------------------- config and process

def credentials_yaml(openai_source=None, anthropic_source=None,
                     openai_header='{name: Authorization, value: "Bearer {secret}"}',
                     maps_extra="", extra=""):
    a = st.origin.port
    openai_source = openai_source or "{env: %s}" % ENV_OPENAI
    anthropic_source = anthropic_source or "{file: %s}" % st.anthropic_file
    return f"""protected_values:
  - env: {ENV_PROTECTED}
  - file: {st.protected_file}
credentials:
  - name: openai
    placeholder: "{PH_OPENAI}"
    source: {openai_source}
    hosts: [localhost]
    ports: [{a}]
    header: {openai_header}
    identities: [agent, limited]
  - name: anthropic
    placeholder: "{PH_ANTHROPIC}"
    source: {anthropic_source}
    hosts: ["localhost"]
    ports: [{a}]
    header: {{name: x-api-key}}
  - name: maps
    placeholder: "{PH_MAPS}"
    source: {{env: {ENV_MAPS}}}
    hosts: [localhost]
    ports: [{a}]
    query: {{name: key}}
{maps_extra}    identities: []
  - name: defport
    placeholder: "{PH_DEFPORT}"
    source: {{env: {ENV_DEFPORT}}}
    hosts: [localhost]
    header: {{name: X-Def-Key, value: "{{secret}}"}}
  - name: scoped
    placeholder: "{PH_SCOPED}"
    source: {{env: {ENV_SCOPED}}}
    hosts: [localhost]
    ports: [{a}]
    path_prefix: /v1/
    header: {{name: X-Scoped-Key}}
  - name: cleartext
    placeholder: "{PH_CLEAR}"
    source: {{env: {ENV_SCOPED}}}
    hosts: ["127.0.0.1"]
    ports: [{st.plain.port}]
    header: {{name: X-Clear-Key}}
{extra}"""


def config_text(**cred_kw):
    ports = ", ".join(str(p) for p in (st.origin.port, st.origin_b.port, st.plain.port))

    def policy(identity, extra=""):
        return f"""  - identity: {identity}
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{ports}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: deny
    private_destinations: [127.0.0.1/32, "::1/128"]
{extra}"""

    policies = (policy("agent") + policy("other")
                + policy("limited", "    credentials: [anthropic]\n"))  # only this one
    return f"""version: 1
data_dir: {st.data_dir}
listeners:
  - address: 127.0.0.1:{st.proxy_port}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(st.tmp, "test-ca.pem")}
  connect_timeout: 2s
identities:
  - name: agent
    source_cidrs: [{SRC_AGENT}/32]
  - name: other
    source_cidrs: [{SRC_OTHER}/32]
  - name: limited
    source_cidrs: [{SRC_LIMITED}/32]
policies:
{policies}{credentials_yaml(**cred_kw)}admin: {{address: "127.0.0.1:{st.admin_port}", \
token_file: admin.token}}
metrics: {{address: "127.0.0.1:{st.metrics_port}"}}
audit: {{path: {st.audit}, fsync: always}}
logging: {{level: debug, format: json}}
"""


def stderr_text():
    try:
        with open(os.path.join(st.tmp, "sluice.stderr"), "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def start_sluice():
    st.sluice = subprocess.Popen([tp.sluice_binary(), "run", "--config", st.config],
                                 stdout=st.stdout, stderr=st.stderr,
                                 stdin=subprocess.DEVNULL, env=sluice_env())
    for port in (st.proxy_port, st.admin_port):
        if not tp.wait_for_port(port, st.sluice, tp.START_TIMEOUT_S):
            raise RuntimeError("sluice did not listen on %d (exit %s):\n%s"
                               % (port, st.sluice.poll(), stderr_text()[-4000:]))


def stop_everything():
    tp.stop_run(st.sluice, (st.origin, st.origin_b, st.plain), (st.stderr, st.stdout), st.tmp)
    st.origin = st.origin_b = st.plain = None


def setUpModule():
    tp.sluice_binary()
    atexit.register(stop_everything)
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-cred-")
    try:
        tp.make_certificates(st.tmp)
        cert, key = os.path.join(st.tmp, "origin.pem"), os.path.join(st.tmp, "origin.key")
        st.origin = echo_origin("a", cert, key)
        st.origin_b = echo_origin("b", cert, key)
        st.plain = echo_origin("plain")
        st.proxy_port, st.admin_port, st.metrics_port = (tp.free_port(), tp.free_port(),
                                                         tp.free_port())
        st.data_dir = os.path.join(st.tmp, "data")
        st.audit = os.path.join(st.tmp, "audit.jsonl")
        st.sluice_ca = os.path.join(st.data_dir, "ca.pem")
        # Random-looking secrets that no built-in detector knows; `maps` holds characters
        # that must be percent-encoded in a query.
        st.openai = "sk-test-" + rand(40)
        st.anthropic = "ak-test-" + rand(40)
        st.maps = "mk-" + rand(20) + "/+" + rand(20) + "="
        st.defport = "dk-test-" + rand(40)
        st.scoped = "sc-test-" + rand(40)
        st.protected_env = "pv-env-" + rand(40)
        st.protected_file_value = "pv-file-" + rand(40)
        st.all_secrets = [st.openai, st.anthropic, st.maps, st.defport, st.protected_env,
                          st.protected_file_value, st.scoped]
        st.anthropic_file = os.path.join(st.tmp, "secrets", "anthropic.key")
        st.protected_file = os.path.join(st.tmp, "secrets", "protected.txt")
        os.makedirs(os.path.dirname(st.anthropic_file), mode=0o700)
        write_atomic(st.anthropic_file, (st.anthropic + "\r\n").encode())  # CRLF stripped
        write_atomic(st.protected_file, (st.protected_file_value + "\n").encode())
        for k, v in os.environ.items():
            assert not k.startswith("SLUICE_E2E_") or k in ("SLUICE_E2E_KEEP",
                                                            "SLUICE_E2E_START_TIMEOUT"), k
        st.config = os.path.join(st.tmp, "sluice.yaml")
        with open(st.config, "w") as f:
            f.write(config_text())
        st.stderr = open(os.path.join(st.tmp, "sluice.stderr"), "ab")
        st.stdout = open(os.path.join(st.tmp, "sluice.stdout"), "ab")
        start_sluice()
        # test_proxy's curl() and audit reader read these.
        tp.S.tmp, tp.S.audit_path = st.tmp, st.audit
        tp.S.proxy_port, tp.S.sluice_ca = st.proxy_port, st.sluice_ca
    except BaseException:
        stop_everything()
        raise


def tearDownModule():
    stop_everything()


# ---------------------------------------------------------------- clients

answer = tp.answer  # status, headers, body as the client saw them


def py_request(host, port, method, path, headers=(), body=b"", source=SRC_AGENT, conn=None):
    """Python http.client through a CONNECT tunnel (sluice's CA). `headers` are sent
    exactly as given (name case kept, no automatic Accept-Encoding)."""
    own = conn is None
    if own:
        conn = py_connection(host, port, source)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v)
        if body or method in ("POST", "PUT", "PATCH"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if body else None)
        r = conn.getresponse()
        return answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        if own:
            conn.close()


def py_connection(host, port, source=SRC_AGENT):
    ctx = ssl.create_default_context(cafile=st.sluice_ca)
    conn = http.client.HTTPSConnection("127.0.0.1", st.proxy_port, context=ctx,
                                       timeout=IO_TIMEOUT_S, source_address=(source, 0))
    conn.set_tunnel(host, port)
    return conn


def plain_request(method, path, headers=(), body=b""):
    """Absolute-form HTTP to the plain origin through sluice."""
    conn = http.client.HTTPConnection("127.0.0.1", st.proxy_port, timeout=IO_TIMEOUT_S,
                                      source_address=(SRC_AGENT, 0))
    try:
        conn.putrequest(method, "http://127.0.0.1:%d%s" % (st.plain.port, path),
                        skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if body else None)
        r = conn.getresponse()
        return answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def curl1(url, *extra, data=None, source=None):
    """One transfer with real curl through sluice; the last answer (after CONNECT)."""
    if source:
        extra = ("--interface", source) + extra
    code, blocks, bodies, _, err = tp.curl([url], *extra, data=data)
    assert code == 0, "curl exit %d: %s" % (code, err)
    assert blocks, "curl saw no answer: " + err
    status, headers = blocks[-1]
    return answer(status, headers, bodies[0] or b"")


def url_a(path, host="localhost"):
    return "https://%s:%d%s" % (host, st.origin.port, path)


def marker():
    return "m" + uuid.uuid4().hex[:12]


def stars(s):
    return "*" * len(s)


def pct_all(s):
    return "".join("%%%02X" % b for b in s.encode())


def wait_audit(pred):
    return tp.wait_for_audit(pred)[2]


# ---------------------------------------------------------------- base

class base(unittest.TestCase):
    maxDiff = 6000

    def tearDown(self):
        code = st.sluice.poll() if st.sluice is not None else None
        if code is not None:
            start_sluice()
            self.fail("sluice exited (code %s) during this test" % code)

    def assert_sluice_answer(self, a, status, reason):
        self.assertEqual(a.status, status, a)
        self.assertIn("x-sluice-flow", a.headers, a)
        doc = a.json()
        self.assertEqual(doc.get("reason"), reason, doc)
        self.assertEqual(doc.get("flow"), a.headers["x-sluice-flow"], doc)
        self.assertIsInstance(doc.get("rules"), list, doc)
        for s in st.all_secrets:
            self.assertNotIn(s.encode(), a.body, "a secret is in sluice's answer")
        return doc

    def assert_nothing_reached(self, m):
        for o in (st.origin, st.origin_b, st.plain):
            self.assertEqual(o.requests_for(m), [], "origin %s received %s" % (o.name, m))

    def one_request(self, m, origin=None):
        seen = (origin or st.origin).requests_for(m)
        self.assertEqual(len(seen), 1, "origin records for %s: %r" % (m, seen))
        return seen[0]

    def audit_for_marker(self, m, decision="allow"):
        hits = wait_audit(lambda r: m in str(r.get("url", "")) and r.get("decision") == decision)
        self.assertEqual(len(hits), 1, "audit records (%s) for %s: %r" % (decision, m, hits))
        return hits[0]

    def audit_for_flow(self, flow, decision, reason):
        hits = wait_audit(lambda r: r.get("flow") == flow and r.get("decision") == decision
                          and r.get("reason") == reason)
        self.assertTrue(hits, "no audit %s/%s for flow %s; records for it: %r" % (
            decision, reason, flow, [r for r in tp.read_audit()[1] if r.get("flow") == flow]))
        return hits[-1]

    def assert_injected_allow(self, m, names, identity="agent"):
        rec = self.audit_for_marker(m)
        self.assertEqual(rec.get("identity"), identity, rec)
        self.assertEqual(sorted(rec.get("credentials") or []), sorted(names), rec)
        return rec

    def assert_scope_denied(self, a, m, names):
        doc = self.assert_sluice_answer(a, 403, "credential_scope")
        self.assert_nothing_reached(m)
        rec = self.audit_for_flow(doc["flow"], "deny", "credential_scope")
        got = rec.get("credentials")
        self.assertIsInstance(got, list, rec)
        for n in names:
            self.assertIn(n, got, rec)
        return rec

    def assert_protected_denied(self, a, m):
        doc = self.assert_sluice_answer(a, 403, "dlp_finding")
        self.assertIn("protected-value", doc["rules"], doc)
        self.assert_nothing_reached(m)
        self.audit_for_flow(doc["flow"], "deny", "dlp_finding")
        return doc

    def assert_masked_echo(self, a, record, secret):
        """The client got the origin's answer with every occurrence of `secret` replaced
        by '*' of the same length (headers and body)."""
        self.assertEqual(a.status, 200, a)
        # The secret as injected into a header, and as injected into a query (percent-
        # encoded, RFC 3986 unreserved characters kept): an origin may echo either.
        forms = [secret, urllib.parse.quote(secret, safe="")]
        want = record["response"]
        for f in forms:
            want = want.replace(f.encode(), stars(f).encode())
        self.assertIn(secret.encode(), record["response"], "the origin did not reflect it")
        self.assertNotIn(secret.encode(), a.body, "the secret reached the client's body")
        self.assertEqual(a.body, want)
        for k, v in record["response_headers"]:
            if k.startswith("X-Echo-"):
                for f in forms:
                    v = v.replace(f, stars(f))
                self.assertEqual(a.headers.get(k.lower()), v, (k, a.headers))
        for k, v in a.headers.items():
            for f in forms:
                self.assertNotIn(f, v, "the secret is in response header " + k)


# ---------------------------------------------------------------- check-config

class t1_config_test(base):
    def check_config(self, text, env):
        d = tempfile.mkdtemp(dir=st.tmp)
        path = os.path.join(d, "sluice.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([tp.sluice_binary(), "check-config", path], capture_output=True,
                           timeout=120, env=env, stdin=subprocess.DEVNULL)
        return path, r.returncode, (r.stdout + r.stderr).decode(errors="replace")

    def test_running_config_is_valid(self):
        _, code, out = self.check_config(config_text(), sluice_env())
        self.assertEqual(code, 0, out)
        for s in st.all_secrets:
            self.assertNotIn(s, out)

    def test_missing_or_empty_sources_and_bad_placements_are_errors(self):
        unset = "SLUICE_E2E_UNSET_" + uuid.uuid4().hex[:8].upper()
        d = tempfile.mkdtemp(dir=st.tmp)
        empty = os.path.join(d, "empty.key")
        crlf_only = os.path.join(d, "crlf.key")
        missing = os.path.join(d, "missing.key")
        write_atomic(empty, b"")
        write_atomic(crlf_only, b"\r\n\n")
        two_lines = os.path.join(d, "two-lines.key")
        write_atomic(two_lines, b"first-line-secret\nX-Injected: yes\n")
        cases = [
            ("secret with an inner line break", dict(anthropic_source="{file: %s}" % two_lines),
             "control characters"),
            ("framing header", dict(openai_header='{name: Content-Length, value: "{secret}"}'),
             "framing or hop-by-hop"),
            ("header name that is not a token", dict(openai_header='{name: "X Bad", value: x}'),
             "is not a field name"),
            ("every host", dict(extra="  - name: anyhost\n    placeholder: sluice:anyhost\n"
                                      "    source: {env: %s}\n    hosts: [\"*\"]\n"
                                      "    header: {name: X-Any}\n" % ENV_SCOPED), "not '*'"),
            ("placeholder inside another", dict(
                extra="  - name: short\n    placeholder: sluice:open\n"
                      "    source: {env: %s}\n    hosts: [localhost]\n"
                      "    header: {name: X-Short}\n" % ENV_SCOPED), "is part of placeholder"),
            ("env var unset", dict(openai_source="{env: %s}" % unset), unset),
            ("empty file", dict(anthropic_source="{file: %s}" % empty), empty),
            ("file of only CR/LF", dict(anthropic_source="{file: %s}" % crlf_only), crlf_only),
            ("missing file", dict(anthropic_source="{file: %s}" % missing), missing),
            ("template without {secret}",
             dict(openai_header='{name: Authorization, value: "Bearer token"}'), "{secret}"),
            ("both header and query", dict(maps_extra="    header: {name: X-Maps}\n"), "header"),
        ]
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = [(label, needle, pool.submit(self.check_config, config_text(**kw),
                                                   sluice_env()))
                       for label, kw, needle in cases]
            for label, needle, fut in futures:
                path, code, out = fut.result()
                with self.subTest(label):
                    self.assertEqual(code, 2, out)
                    self.assertRegex(out, re.escape(path) + r":\d+:\d+: [^\n]*" +
                                     re.escape(needle), out)
                    for s in st.all_secrets:
                        self.assertNotIn(s, out, "check-config printed a secret")


# ---------------------------------------------------------------- injection

class t2_inject_test(base):
    def test_curl_bearer_placeholder_gets_the_real_key_and_identity_encoding(self):
        for compressed in (True, False):
            m = marker()
            extra = ["--compressed"] if compressed else []
            a = curl1(url_a("/v1/chat/" + m), "-H", "Authorization: Bearer " + PH_OPENAI,
                      "-H", "Content-Type: application/json", *extra,
                      data=b'{"model": "x", "messages": []}')
            rec = self.one_request(m)
            self.assertEqual(header_values(rec, "Authorization"), ["Bearer " + st.openai])
            self.assertEqual(header_values(rec, "Accept-Encoding"), ["identity"],
                             "sluice sets Accept-Encoding: identity upstream")
            self.assertEqual(rec["body"], b'{"model": "x", "messages": []}')
            self.assert_masked_echo(a, rec, st.openai)
            self.assertEqual(a.headers.get("x-echo-authorization"),
                             "Bearer " + stars(st.openai))
            self.assert_injected_allow(m, ["openai"])

    def test_header_name_is_case_insensitive_and_the_template_replaces_the_value(self):
        for name, value in (("authorization", PH_OPENAI), ("AUTHORIZATION", "Bearer " + PH_OPENAI),
                            ("Authorization", "Bearer  " + PH_OPENAI + " ")):
            m = marker()
            a = py_request("localhost", st.origin.port, "GET", "/v1/models/" + m,
                           [(name, value), ("Accept-Encoding", "gzip, br")])
            rec = self.one_request(m)
            self.assertEqual(header_values(rec, "Authorization"), ["Bearer " + st.openai],
                             (name, value))
            self.assertEqual(header_values(rec, "Accept-Encoding"), ["identity"])
            self.assert_masked_echo(a, rec, st.openai)
            self.assert_injected_allow(m, ["openai"])

    def test_path_prefix_scoped_credential_is_injected_under_its_prefix(self):
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/scoped/" + m,
                       [("X-Scoped-Key", PH_SCOPED)])
        rec = self.one_request(m)
        self.assertEqual(header_values(rec, "X-Scoped-Key"), [st.scoped])
        self.assertEqual(a.status, 200, a)
        self.assert_injected_allow(m, ["scoped"])

    def test_file_secret_with_default_template(self):
        m = marker()
        a = py_request("localhost", st.origin.port, "POST", "/v1/messages/" + m,
                       [("X-Api-Key", PH_ANTHROPIC), ("Content-Type", "application/json")],
                       b'{"max_tokens": 5}')
        rec = self.one_request(m)
        self.assertEqual(header_values(rec, "x-api-key"), [st.anthropic],
                         "the file's trailing CR/LF is stripped, template is {secret}")
        self.assert_masked_echo(a, rec, st.anthropic)
        self.assert_injected_allow(m, ["anthropic"])

    def test_two_credentials_in_one_request(self):
        m = marker()
        a = curl1(url_a("/both/" + m), "-H", "Authorization: Bearer " + PH_OPENAI,
                  "-H", "x-api-key: " + PH_ANTHROPIC)
        rec = self.one_request(m)
        self.assertEqual(header_values(rec, "Authorization"), ["Bearer " + st.openai])
        self.assertEqual(header_values(rec, "x-api-key"), [st.anthropic])
        self.assertEqual(a.status, 200, a)
        for s in (st.openai, st.anthropic):
            self.assertNotIn(s.encode(), a.body)
            for v in a.headers.values():
                self.assertNotIn(s, v)
        self.assertEqual(a.headers.get("x-echo-api-key"), stars(st.anthropic))
        self.assert_injected_allow(m, ["anthropic", "openai"])

    def test_query_placeholder_is_replaced_and_encoded(self):
        for label, q in (("plain", "key=" + PH_MAPS),
                         ("percent-encoded placeholder", "key=" + urllib.parse.quote(PH_MAPS,
                                                                                      safe=""))):
            with self.subTest(label):
                m = marker()
                a = py_request("localhost", st.origin.port, "GET",
                               "/maps/%s?model=gpt&%s&x=1" % (m, q))
                rec = self.one_request(m)
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(rec["path"]).query,
                                              keep_blank_values=True)
                self.assertEqual(query.get("key"), [st.maps], rec["path"])
                self.assertEqual(query.get("model"), ["gpt"])
                self.assertEqual(query.get("x"), ["1"])
                self.assertNotIn(PH_MAPS, urllib.parse.unquote(rec["path"]))
                self.assert_masked_echo(a, rec, st.maps)
                self.assertEqual(a.headers.get("x-echo-key"), stars(st.maps))
                self.assert_injected_allow(m, ["maps"])
        m = marker()
        a = curl1(url_a("/maps/%s?key=%s" % (m, PH_MAPS)))
        rec = self.one_request(m)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(rec["path"]).query)
        self.assertEqual(query.get("key"), [st.maps], rec["path"])
        self.assert_masked_echo(a, rec, st.maps)

    def test_credential_without_identities_serves_any_identity(self):
        for source, identity in ((SRC_OTHER, "other"), (SRC_LIMITED, "limited")):
            m = marker()
            a = py_request("localhost", st.origin.port, "GET", "/any/" + m,
                           [("x-api-key", PH_ANTHROPIC)], source=source)
            rec = self.one_request(m)
            self.assertEqual(header_values(rec, "x-api-key"), [st.anthropic], identity)
            self.assert_masked_echo(a, rec, st.anthropic)
            self.assert_injected_allow(m, ["anthropic"], identity=identity)
        m = marker()
        a = curl1(url_a("/any-curl/" + m), "-H", "X-API-Key: " + PH_ANTHROPIC,
                  source=SRC_OTHER)
        self.assertEqual(header_values(self.one_request(m), "x-api-key"), [st.anthropic])
        self.assert_injected_allow(m, ["anthropic"], identity="other")

    def test_python_urllib_with_https_proxy(self):
        m = marker()
        script = (
            "import json, os, ssl, sys, urllib.request\n"
            "ctx = ssl.create_default_context(cafile=os.environ['SLUICE_CA'])\n"
            "opener = urllib.request.build_opener(urllib.request.ProxyHandler(),\n"
            "                                     urllib.request.HTTPSHandler(context=ctx))\n"
            "req = urllib.request.Request(sys.argv[1], data=b'{\"q\": 1}', headers={\n"
            "    'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'],\n"
            "    'Content-Type': 'application/json'})\n"
            "with opener.open(req, timeout=20) as r:\n"
            "    json.dump({'status': r.status, 'headers': dict(r.getheaders()),\n"
            "               'body': r.read().decode()}, sys.stdout)\n")
        # The agent's "key" is the placeholder.
        env = agent_env(HTTPS_PROXY="http://127.0.0.1:%d" % st.proxy_port,
                        SLUICE_CA=st.sluice_ca, OPENAI_API_KEY=PH_OPENAI)
        r = tp.run([sys.executable, "-c", script, url_a("/urllib/" + m)], env=env)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        out = json.loads(r.stdout)
        rec = self.one_request(m)
        self.assertEqual(header_values(rec, "Authorization"), ["Bearer " + st.openai])
        self.assertEqual(out["status"], 200)
        self.assertNotIn(st.openai, r.stdout.decode())
        self.assertEqual(out["body"].encode(),
                         rec["response"].replace(st.openai.encode(), stars(st.openai).encode()))
        echoed = {k.lower(): v for k, v in out["headers"].items()}
        self.assertEqual(echoed.get("x-echo-authorization"), "Bearer " + stars(st.openai))
        self.assert_injected_allow(m, ["openai"])

    def test_keep_alive_injects_per_request_only(self):
        m1, m2, m3 = marker(), marker(), marker()
        conn = py_connection("localhost", st.origin.port)
        try:
            a1 = py_request("localhost", st.origin.port, "GET", "/ka/" + m1,
                            [("Authorization", "Bearer " + PH_OPENAI)], conn=conn)
            a2 = py_request("localhost", st.origin.port, "GET", "/ka/" + m2, [], conn=conn)
            a3 = py_request("localhost", st.origin.port, "GET", "/ka/" + m3,
                            [("x-api-key", PH_ANTHROPIC)], conn=conn)
        finally:
            conn.close()
        self.assertEqual([a1.status, a2.status, a3.status], [200, 200, 200])
        r1, r2, r3 = self.one_request(m1), self.one_request(m2), self.one_request(m3)
        self.assertEqual(header_values(r1, "Authorization"), ["Bearer " + st.openai])
        self.assertEqual(header_values(r2, "Authorization"), [], "no header carried over")
        self.assertEqual(header_values(r2, "x-api-key"), [])
        self.assertEqual(header_values(r3, "x-api-key"), [st.anthropic])
        self.assertEqual(header_values(r3, "Authorization"), [])
        self.assert_masked_echo(a1, r1, st.openai)
        self.assert_masked_echo(a3, r3, st.anthropic)
        self.assert_injected_allow(m1, ["openai"])
        self.assert_injected_allow(m3, ["anthropic"])


# ---------------------------------------------------------------- scope

class t3_scope_test(base):
    def test_placeholder_outside_its_place_or_scope_is_denied(self):
        a_port, b_port = st.origin.port, st.origin_b.port
        ok_auth = ("Authorization", "Bearer " + PH_OPENAI)
        cases = [
            # label, host, port, source, path (with {m}), headers, credential names
            ("in another header", "localhost", a_port, SRC_AGENT, "/h/{m}",
             [("X-Forward-Auth", "Bearer " + PH_OPENAI)], ["openai"]),
            ("query credential in a header", "localhost", a_port, SRC_AGENT, "/h/{m}",
             [("X-Maps", PH_MAPS)], ["maps"]),
            ("in another credential's header", "localhost", a_port, SRC_AGENT, "/h/{m}",
             [("x-api-key", PH_OPENAI)], ["openai"]),
            ("placeholder in Authorization of an x-api-key credential", "localhost", a_port,
             SRC_AGENT, "/h/{m}", [("Authorization", "Bearer " + PH_ANTHROPIC)],
             ["anthropic"]),
            ("in the URL path", "localhost", a_port, SRC_AGENT, "/p/" + PH_OPENAI + "/{m}",
             [], ["openai"]),
            ("in another query parameter", "localhost", a_port, SRC_AGENT,
             "/q/{m}?q=" + PH_MAPS, [], ["maps"]),
            ("header credential in the query parameter", "localhost", a_port, SRC_AGENT,
             "/q/{m}?key=" + PH_OPENAI, [], ["openai"]),
            ("other host", "127.0.0.1", a_port, SRC_AGENT, "/h/{m}", [ok_auth], ["openai"]),
            ("other port", "localhost", b_port, SRC_AGENT, "/h/{m}", [ok_auth], ["openai"]),
            ("query credential to another port", "localhost", b_port, SRC_AGENT,
             "/q/{m}?key=" + PH_MAPS, [], ["maps"]),
            ("identity not listed by the credential", "localhost", a_port, SRC_OTHER,
             "/h/{m}", [ok_auth], ["openai"]),
            ("identity whose policy does not list it", "localhost", a_port, SRC_LIMITED,
             "/h/{m}", [ok_auth], ["openai"]),
            ("any-identity credential not in the policy list", "localhost", a_port,
             SRC_LIMITED, "/q/{m}?key=" + PH_MAPS, [], ["maps"]),
            ("ports default to 443", "localhost", a_port, SRC_AGENT, "/h/{m}",
             [("X-Def-Key", PH_DEFPORT)], ["defport"]),
            ("outside the credential's path_prefix", "localhost", a_port, SRC_AGENT,
             "/v2/{m}", [("X-Scoped-Key", PH_SCOPED)], ["scoped"]),
            ("dot-segment out of the path_prefix", "localhost", a_port, SRC_AGENT,
             "/v1/../admin/{m}", [("X-Scoped-Key", PH_SCOPED)], ["scoped"]),
            ("encoded dot-segment out of the path_prefix", "localhost", a_port, SRC_AGENT,
             "/v1/%2e%2e/admin/{m}", [("X-Scoped-Key", PH_SCOPED)], ["scoped"]),
            ("encoded slash in the path_prefix", "localhost", a_port, SRC_AGENT,
             "/v1/..%2fadmin/{m}", [("X-Scoped-Key", PH_SCOPED)], ["scoped"]),
            ("a valid injection plus a stray placeholder", "localhost", a_port, SRC_AGENT,
             "/h/{m}", [ok_auth, ("X-Debug", PH_ANTHROPIC)], ["anthropic"]),
        ]
        for label, host, port, source, path, headers, names in cases:
            with self.subTest(label):
                m = marker()
                a = py_request(host, port, "GET", path.replace("{m}", m), headers,
                               source=source)
                self.assert_scope_denied(a, m, names)

    def test_curl_out_of_scope_is_denied(self):
        m = marker()
        a = curl1(url_a("/h/" + m, host="127.0.0.1"), "-H",
                  "Authorization: Bearer " + PH_OPENAI)
        self.assert_scope_denied(a, m, ["openai"])
        m = marker()
        a = curl1(url_a("/h/" + m), "-H", "Authorization: Bearer " + PH_OPENAI,
                  source=SRC_OTHER)
        self.assert_scope_denied(a, m, ["openai"])
        m = marker()
        a = curl1("https://localhost:%d/h/%s" % (st.origin_b.port, m), "-H",
                  "x-api-key: " + PH_ANTHROPIC)
        self.assert_scope_denied(a, m, ["anthropic"])

    def test_plain_http_placeholder_is_denied(self):
        m = marker()
        a = plain_request("GET", "/plain/" + m, [("Authorization", "Bearer " + PH_OPENAI)])
        self.assert_scope_denied(a, m, ["openai"])

    def test_secret_is_never_sent_in_cleartext_even_when_host_and_port_match(self):
        # `cleartext` lists the plain-HTTP origin's host and port: still never injected
        # into an unencrypted request.
        m = marker()
        a = plain_request("GET", "/plain/" + m, [("X-Clear-Key", PH_CLEAR)])
        self.assert_scope_denied(a, m, ["cleartext"])
        self.assertFalse(st.plain.saw(st.scoped))


# ---------------------------------------------------------------- bodies

class t4_body_test(base):
    def test_placeholder_in_body_is_forwarded_unchanged(self):
        body = json.dumps({"note": "keys: %s %s %s" % (PH_OPENAI, PH_ANTHROPIC, PH_MAPS),
                           "key": PH_MAPS}).encode()
        for label, host, port, origin in (("in scope", "localhost", st.origin.port, st.origin),
                                          ("other host", "127.0.0.1", st.origin.port,
                                           st.origin),
                                          ("other port", "localhost", st.origin_b.port,
                                           st.origin_b)):
            with self.subTest(label):
                m = marker()
                a = py_request(host, port, "POST", "/body/" + m,
                               [("Content-Type", "application/json")], body)
                self.assertEqual(a.status, 200, a)
                rec = self.one_request(m, origin)
                self.assertEqual(rec["body"], body)
                self.assertEqual(header_values(rec, "Authorization"), [])
                self.assertEqual(a.body, rec["response"])
        m = marker()
        a = curl1(url_a("/body-curl/" + m), "-H", "Content-Type: application/x-www-form-urlencoded",
                  data=("key=%s&auth=Bearer+%s" % (PH_MAPS, PH_OPENAI)).encode())
        self.assertEqual(a.status, 200, a)
        self.assertEqual(self.one_request(m)["body"],
                         ("key=%s&auth=Bearer+%s" % (PH_MAPS, PH_OPENAI)).encode())

    def test_header_injection_leaves_a_body_placeholder_alone(self):
        m = marker()
        body = b'{"prompt": "say sluice:openai"}'
        a = py_request("localhost", st.origin.port, "POST", "/mix/" + m,
                       [("Authorization", "Bearer " + PH_OPENAI),
                        ("Content-Type", "application/json")], body)
        rec = self.one_request(m)
        self.assertEqual(header_values(rec, "Authorization"), ["Bearer " + st.openai])
        self.assertEqual(rec["body"], body)
        self.assert_masked_echo(a, rec, st.openai)
        self.assert_injected_allow(m, ["openai"])


# ---------------------------------------------------------------- the real secret

class t5_protected_test(base):
    def test_real_secrets_sent_by_the_client_are_denied(self):
        o, b = st.origin.port, st.origin_b.port
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        cases = [
            # label, host, port, path, headers, body
            ("openai raw in its own header", "localhost", o, "/d/{m}",
             [("Authorization", "Bearer " + st.openai)], b""),
            ("openai raw in another header, other host", "127.0.0.1", o, "/d/{m}",
             [("X-Data", st.openai)], b""),
            ("openai base64 in a body, other port", "localhost", b, "/d/{m}",
             [("Content-Type", "text/plain")], b64(st.openai).encode()),
            ("openai percent-encoded in a query", "localhost", o,
             "/d/{m}?q=" + pct_all(st.openai), [], b""),
            ("anthropic raw in its own header", "localhost", o, "/d/{m}",
             [("x-api-key", st.anthropic)], b""),
            ("anthropic raw in a body", "localhost", b, "/d/{m}",
             [("Content-Type", "text/plain")], ("note " + st.anthropic).encode()),
            ("maps in its own query parameter", "localhost", o,
             "/d/{m}?key=" + urllib.parse.quote(st.maps, safe=""), [], b""),
            ("maps base64 in a header", "127.0.0.1", o, "/d/{m}",
             [("X-Data", b64(st.maps))], b""),
            ("defport raw in a body", "localhost", o, "/d/{m}", [], st.defport.encode()),
            ("protected env value raw in a body", "localhost", o, "/d/{m}", [],
             ("v=" + st.protected_env).encode()),
            ("protected env value base64 in a header", "localhost", b, "/d/{m}",
             [("X-Data", b64(st.protected_env))], b""),
            ("protected file value percent-encoded in a query", "127.0.0.1", o,
             "/d/{m}?v=" + pct_all(st.protected_file_value), [], b""),
        ]
        for label, host, port, path, headers, body in cases:
            with self.subTest(label):
                m = marker()
                a = py_request(host, port, "POST" if body else "GET",
                               path.replace("{m}", m), headers, body)
                self.assert_protected_denied(a, m)

    def test_curl_and_plain_http_real_secret_is_denied(self):
        m = marker()
        a = curl1(url_a("/d/" + m), "-H", "Content-Type: application/json",
                  data=json.dumps({"openai_key": st.openai}).encode())
        self.assert_protected_denied(a, m)
        m = marker()
        a = curl1(url_a("/d/" + m), "-H", "x-api-key: " + st.anthropic, source=SRC_OTHER)
        self.assert_protected_denied(a, m)
        m = marker()
        a = plain_request("POST", "/d/" + m, [("Content-Type", "text/plain")],
                          base64.b64encode(st.openai.encode()))
        self.assert_protected_denied(a, m)


# ---------------------------------------------------------------- response reflection

class t6_reflection_test(base):
    def test_reflection_split_over_small_chunks_is_masked(self):
        for label, headers, secret in (
                ("openai", ["-H", "Authorization: Bearer " + PH_OPENAI], st.openai),
                ("anthropic", ["-H", "x-api-key: " + PH_ANTHROPIC], st.anthropic)):
            with self.subTest(label):
                m = marker()
                a = curl1(url_a("/chunked/" + m), *headers)
                rec = self.one_request(m)
                self.assert_masked_echo(a, rec, secret)

    def test_query_secret_reflection_is_masked(self):
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/chunked/%s?key=%s" % (m, PH_MAPS))
        rec = self.one_request(m)
        self.assert_masked_echo(a, rec, st.maps)


class t6b_response_head_test(base):
    """Reflections outside the plain head and body (a fresh-user break test found each)."""

    def test_trailer_interim_reason_and_stored_reflections_are_masked(self):
        hdr = ("Authorization", "Bearer " + PH_OPENAI)
        want = "Bearer " + stars(st.openai)
        m = marker()
        code, blocks, bodies, _, err = tp.curl(
            [url_a("/v1/trailer/" + m), url_a("/v1/early/" + m), url_a("/v1/reason/" + m)],
            "-H", "%s: %s" % hdr)
        self.assertEqual(code, 0, err)
        dump = json.dumps(blocks) + repr(bodies)
        self.assertNotIn(st.openai, dump)
        # blocks: CONNECT, trailer answer, 103, 200, 401 (curl -D shows interim answers)
        statuses = [b[0] for b in blocks]
        self.assertIn(103, statuses, blocks)
        early = blocks[statuses.index(103)][1]
        self.assertEqual(early.get("x-early-auth"), want, blocks)
        self.assertEqual(bodies[0], b"hello")
        self.assertIn(401, statuses, blocks)
        for o in (st.origin,):
            self.assertEqual(len(o.requests_for(m)), 3)
        # A secret the API stored on an earlier exchange comes back on a later one that
        # injected nothing.
        m2 = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/chat/" + m2, [hdr])
        self.assertEqual(a.status, 200, a)
        b = py_request("localhost", st.origin.port, "GET", "/v1/last/" + m2)
        self.assertEqual(b.status, 200, b)
        self.assertEqual(b.headers.get("x-stored-auth"), want, b)
        self.assertEqual(json.loads(b.body)["stored"], want)

    def test_re_cased_reversed_escaped_and_cut_reflections_are_masked(self):
        # Issue 25 (red-team item 9): the stored secret echoed in eight other shapes. Not
        # one run of 12 characters of any of them reaches the client; the answer keeps
        # its length.
        hdr = ("Authorization", "Bearer " + PH_OPENAI)
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/chat/" + m, [hdr])
        self.assertEqual(a.status, 200, a)
        b = py_request("localhost", st.origin.port, "GET", "/v1/transformed/" + m)
        self.assertEqual(b.status, 200, b)
        sec = st.openai
        u = "".join("\\u%04X" % ord(c) for c in sec)
        shapes = [sec.upper(), sec.lower(), sec[::-1], u, sec, sec[:20], sec[8:28]]
        text = b.body.decode()
        for shape in shapes:
            for i in range(0, len(shape) - 11):
                self.assertNotIn(shape[i:i + 12].lower(), text.lower(), shape)
        got = json.loads(text)
        self.assertEqual(len(got), 8)
        self.assertEqual(got[5], stars(sec[:16]) + " " + stars(sec[16:]))
        self.assertEqual(got[6], stars(sec[:20]))
        self.assertEqual(got[7], stars(sec[8:28]))

    def test_stored_secret_returned_encoded_on_another_connection_is_refused(self):
        # The secret goes upstream on one connection; a later request on another
        # connection, which injects nothing, asks for the stored value: sluice asked for
        # identity there too, and the gzip answer (which the masker cannot read) is refused.
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/chat/" + m,
                       [("Authorization", "Bearer " + PH_OPENAI)])
        self.assertEqual(a.status, 200, a)
        b = py_request("localhost", st.origin.port, "GET", "/v1/last-gz/" + m,
                       [("Accept-Encoding", "gzip")])
        self.assert_sluice_answer(b, 502, "upstream_encoding")
        self.assertNotIn(st.openai.encode(), b.body)
        second = [r for r in st.origin.requests_for(m) if "/last-gz/" in r["path"]]
        self.assertEqual(len(second), 1, st.origin.requests_for(m))
        self.assertEqual(header_values(second[0], "Accept-Encoding"), ["identity"], second[0])

    def test_stored_secret_in_a_declined_websocket_upgrade_coded_is_refused(self):
        # The same stored secret, asked for with a WebSocket upgrade the origin declines
        # (200, gzip): the declined answer is relayed to the client only when the masker
        # can read it, so this one is refused too.
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/chat/" + m,
                       [("Authorization", "Bearer " + PH_OPENAI)])
        self.assertEqual(a.status, 200, a)
        upgrade = [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                   ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                   ("Sec-WebSocket-Version", "13"), ("Accept-Encoding", "gzip")]
        b = py_request("localhost", st.origin.port, "GET", "/v1/last-gz/" + m, upgrade)
        self.assert_sluice_answer(b, 502, "upstream_encoding")
        self.assertNotIn(st.openai.encode(), b.body)
        second = [r for r in st.origin.requests_for(m) if "/last-gz/" in r["path"]]
        self.assertEqual(len(second), 1, st.origin.requests_for(m))

    def test_declined_websocket_upgrade_reason_phrase_is_masked(self):
        # The origin declines the upgrade with the injected Authorization in its reason
        # phrase: the status line the client gets is masked like the rest of the answer.
        m = marker()
        conn = py_connection("localhost", st.origin.port)
        try:
            conn.putrequest("GET", "/v1/reason/" + m, skip_accept_encoding=True)
            for k, v in (("Upgrade", "websocket"), ("Connection", "Upgrade"),
                         ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                         ("Sec-WebSocket-Version", "13"),
                         ("Authorization", "Bearer " + PH_OPENAI)):
                conn.putheader(k, v)
            conn.endheaders()
            r = conn.getresponse()
            body = r.read()
        finally:
            conn.close()
        self.assertEqual(r.status, 401)
        self.assertEqual(r.reason, "Invalid Bearer " + stars(st.openai))
        self.assertNotIn(st.openai.encode(), body)
        self.assertEqual(len(st.origin.requests_for(m)), 1)

    def test_encoded_response_after_an_injection_is_refused(self):
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/v1/two-ce/" + m,
                       [("Authorization", "Bearer " + PH_OPENAI)])
        self.assert_sluice_answer(a, 502, "upstream_encoding")
        self.assertNotIn(st.openai.encode(), a.body)


# ---------------------------------------------------------------- reload

class t7_reload_test(base):
    def admin(self, method, path):
        with open(os.path.join(st.data_dir, "admin.token")) as f:
            token = f.read().strip()
        # A reload recompiles the rules: slow under the sanitizer build.
        conn = http.client.HTTPConnection("127.0.0.1", st.admin_port,
                                          timeout=tp.START_TIMEOUT_S)
        try:
            conn.request(method, path, headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def anthropic_seen(self):
        m = marker()
        a = py_request("localhost", st.origin.port, "GET", "/reload/" + m,
                       [("x-api-key", PH_ANTHROPIC)])
        rec = self.one_request(m)
        return a, rec, header_values(rec, "x-api-key")

    def test_rewritten_secret_file_is_used_after_reload(self):
        old = st.anthropic
        new = "ak-test-" + rand(40)
        st.all_secrets.append(new)
        write_atomic(st.anthropic_file, (new + "\n").encode())
        status, body = self.admin("POST", "/v1/reload")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body).get("result"), "ok", body)
        st.anthropic = new
        a, rec, seen = self.anthropic_seen()
        self.assertEqual(seen, [new], "the reloaded secret is injected")
        self.assert_masked_echo(a, rec, new)
        m = marker()
        self.assert_protected_denied(py_request("127.0.0.1", st.origin.port, "GET", "/d/" + m,
                                                [("X-Data", new)]), m)

        # An emptied file is refused (FILE:LINE:COL naming it); the secret in use stays.
        write_atomic(st.anthropic_file, b"\n")
        status, body = self.admin("POST", "/v1/reload")
        self.assertEqual(status, 422, body)
        doc = json.loads(body)
        self.assertEqual(doc.get("reason"), "config_invalid", doc)
        self.assertTrue(any(re.search(re.escape(st.config) + r":\d+:\d+: ", p)
                            and st.anthropic_file in p for p in doc.get("problems", [])), doc)
        for s in st.all_secrets:
            self.assertNotIn(s.encode(), body)
        _, _, seen = self.anthropic_seen()
        self.assertEqual(seen, [new], "a refused reload keeps the previous secret")

        # SIGHUP reload.
        third = "ak-test-" + rand(40)
        st.all_secrets.append(third)
        write_atomic(st.anthropic_file, (third + "\n").encode())
        st.sluice.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + tp.START_TIMEOUT_S
        seen = None
        while time.monotonic() < deadline:
            _, _, seen = self.anthropic_seen()
            if seen == [third]:
                break
            time.sleep(0.2)
        self.assertEqual(seen, [third], "SIGHUP did not load the rewritten secret")
        st.anthropic = third
        self.assertNotEqual(old, third)


# ---------------------------------------------------------------- never

class t9_never_test(base):
    """Runs last (name order): no secret of the run in sluice's output or the audit."""

    def test_secrets_never_in_logs_or_audit(self):
        time.sleep(0.3)
        data, records = tp.read_audit()
        self.assertTrue(records)
        st.stderr.flush()
        st.stdout.flush()
        log = stderr_text()
        with open(os.path.join(st.tmp, "sluice.stdout"), "rb") as f:
            out = f.read().decode(errors="replace")
        self.assertTrue(log, "sluice logged nothing at debug level")
        leaks = []
        for s in st.all_secrets:
            for form in (s, base64.b64encode(s.encode()).decode(),
                         urllib.parse.quote(s, safe=""), pct_all(s)):
                for where, text in (("audit", data.decode(errors="replace")),
                                    ("stderr", log), ("stdout", out)):
                    for line in text.splitlines():
                        if form in line:
                            leaks.append("%s: %s" % (where, line[:600]))
        self.assertEqual(leaks, [], "a secret is in sluice's output or audit")
        names = {"openai", "anthropic", "maps", "defport", "scoped", "cleartext"}
        with_creds = [r for r in records if r.get("credentials")]
        self.assertTrue(with_creds)
        for r in with_creds:
            self.assertTrue(set(r["credentials"]) <= names, r)
        r = subprocess.run([tp.sluice_binary(), "audit", "verify", st.audit],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
