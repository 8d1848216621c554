#!/usr/bin/env python3
"""End-to-end tests: real clients (curl, Python urllib, Node) through a real `sluice run`
to real TLS origins on loopback. Standard library only.

Run by ctest (tests/e2e/CMakeLists.txt) with SLUICE_BIN set to the built binary, or by
hand:  SLUICE_BIN=build/sluice python3 tests/e2e/test_proxy.py -v

Per run, in a fresh temporary directory:
  * a throwaway test CA and an origin certificate for localhost + 127.0.0.1 (openssl CLI);
  * a TLS origin (certificate from the test CA), a TLS origin with a self-signed
    certificate (must give 502 upstream_tls) and a plain HTTP origin, all recording every
    request they receive;
  * a sluice config trusting only the test CA upstream, and `sluice run --config` on a
    free port. sluice creates its own interception CA in its data dir; clients trust that.

Every wait is bounded; processes and servers are stopped in tearDownModule and atexit.
"""

import atexit
import hashlib
import http.client
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
# Start-up compiles the rule pack; under the sanitizer build on a loaded 2-core machine
# that takes far longer than in a release build.
START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
CLIENT_TIMEOUT_S = 30.0
AUDIT_WAIT_S = 10.0

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def base62_fixed(value, width):
    out = []
    for _ in range(width):
        out.append(BASE62[value % 62])
        value //= 62
    return "".join(reversed(out))


def github_classic_token():
    """A fresh ghp_ token with a valid checksum: 30 random base62 characters, then the
    6-character base62 of the CRC32 of those 30 (left-padded with '0')."""
    body = "".join(secrets.choice(BASE62) for _ in range(30))
    return "ghp_" + body + base62_fixed(zlib.crc32(body.encode()) & 0xFFFFFFFF, 6)


def free_port():
    # The port may in principle be taken again before sluice binds it; the start-up wait
    # reports that clearly (sluice exits) instead of hanging.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_env(**extra):
    """Environment for client subprocesses: no inherited proxy settings or bypass lists."""
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                                "ssl_cert_file", "curl_ca_bundle", "requests_ca_bundle",
                                "node_extra_ca_certs")}
    env.update(extra)
    return env


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=CLIENT_TIMEOUT_S, **kw)


# ---------------------------------------------------------------- certificates

def openssl(*args, cwd):
    r = run(["openssl", *args], cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.decode(errors="replace")))


def make_certificates(d):
    """Test CA, origin leaf signed by it, and a self-signed leaf for the bad origin."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "test-ca.key", "-out", "test-ca.pem", "-days", "2",
            "-subj", "/CN=sluice e2e test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    with open(os.path.join(d, "origin.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "origin.key", "-out", "origin.csr", "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", "origin.csr", "-CA", "test-ca.pem", "-CAkey", "test-ca.key",
            "-CAcreateserial", "-out", "origin.pem", "-days", "2", "-extfile", "origin.ext",
            cwd=d)
    # Same names, but self-signed: sluice must refuse it (not in upstream.ca_file).
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "bad.key", "-out", "bad.pem", "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", cwd=d)


# ---------------------------------------------------------------- origins

def read_request_body(h):
    """The request body on handler `h` (a BaseHTTPRequestHandler): Content-Length or
    chunked (trailers read and dropped). Shared by the e2e suites' origins."""
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(h.rfile.read(size))
            h.rfile.readline()
    return h.rfile.read(int(h.headers.get("Content-Length", "0") or 0))


class answer:
    """An answer as a test client saw it: status, headers (lower-case names), body."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "answer(%s %r %r)" % (self.status, self.headers, self.body[:400])


class recording_origin:
    """A threaded HTTP/1.1 origin (optionally TLS) that records every request and answers
    JSON describing it. `records` holds dicts: method, path, headers (list of pairs),
    body (bytes), client_port, response (the exact body bytes sent back)."""

    def __init__(self, name, certfile=None, keyfile=None):
        self.name = name
        self.records = []
        self.lock = threading.Lock()
        self.release = threading.Event()  # /stream/: the second event waits for it
        origin = self

        class handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = CLIENT_TIMEOUT_S

            def log_message(self, *args):
                pass

            def read_body(self):
                return read_request_body(self)

            def handle_any(self):
                origin.respond(self, self.read_body())

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any

        tls = None
        if certfile:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(certfile, keyfile)

        class server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address):
                # The TLS handshake runs in the per-connection thread, so a client that
                # stalls or rejects the certificate never blocks the accept loop.
                if tls is None:
                    return super().finish_request(request, client_address)
                request.settimeout(CLIENT_TIMEOUT_S)
                with tls.wrap_socket(request, server_side=True) as wrapped:
                    super().finish_request(wrapped, client_address)

            def handle_error(self, request, client_address):
                pass  # refused handshakes are expected (the bad-certificate origin)

        self.server = server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def respond(self, h, body):
        """Answers one request on handler `h` (a BaseHTTPRequestHandler) whose body has
        been read; subclasses answer differently (test_credentials.py's echo origin)."""
        answer = json.dumps({
            "origin": self.name,
            "method": h.command,
            "path": h.path,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_length": len(body),
            "nonce": secrets.token_hex(8),  # makes every answer unique
        }, sort_keys=True).encode()
        with self.lock:
            self.records.append({
                "method": h.command,
                "path": h.path,
                "headers": list(h.headers.items()),
                "body": body,
                "client_port": h.client_address[1],
                "response": answer,
            })
        if "/stream/" in h.path:
            # Server-sent events: the second event is only sent once the test has seen
            # the first through sluice, so a proxy that buffers the body never delivers.
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for i, event in enumerate((b"data: first\n\n", b"data: second\n\n")):
                if i == 1:
                    self.release.wait(15)
                h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            return
        if "/close-delimited/" in h.path:
            # HTTP/1.0 style: no length, the body ends when the connection closes (and the
            # TLS server here closes without close_notify, as many origins do).
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(answer)
            h.close_connection = True
            return
        if "/empty/" in h.path:
            answer = b""  # an empty 200 with Content-Length: 0 on a kept-alive connection
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(answer)))
        h.end_headers()
        h.wfile.write(answer)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def snapshot(self):
        with self.lock:
            return list(self.records)

    def requests_for(self, path_marker):
        return [r for r in self.snapshot() if path_marker in r["path"]]

    def saw_bytes(self, needle):
        needle_b = needle.encode()
        for r in self.snapshot():
            if needle in r["path"] or needle_b in r["body"]:
                return True
            if any(needle in k or needle in v for k, v in r["headers"]):
                return True
        return False


# ---------------------------------------------------------------- the run

class env_state:
    tmp = None
    origin = None
    bad_origin = None
    plain_origin = None
    sluice = None
    sluice_stderr = None
    sluice_stdout = None
    proxy_port = None
    unlisted_port = None
    sluice_ca = None
    audit_path = None
    token = None
    denied_flows = []  # flow ids of every dlp_finding answer the tests received


S = env_state


def sluice_binary():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    if not os.access(path, os.X_OK):
        raise RuntimeError("SLUICE_BIN=%s is not executable" % path)
    return path


def write_config(path, data_dir):
    ports = ", ".join(str(p) for p in (S.origin.port, S.bad_origin.port, S.plain_origin.port))
    admin_port, metrics_port = free_port(), free_port()
    with open(path, "w") as f:
        f.write(f"""version: 1
data_dir: {data_dir}
listeners:
  - address: 127.0.0.1:{S.proxy_port}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(S.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: local
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: local
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{ports}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: deny
    private_destinations: [127.0.0.1/32, "::1/128"]
admin: {{address: "127.0.0.1:{admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{metrics_port}"}}
audit: {{path: {S.audit_path}, fsync: always}}
""")


def wait_for_port(port, proc, deadline_s):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def admin_reload(admin_port, data_dir):
    """POST /v1/reload on sluice's admin listener with the token from `data_dir`; returns
    (status, body) once the reload has been applied or refused."""
    with open(os.path.join(data_dir, "admin.token")) as f:
        token = f.read().strip()
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=START_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/reload", headers={"Authorization": "Bearer " + token})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class agent_run:
    """One `sluice run` for a suite that needs one identity and one origin: a listener on
    a free port for identity `agent`, `rules` (YAML list items at the rules' indent)
    before the rule that allows and inspects `origin` (a recording_origin on localhost)
    with `dlp` (a YAML flow mapping), the test CA trusted upstream, the audit fsync'd.
    Waits for the port; raises RuntimeError (after stopping what it started) when sluice
    does not open it. Attributes: proc, port, data_dir, ca (sluice's CA), audit_path,
    log. `stop()` ends it as stop_run does, origin and scratch folder included."""

    def __init__(self, tmp, origin, rules="", dlp="{detectors: [all], on_finding: deny}"):
        self.tmp, self.origin = tmp, origin
        self.port = free_port()
        self.data_dir = os.path.join(tmp, "data")
        self.audit_path = os.path.join(tmp, "audit.jsonl")
        self.ca = os.path.join(self.data_dir, "ca.pem")
        config = os.path.join(tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(f"""version: 1
data_dir: {self.data_dir}
listeners:
  - address: 127.0.0.1:{self.port}
    identity: agent
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: agent
policies:
  - identity: agent
    rules:
{rules}      - hosts: ["localhost"]
        ports: [{origin.port}]
        action: allow
    dlp: {dlp}
    private_destinations: [127.0.0.1/32]
admin: {{address: "127.0.0.1:{free_port()}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{free_port()}"}}
audit: {{path: {self.audit_path}, fsync: always}}
""")
        self.log = open(os.path.join(tmp, "sluice.log"), "wb")
        self.proc = subprocess.Popen([sluice_binary(), "run", "--config", config],
                                     stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=client_env())
        if not wait_for_port(self.port, self.proc, START_TIMEOUT_S):
            self.stop()
            raise RuntimeError("sluice did not start")

    def stop(self):
        stop_run(self.proc, (self.origin,), (self.log,), self.tmp)


def stop_run(proc, origins, files, tmp):
    """Ends one suite's run: sluice (SIGTERM, SIGKILL after 10 s), the origins, the log
    files, and the scratch folder (kept when SLUICE_E2E_KEEP is set). Shared by the e2e
    suites that import this module."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for o in origins:
        if o is not None:
            try:
                o.stop()
            except Exception:
                pass
    for f in files:
        if f is not None and not f.closed:
            f.close()
    try:
        assert_no_secret_in_audits(tmp)
    finally:
        if tmp and os.path.isdir(tmp) and not os.environ.get("SLUICE_E2E_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


def assert_no_secret_in_audits(tmp):
    """Every audit log a suite's run wrote (audit*.jsonl, rotated ones too) holds no
    secret: `sluice scan` over it finds nothing (CONTRACT.md: the secret never appears in
    a record). Raises AssertionError naming the file and the rules found."""
    path = os.environ.get("SLUICE_BIN")
    if not path or not tmp or not os.path.isdir(tmp):
        return
    audits = []
    for root, _, names in os.walk(tmp):
        audits += [os.path.join(root, n) for n in names if n.startswith("audit")
                   and ".jsonl" in n and not n.endswith(".lock")]
    if not audits:
        return
    r = subprocess.run([path, "scan", "--format", "jsonl", *audits], capture_output=True,
                       timeout=START_TIMEOUT_S)
    if r.returncode != 0:
        rules = sorted({json.loads(line).get("rule", "?") for line in r.stdout.splitlines()
                        if line.strip().startswith(b"{")})
        raise AssertionError("sluice scan found %s in the audit log(s) %s (exit %d): %s" %
                             (rules, audits, r.returncode, r.stderr.decode(errors="replace")[:500]))


def stop_everything():
    stop_run(S.sluice, (S.origin, S.bad_origin, S.plain_origin),
             (S.sluice_stderr, S.sluice_stdout), S.tmp)
    S.origin = S.bad_origin = S.plain_origin = None


def sluice_stderr_text():
    if S.tmp is None:
        return ""
    try:
        with open(os.path.join(S.tmp, "sluice.stderr"), "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def setUpModule():
    binary = sluice_binary()
    atexit.register(stop_everything)
    S.tmp = tempfile.mkdtemp(prefix="sluice-e2e-")
    make_certificates(S.tmp)
    S.origin = recording_origin("good", os.path.join(S.tmp, "origin.pem"),
                                os.path.join(S.tmp, "origin.key"))
    S.bad_origin = recording_origin("bad", os.path.join(S.tmp, "bad.pem"),
                                    os.path.join(S.tmp, "bad.key"))
    S.plain_origin = recording_origin("plain")
    S.proxy_port = free_port()
    S.unlisted_port = free_port()
    S.audit_path = os.path.join(S.tmp, "audit.jsonl")
    S.token = github_classic_token()
    data_dir = os.path.join(S.tmp, "data")
    config = os.path.join(S.tmp, "sluice.yaml")
    write_config(config, data_dir)

    S.sluice_stderr = open(os.path.join(S.tmp, "sluice.stderr"), "wb")
    S.sluice_stdout = open(os.path.join(S.tmp, "sluice.stdout"), "wb")
    S.sluice = subprocess.Popen([binary, "run", "--config", config], stdout=S.sluice_stdout,
                                stderr=S.sluice_stderr, stdin=subprocess.DEVNULL,
                                env=client_env())
    if not wait_for_port(S.proxy_port, S.sluice, START_TIMEOUT_S):
        code = S.sluice.poll()
        stop_everything_msg = sluice_stderr_text()[-4000:]
        raise RuntimeError("sluice did not accept on 127.0.0.1:%d within %.0fs (exit %s); "
                           "stderr:\n%s" % (S.proxy_port, START_TIMEOUT_S, code,
                                            stop_everything_msg))
    S.sluice_ca = os.path.join(data_dir, "ca.pem")
    if not os.path.isfile(S.sluice_ca):
        raise RuntimeError("sluice is listening but created no CA at " + S.sluice_ca)


def tearDownModule():
    stop_everything()


# ---------------------------------------------------------------- clients

class response:
    def __init__(self, status, headers, body, phase):
        self.status = status
        self.headers = headers  # dict, lower-case names
        self.body = body
        self.phase = phase      # "connect" (answered to CONNECT) or "request"

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "response(%s %s %r %r)" % (self.phase, self.status, self.headers, self.body[:300])


def parse_header_dump(text):
    """curl -D output (may hold several blocks: CONNECT answer, then the real one).
    Returns the list of (status, {name: value}) blocks."""
    blocks, current = [], None
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("HTTP/"):
            current = (int(line.split()[1]), {})
            blocks.append(current)
        elif current and ":" in line:
            k, v = line.split(":", 1)
            current[1][k.strip().lower()] = v.strip()
    return blocks


def curl(urls, *extra, data=None, outputs=None):
    """Runs real curl through sluice. Returns (exit_code, header_blocks, bodies, stderr)."""
    d = tempfile.mkdtemp(dir=S.tmp)
    hfile = os.path.join(d, "headers")
    outs = outputs or [os.path.join(d, "body%d" % i) for i in range(len(urls))]
    cmd = ["curl", "-q", "-sS", "--max-time", "20", "--proxy",
           "http://127.0.0.1:%d" % S.proxy_port, "--cacert", S.sluice_ca, "-D", hfile,
           "-w", "%{http_code} %{num_connects}\\n", *extra]
    if data is not None:
        cmd += ["--data-binary", "@-"]
    for u, o in zip(urls, outs):
        cmd += [u, "-o", o]
    r = run(cmd, input=data, env=client_env())
    blocks = []
    if os.path.exists(hfile):
        with open(hfile, encoding="latin-1") as f:
            blocks = parse_header_dump(f.read())
    bodies = []
    for o in outs:
        if os.path.exists(o):
            with open(o, "rb") as f:
                bodies.append(f.read())
        else:
            bodies.append(None)
    return r.returncode, blocks, bodies, r.stdout.decode(), r.stderr.decode(errors="replace")


def via_proxy(host, port, method, path, headers=None, body=b"", tls=True):
    """A hand-driven client (Python's ssl + http.client) that shows every answer sluice
    gives, including a refused CONNECT's body, which curl does not print."""
    sock = socket.create_connection(("127.0.0.1", S.proxy_port), timeout=CLIENT_TIMEOUT_S)
    try:
        authority = "%s:%d" % (host, port)
        if tls:
            sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
                         .encode())
            resp = http.client.HTTPResponse(sock, method="CONNECT")
            resp.begin()
            if resp.status != 200:
                hdrs = {k.lower(): v for k, v in resp.getheaders()}
                return response(resp.status, hdrs, resp.read(), "connect")
            ctx = ssl.create_default_context(cafile=S.sluice_ca)
            sock = ctx.wrap_socket(sock, server_hostname=host)
            target = path
        else:
            target = "http://%s%s" % (authority, path)
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: %s" % authority,
                 "Content-Length: %d" % len(body), "Connection: close"]
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        return response(resp.status, hdrs, resp.read(), "request")
    finally:
        sock.close()


def marker():
    return uuid.uuid4().hex[:12]


def audit_lines(data):
    """The records of an audit file's bytes. A last line without its newline is one sluice
    is still writing: left for the next read, not parsed half-written."""
    done = data[:data.rfind(b"\n") + 1]
    return [json.loads(line) for line in done.splitlines() if line.strip()]


def read_audit():
    try:
        with open(S.audit_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b"", []
    records = audit_lines(data)
    # One record per exchange, as before start records: an exchange that went upstream
    # is recorded by a start (before forwarding) and its completion; readers count the
    # completion. read_audit_all() includes the starts.
    return data, [r for r in records if r.get("event") != "start"]


def read_audit_all():
    """Every record, start records included."""
    try:
        with open(S.audit_path, "rb") as f:
            return audit_lines(f.read())
    except FileNotFoundError:
        return []


def wait_for_audit(predicate, count=1):
    """Polls the audit file (bounded) until `count` records satisfy `predicate`."""
    deadline = time.monotonic() + AUDIT_WAIT_S
    while True:
        data, records = read_audit()
        hits = [r for r in records if predicate(r)]
        if len(hits) >= count or time.monotonic() > deadline:
            return data, records, hits
        time.sleep(0.05)


# ---------------------------------------------------------------- tests

class proxy_test(unittest.TestCase):
    maxDiff = 4000

    def origin_url(self, path, host="localhost", origin=None):
        return "https://%s:%d%s" % (host, (origin or S.origin).port, path)

    def assert_sluice_answer(self, status, headers, body, want_status, want_reason):
        """CONTRACT.md 'What a client gets': X-Sluice-Flow header + JSON body."""
        self.assertEqual(status, want_status, body)
        self.assertIn("x-sluice-flow", headers, headers)
        doc = json.loads(body)
        self.assertEqual(doc.get("reason"), want_reason, doc)
        self.assertIsInstance(doc.get("error"), str, doc)
        self.assertEqual(doc.get("flow"), headers["x-sluice-flow"], doc)
        self.assertIsInstance(doc.get("rules"), list, doc)
        return doc

    def assert_token_denied(self, code, blocks, bodies, path_marker):
        self.assertEqual(code, 0, "curl failed")
        self.assertTrue(blocks, "no HTTP answer")
        status, headers = blocks[-1]
        doc = self.assert_sluice_answer(status, headers, bodies[0], 403, "dlp_finding")
        S.denied_flows.append(doc["flow"])
        self.assertIn("github-pat-classic", doc["rules"], doc)
        self.assertNotIn(S.token, bodies[0].decode(errors="replace"))
        self.assertEqual(S.origin.requests_for(path_marker), [], "origin received it")
        self.assertFalse(S.origin.saw_bytes(S.token), "the token reached the origin")
        return doc

    # -- curl

    def test_curl_clean_json_post_round_trips_byte_for_byte(self):
        m = marker()
        payload = json.dumps({"task": "summarise", "marker": m, "text": "hello " * 200}).encode()
        code, blocks, bodies, _, err = curl(
            [self.origin_url("/v1/echo/" + m)], "-H", "Content-Type: application/json",
            data=payload)
        self.assertEqual(code, 0, err)
        self.assertEqual(blocks[-1][0], 200, blocks)
        seen = S.origin.requests_for(m)
        self.assertEqual(len(seen), 1, seen)
        self.assertEqual(seen[0]["method"], "POST")
        self.assertEqual(seen[0]["body"], payload, "the origin got the body unchanged")
        self.assertEqual(bodies[0], seen[0]["response"], "the client got the answer unchanged")
        names = [k.lower() for k, _ in seen[0]["headers"]]
        self.assertNotIn("proxy-authorization", names)
        self.assertNotIn("x-sluice-flow", names)

    def test_curl_token_in_body_is_denied(self):
        m = marker()
        payload = json.dumps({"marker": m, "note": "my token is " + S.token}).encode()
        code, blocks, bodies, _, err = curl(
            [self.origin_url("/v1/echo/" + m)], "-H", "Content-Type: application/json",
            data=payload)
        self.assert_token_denied(code, blocks, bodies, m)

    def test_curl_token_in_url_query_is_denied(self):
        m = marker()
        code, blocks, bodies, _, err = curl(
            [self.origin_url("/search/%s?q=x&access_token=%s" % (m, S.token))])
        self.assert_token_denied(code, blocks, bodies, m)

    def test_curl_token_in_custom_header_is_denied(self):
        m = marker()
        code, blocks, bodies, _, err = curl(
            [self.origin_url("/v1/echo/" + m)], "-H", "X-Deploy-Key: " + S.token)
        self.assert_token_denied(code, blocks, bodies, m)

    def test_curl_keep_alive_two_requests_on_one_connection(self):
        m1, m2 = marker(), marker()
        code, blocks, bodies, out, err = curl(
            [self.origin_url("/ka/" + m1), self.origin_url("/ka/" + m2)])
        self.assertEqual(code, 0, err)
        first, second = S.origin.requests_for(m1), S.origin.requests_for(m2)
        self.assertEqual(len(first), 1)
        self.assertEqual(len(second), 1)
        self.assertEqual(bodies[0], first[0]["response"])
        self.assertEqual(bodies[1], second[0]["response"])
        # -w prints "<status> <new connections>" per transfer: the second reuses the tunnel.
        lines = out.split()
        self.assertEqual(lines, ["200", "1", "200", "0"], out)
        self.assertEqual(first[0]["client_port"], second[0]["client_port"],
                         "both exchanges should share one upstream connection")

    def test_curl_plain_http_absolute_form(self):
        m = marker()
        url = "http://127.0.0.1:%d/plain/%s" % (S.plain_origin.port, m)
        code, blocks, bodies, _, err = curl([url], "-H", "Content-Type: application/json",
                                            data=b'{"plain": true}')
        self.assertEqual(code, 0, err)
        self.assertEqual(blocks[-1][0], 200, blocks)
        seen = S.plain_origin.requests_for(m)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["path"], "/plain/" + m, "origin gets origin-form, not absolute")
        self.assertEqual(seen[0]["body"], b'{"plain": true}')
        self.assertEqual(bodies[0], seen[0]["response"])

    def test_plain_http_token_in_body_is_denied(self):
        m = marker()
        r = via_proxy("127.0.0.1", S.plain_origin.port, "POST", "/plain/" + m,
                      {"Content-Type": "text/plain"}, ("token=" + S.token).encode(), tls=False)
        doc = self.assert_sluice_answer(r.status, r.headers, r.body, 403, "dlp_finding")
        S.denied_flows.append(doc["flow"])
        self.assertIn("github-pat-classic", doc["rules"])
        self.assertEqual(S.plain_origin.requests_for(m), [])

    def test_empty_200_with_content_length_zero_reaches_the_client(self):
        # Both ways in: intercepted HTTPS and absolute-form HTTP, two requests each on one
        # connection, so the empty answer must be complete and the connection still usable.
        m = marker()
        urls = [self.origin_url("/empty/%s/1" % m), self.origin_url("/empty/%s/2" % m),
                "http://127.0.0.1:%d/empty/%s/3" % (S.plain_origin.port, m)]
        code, _, bodies, out, err = curl(urls)
        self.assertEqual(code, 0, err)
        self.assertEqual([line.split()[0] for line in out.splitlines()], ["200"] * 3, out)
        self.assertEqual([b or b"" for b in bodies], [b"", b"", b""])
        self.assertEqual(len(S.origin.requests_for(m)), 2)

    def test_close_delimited_body_without_close_notify_is_relayed(self):
        m = marker()
        code, _, bodies, out, err = curl([self.origin_url("/close-delimited/%s" % m)])
        self.assertEqual(code, 0, err)
        seen = S.origin.requests_for(m)
        self.assertEqual(len(seen), 1)
        self.assertEqual(bodies[0], seen[0]["response"])

    def test_declared_body_over_max_body_is_413_before_the_body_is_sent(self):
        # 20 MiB declared against the default dlp.max_body of 16 MiB: refused on the head
        # alone (the client never has to send the body), nothing reaches the origin.
        m = marker()
        sock = socket.create_connection(("127.0.0.1", S.proxy_port), timeout=CLIENT_TIMEOUT_S)
        try:
            authority = "127.0.0.1:%d" % S.plain_origin.port
            sock.sendall(("POST http://%s/big/%s HTTP/1.1\r\nHost: %s\r\n"
                          "Content-Type: application/octet-stream\r\n"
                          "Content-Length: %d\r\n\r\n" % (authority, m, authority, 20 << 20))
                         .encode() + b"x" * 4096)
            resp = http.client.HTTPResponse(sock, method="POST")
            resp.begin()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            self.assert_sluice_answer(resp.status, hdrs, resp.read(), 413, "body_too_large")
        finally:
            sock.close()
        self.assertEqual(S.plain_origin.requests_for(m), [])

    # -- policy and upstream errors (answers may come at CONNECT or inside the tunnel)

    def test_destination_not_in_policy_gets_policy_deny(self):
        r = via_proxy("localhost", S.unlisted_port, "GET", "/nope")
        self.assert_sluice_answer(r.status, r.headers, r.body, 403, "policy_deny")
        # curl sees the same refusal.
        code, blocks, _, _, _ = curl(["https://localhost:%d/nope" % S.unlisted_port])
        self.assertTrue(blocks, "curl saw no answer")
        self.assertEqual(blocks[-1][0], 403, blocks)

    def test_plain_http_destination_not_in_policy_gets_policy_deny(self):
        r = via_proxy("localhost", S.unlisted_port, "GET", "/nope", tls=False)
        self.assert_sluice_answer(r.status, r.headers, r.body, 403, "policy_deny")

    def test_origin_with_untrusted_certificate_gets_502_upstream_tls(self):
        m = marker()
        r = via_proxy("localhost", S.bad_origin.port, "GET", "/bad/" + m)
        self.assert_sluice_answer(r.status, r.headers, r.body, 502, "upstream_tls")
        self.assertEqual(S.bad_origin.requests_for(m), [])
        code, blocks, _, _, _ = curl([self.origin_url("/bad/" + m, origin=S.bad_origin)])
        self.assertTrue(blocks, "curl saw no answer")
        self.assertEqual(blocks[-1][0], 502, blocks)
        self.assertEqual(S.bad_origin.requests_for(m), [], "no request ever reaches it")

    # -- other real clients

    def test_python_urllib_with_https_proxy(self):
        m = marker()
        payload = json.dumps({"client": "urllib", "marker": m}).encode()
        script = (
            "import os, ssl, sys, urllib.request\n"
            "ctx = ssl.create_default_context(cafile=os.environ['SLUICE_CA'])\n"
            "opener = urllib.request.build_opener(urllib.request.ProxyHandler(),\n"
            "                                     urllib.request.HTTPSHandler(context=ctx))\n"
            "req = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read(),\n"
            "                             headers={'Content-Type': 'application/json'})\n"
            "with opener.open(req, timeout=20) as r:\n"
            "    sys.stdout.buffer.write(r.read())\n")
        env = client_env(HTTPS_PROXY="http://127.0.0.1:%d" % S.proxy_port, SLUICE_CA=S.sluice_ca)
        r = run([sys.executable, "-c", script, self.origin_url("/urllib/" + m)], input=payload,
                env=env)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        seen = S.origin.requests_for(m)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["body"], payload)
        self.assertEqual(r.stdout, seen[0]["response"])

    def test_python_client_resumes_its_tls_session_with_sluice(self):
        """A client that keeps the session sluice's leaf handshake gave it (a TLS 1.3
        ticket, RFC 8446 section 4.6.1) resumes it on its next CONNECT, as curl, Python
        and Node do within a process: no full handshake, no signature."""
        ctx = ssl.create_default_context(cafile=S.sluice_ca)
        session, reused = None, []
        for i in range(3):
            m = marker()
            sock = socket.create_connection(("127.0.0.1", S.proxy_port),
                                            timeout=CLIENT_TIMEOUT_S)
            try:
                authority = "localhost:%d" % S.origin.port
                sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (
                    authority, authority)).encode())
                resp = http.client.HTTPResponse(sock, method="CONNECT")
                resp.begin()
                self.assertEqual(resp.status, 200)
                tls = ctx.wrap_socket(sock, server_hostname="localhost", session=session)
                sock = tls
                tls.sendall(("GET /resume/%s HTTP/1.1\r\nHost: %s\r\nConnection: close"
                             "\r\n\r\n" % (m, authority)).encode())
                r = http.client.HTTPResponse(tls, method="GET")
                r.begin()
                r.read()
                self.assertEqual(r.status, 200)
                self.assertEqual(len(S.origin.requests_for(m)), 1)
                reused.append(tls.session_reused)
                session = tls.session  # the newest ticket, read with the response
            finally:
                sock.close()
        self.assertEqual(reused, [False, True, True])

    def test_server_sent_events_are_relayed_as_they_arrive(self):
        m = marker()
        S.origin.release.clear()
        sock = socket.create_connection(("127.0.0.1", S.proxy_port), timeout=CLIENT_TIMEOUT_S)
        try:
            authority = "localhost:%d" % S.origin.port
            sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
                         .encode())
            resp = http.client.HTTPResponse(sock, method="CONNECT")
            resp.begin()
            self.assertEqual(resp.status, 200)
            tls = ssl.create_default_context(cafile=S.sluice_ca).wrap_socket(
                sock, server_hostname="localhost")
            tls.sendall(("GET /stream/%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream"
                         "\r\n\r\n" % (m, authority)).encode())
            r = http.client.HTTPResponse(tls, method="GET")
            r.begin()
            self.assertEqual(r.status, 200)
            tls.settimeout(10.0)  # the origin holds the rest for 15 s: buffering fails here
            self.assertEqual(r.readline(), b"data: first\n")  # before the origin sends more
            S.origin.release.set()
            self.assertEqual(r.read(), b"\ndata: second\n\n")
        finally:
            S.origin.release.set()
            sock.close()

    def test_python_urllib_token_is_denied(self):
        m = marker()
        script = (
            "import os, ssl, sys, urllib.error, urllib.request\n"
            "ctx = ssl.create_default_context(cafile=os.environ['SLUICE_CA'])\n"
            "opener = urllib.request.build_opener(urllib.request.ProxyHandler(),\n"
            "                                     urllib.request.HTTPSHandler(context=ctx))\n"
            "req = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read())\n"
            "try:\n"
            "    opener.open(req, timeout=20)\n"
            "    print('no error')\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code, e.read().decode())\n")
        env = client_env(HTTPS_PROXY="http://127.0.0.1:%d" % S.proxy_port, SLUICE_CA=S.sluice_ca)
        r = run([sys.executable, "-c", script, self.origin_url("/urllib/" + m)],
                input=("key=" + S.token).encode(), env=env)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        code, _, body = r.stdout.decode().partition(" ")
        self.assertEqual(code, "403", r.stdout)
        self.assertEqual(json.loads(body)["reason"], "dlp_finding")
        S.denied_flows.append(json.loads(body)["flow"])
        self.assertEqual(S.origin.requests_for(m), [])

    def test_node_https_through_connect(self):
        node = shutil.which("node")
        if not node:
            self.skipTest("node is not installed; the Node client check needs it")
        m = marker()
        payload = json.dumps({"client": "node", "marker": m})
        script = r"""
const http = require('http'), tls = require('tls');
const [proxyPort, host, port, path, body] = process.argv.slice(1);
const timer = setTimeout(() => { console.error('timeout'); process.exit(3); }, 20000);
const req = http.request({host: '127.0.0.1', port: +proxyPort, method: 'CONNECT',
                          path: host + ':' + port, headers: {host: host + ':' + port}});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.error('CONNECT ' + res.statusCode); process.exit(2); }
  // No `ca` option: trust comes from NODE_EXTRA_CA_CERTS, as for a user's agent.
  const tlsSock = tls.connect({socket, servername: host, ALPNProtocols: ['http/1.1']}, () => {
    // No agent: with createConnection the request runs on our TLS socket.
    const r = http.request({host, port: +port, path, method: 'POST',
                            createConnection: () => tlsSock,
                            headers: {'content-type': 'application/json',
                                      'content-length': Buffer.byteLength(body)}}, (resp) => {
      const chunks = [];
      resp.on('data', (c) => chunks.push(c));
      resp.on('end', () => {
        clearTimeout(timer);
        process.stdout.write(String(resp.statusCode) + '\n');
        process.stdout.write(Buffer.concat(chunks));
        tlsSock.destroy();
      });
    });
    r.on('error', (e) => { console.error('request: ' + e.message); process.exit(1); });
    r.end(body);
  });
  tlsSock.on('error', (e) => { console.error('TLS: ' + e.message); process.exit(1); });
});
req.on('error', (e) => { console.error('CONNECT: ' + e.message); process.exit(1); });
req.end();
"""
        env = client_env(NODE_EXTRA_CA_CERTS=S.sluice_ca)
        r = run([node, "-e", script, str(S.proxy_port), "localhost", str(S.origin.port),
                 "/node/" + m, payload], env=env)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        status, _, body = r.stdout.partition(b"\n")
        self.assertEqual(status, b"200", r.stdout)
        seen = S.origin.requests_for(m)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["body"], payload.encode())
        self.assertEqual(body, seen[0]["response"])

    # -- audit

    def test_audit_has_one_line_per_exchange_and_never_the_token(self):
        clean, denied, query = marker(), marker(), marker()
        code, _, _, _, err = curl([self.origin_url("/audit/" + clean)], data=b'{"ok": 1}')
        self.assertEqual(code, 0, err)
        code, _, bodies, _, err = curl([self.origin_url("/audit/" + denied)],
                                       data=("x=" + S.token).encode())
        self.assertEqual(code, 0, err)
        flow = json.loads(bodies[0])["flow"]
        S.denied_flows.append(flow)
        code, _, bodies, _, err = curl([self.origin_url("/audit/%s?token=%s" % (query, S.token))])
        self.assertEqual(code, 0, err)
        S.denied_flows.append(json.loads(bodies[0])["flow"])

        data, records, _ = wait_for_audit(
            lambda r: any(x in str(r.get("url", "")) for x in (clean, denied, query)), 3)
        by_marker = {}
        for x in (clean, denied, query):
            hits = [r for r in records if x in str(r.get("url", ""))]
            self.assertEqual(len(hits), 1, "one audit line per exchange for %s: %r" % (x, hits))
            by_marker[x] = hits[0]

        fields = ["ts", "seq", "flow", "identity", "source", "method", "url", "decision",
                  "reason", "findings", "bytes_up", "bytes_down", "duration_ms"]
        for rec in by_marker.values():
            for f in fields:
                self.assertIn(f, rec, rec)
            self.assertEqual(rec["identity"], "local", rec)
            self.assertTrue(str(rec["source"]).startswith("127.0.0.1"), rec)
            self.assertIsInstance(rec["seq"], int)
            self.assertIsInstance(rec["bytes_up"], int)
            self.assertIsInstance(rec["bytes_down"], int)
            self.assertIsInstance(rec["duration_ms"], (int, float))
            self.assertRegex(rec["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$")

        ok = by_marker[clean]
        self.assertEqual(ok["decision"], "allow", ok)
        self.assertEqual(ok["method"], "POST")
        self.assertEqual(ok["findings"], [])
        self.assertGreater(ok["bytes_down"], 0)

        bad = by_marker[denied]
        self.assertEqual(bad["decision"], "deny", bad)
        self.assertEqual(bad["reason"], "dlp_finding", bad)
        self.assertEqual(bad["flow"], flow, "the flow id in the answer is the audit's")
        self.assertTrue(bad["findings"], bad)
        finding = bad["findings"][0]
        for f in ("rule", "location", "variant", "offset", "fingerprint"):
            self.assertIn(f, finding, finding)
        self.assertEqual(finding["rule"], "github-pat-classic")
        self.assertEqual(finding["location"], "body")
        self.assertRegex(finding["fingerprint"], r"^sha256:[0-9a-f]{16}$")
        self.assertEqual(finding["fingerprint"],
                         "sha256:" + hashlib.sha256(S.token.encode()).hexdigest()[:16])
        self.assertEqual(finding["offset"], 2)

        in_url = by_marker[query]
        self.assertEqual(in_url["decision"], "deny")
        self.assertEqual(in_url["findings"][0]["location"], "url")
        self.assertIn("[redacted]", in_url["url"])

        seqs = [r["seq"] for r in records]
        self.assertEqual(len(seqs), len(set(seqs)), "seq values are unique")

        secret_body = S.token[4:]
        self.assertNotIn(secret_body.encode(), data, "the token is in the audit file")
        stderr = sluice_stderr_text()
        self.assertNotIn(secret_body, stderr, "the token is in sluice's stderr")

    def test_keep_alive_exchanges_are_audited_in_order(self):
        """An allow record is synced while the client's next request is read and
        inspected (flow.cpp, settle_audit): on one intercepted keep-alive connection an
        allow, a deny and an allow still get one record each, in that order, and only
        the allowed requests reach the origin."""
        ms = [marker() for _ in range(3)]
        ctx = ssl.create_default_context(cafile=S.sluice_ca)
        conn = http.client.HTTPSConnection("127.0.0.1", S.proxy_port, context=ctx,
                                           timeout=CLIENT_TIMEOUT_S)
        conn.set_tunnel("localhost", S.origin.port)
        statuses, flows = [], set()
        try:
            for m, body in zip(ms, (b'{"ok": 1}', ("x=" + S.token).encode(), b'{"ok": 2}')):
                conn.request("POST", "/order/" + m, body=body,
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                statuses.append(r.status)
                if r.getheader("x-sluice-flow"):
                    flows.add(r.getheader("x-sluice-flow"))
        finally:
            conn.close()
        self.assertEqual(statuses, [200, 403, 200])
        self.assertEqual([len(S.origin.requests_for(m)) for m in ms], [1, 0, 1])

        _, _, hits = wait_for_audit(lambda r: any(m in str(r.get("url", "")) for m in ms), 3)
        self.assertEqual(len(hits), 3, hits)
        self.assertEqual(len({r["flow"] for r in hits}), 1, "one connection, one flow")
        self.assertTrue(flows <= {hits[0]["flow"]}, (flows, hits))
        by_seq = sorted(hits, key=lambda r: r["seq"])
        self.assertEqual([(ms.index(r["url"].rsplit("/", 1)[1]), r["decision"]) for r in by_seq],
                         [(0, "allow"), (1, "deny"), (2, "allow")])
        S.denied_flows.append(hits[0]["flow"])

    def test_zz_audit_covers_every_exchange_of_the_run(self):
        """Runs last (name order): every request any origin received during this run has
        exactly one `allow` audit line, and no token is anywhere in the audit or stderr."""
        received = [(S.origin, r) for r in S.origin.snapshot()]
        received += [(S.plain_origin, r) for r in S.plain_origin.snapshot()]
        if not received:
            self.skipTest("needs the traffic of the other proxy_test tests (run the module)")
        data, records, _ = wait_for_audit(lambda r: r.get("decision") == "allow",
                                          len(received))
        allowed = [r for r in records if r.get("decision") == "allow"]
        for origin, req in received:
            url_tail = ":%d%s" % (origin.port, req["path"])
            hits = [r for r in allowed if str(r.get("url", "")).endswith(url_tail)]
            self.assertEqual(len(hits), 1, "audit lines for %s: %r" % (url_tail, hits))
        self.assertEqual(len(allowed), len(received), "an allow line without an exchange")
        dlp_denied = [r for r in records if r.get("reason") == "dlp_finding"]
        self.assertTrue(S.denied_flows)
        for flow in S.denied_flows:
            hits = [r for r in dlp_denied if r.get("flow") == flow]
            self.assertEqual(len(hits), 1, "audit lines for denied flow %s: %r" % (flow, hits))
            self.assertEqual(hits[0]["decision"], "deny")
        self.assertEqual(len(dlp_denied), len(S.denied_flows), "a dlp deny nobody received")
        self.assertNotIn(S.token[4:].encode(), data)
        self.assertNotIn(S.token[4:], sluice_stderr_text())


def sighup_blocked(pid):
    """True once the process's main thread blocks SIGHUP (/proc/PID/status SigBlk)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)) != 0
    except OSError:
        pass
    return False


class run_test(unittest.TestCase):
    """`sluice run` start-up output and shutdown (CONTRACT.md "Command line")."""

    def test_start_prints_proxy_address_ca_and_environment_lines(self):
        S.sluice_stdout.flush()
        with open(os.path.join(S.tmp, "sluice.stdout"), encoding="utf-8") as f:
            out = f.read()
        proxy = "http://127.0.0.1:%d" % S.proxy_port
        self.assertIn(proxy, out)
        self.assertIn(S.sluice_ca, out)
        for var, value in (("HTTPS_PROXY", proxy), ("SSL_CERT_FILE", S.sluice_ca),
                           ("CURL_CA_BUNDLE", S.sluice_ca), ("REQUESTS_CA_BUNDLE", S.sluice_ca),
                           ("NODE_EXTRA_CA_CERTS", S.sluice_ca), ("GIT_SSL_CAINFO", S.sluice_ca)):
            self.assertIn("%s=%s" % (var, value), out)

    def own_run_config(self):
        """A copy of the suite's config with its own ports, data dir and audit file, for
        a second `sluice run`. Returns (folder, config path, proxy port)."""
        d = tempfile.mkdtemp(dir=S.tmp)
        config = os.path.join(d, "sluice.yaml")
        with open(os.path.join(S.tmp, "sluice.yaml")) as f:
            text = f.read()
        port = free_port()
        text = text.replace("127.0.0.1:%d" % S.proxy_port, "127.0.0.1:%d" % port)
        text = text.replace("data_dir: " + os.path.join(S.tmp, "data"),
                            "data_dir: " + os.path.join(d, "data"))
        text = text.replace(S.audit_path, os.path.join(d, "audit.jsonl"))
        for old_port in (int(x) for x in re.findall(r'"127\.0\.0\.1:(\d+)"', text)):
            text = text.replace('"127.0.0.1:%d"' % old_port, '"127.0.0.1:%d"' % free_port())
        with open(config, "w") as f:
            f.write(text)
        return d, config, port

    def test_sigterm_exits_zero(self):
        d, config, port = self.own_run_config()
        with open(os.path.join(d, "stderr"), "wb") as err:
            proc = subprocess.Popen([sluice_binary(), "run", "--config", config],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    stdin=subprocess.DEVNULL, env=client_env())
            try:
                self.assertTrue(wait_for_port(port, proc, START_TIMEOUT_S), "did not start")
                self.assertTrue(os.path.isfile(os.path.join(d, "data", "ca.pem")),
                                "a CA is created on first start")
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=15), 0)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)

    def test_sighup_during_start_up_reloads_instead_of_killing(self):
        # `systemctl enable --now sluice && systemctl reload sluice` sends SIGHUP while the
        # rules still compile: the reload must wait for the handlers, not kill sluice.
        d, config, port = self.own_run_config()
        with open(os.path.join(d, "stderr"), "wb") as err:
            proc = subprocess.Popen([sluice_binary(), "run", "--config", config],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    stdin=subprocess.DEVNULL, env=client_env())
            try:
                # Send it once sluice blocks SIGHUP (its first act, long before the rules
                # have compiled and the handlers exist); a fixed sleep raced process start-up
                # under the sanitizers on a loaded machine.
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not sighup_blocked(proc.pid):
                    self.assertIsNone(proc.poll())
                    time.sleep(0.01)
                self.assertTrue(sighup_blocked(proc.pid), "sluice never blocked SIGHUP")
                self.assertIsNone(proc.poll())
                proc.send_signal(signal.SIGHUP)
                self.assertTrue(wait_for_port(port, proc, START_TIMEOUT_S),
                                "did not start (exit %s)" % proc.poll())
                deadline = time.monotonic() + START_TIMEOUT_S
                log = ""
                while time.monotonic() < deadline and "configuration reloaded (SIGHUP)" not in log:
                    time.sleep(0.2)
                    with open(os.path.join(d, "stderr"), errors="replace") as f:
                        log = f.read()
                self.assertIn("configuration reloaded (SIGHUP)", log)
                self.assertIsNone(proc.poll(), "sluice exited")
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=15), 0)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)


class cli_ca_test(unittest.TestCase):
    """`sluice ca init` / `sluice ca path` (CONTRACT.md "Command line")."""

    def sluice(self, *args):
        r = run([sluice_binary(), *args], env=client_env())
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def test_init_creates_once_and_path_prints_it(self):
        d = os.path.join(tempfile.mkdtemp(dir=S.tmp), "nested", "ca")
        code, out, err = self.sluice("ca", "init", "--dir", d)
        self.assertEqual(code, 0, err)
        cert, key = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
        self.assertEqual(out.strip(), cert)
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(d).st_mode & 0o777, 0o700)
        r = run(["openssl", "x509", "-in", cert, "-noout", "-ext", "basicConstraints"])
        self.assertIn(b"CA:TRUE", r.stdout)
        with open(cert, "rb") as f:
            before = f.read()

        code, out, err = self.sluice("ca", "init", "--dir", d)
        self.assertEqual(code, 0, err)
        self.assertIn("already exists", err)
        self.assertEqual(out.strip(), cert)
        with open(cert, "rb") as f:
            self.assertEqual(f.read(), before, "an existing CA is never overwritten")

        code, out, err = self.sluice("ca", "path", "--dir", d)
        self.assertEqual((code, out.strip()), (0, cert), err)

    def test_path_of_the_running_config_is_the_ca_clients_trust(self):
        code, out, err = self.sluice("ca", "path", "--config", os.path.join(S.tmp, "sluice.yaml"))
        self.assertEqual(code, 0, err)
        self.assertEqual(out.strip(), S.sluice_ca)

    def test_errors_have_the_contract_exit_codes(self):
        d = tempfile.mkdtemp(dir=S.tmp)
        code, _, err = self.sluice("ca", "path", "--dir", os.path.join(d, "missing"))
        self.assertEqual(code, 2, err)  # issue 24: no CA yet is an input error
        self.assertIn("sluice ca init", err)
        self.assertEqual(self.sluice("ca", "init", "--bogus")[0], 2)
        self.assertEqual(self.sluice("ca", "frobnicate")[0], 2)
        self.assertEqual(self.sluice("ca", "init", "--dir")[0], 2)
        # Half a CA (certificate without key) is refused, not silently replaced.
        self.assertEqual(self.sluice("ca", "init", "--dir", d)[0], 0)
        os.remove(os.path.join(d, "ca.key"))
        code, _, err = self.sluice("ca", "init", "--dir", d)
        self.assertEqual(code, 3, err)
        self.assertIn("ca.key", err)
        self.assertFalse(os.path.exists(os.path.join(d, "ca.key")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
