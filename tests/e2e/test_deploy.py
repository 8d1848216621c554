#!/usr/bin/env python3
"""End-to-end tests for deploy/ (issue 9): the client recipes of deploy/README.md run
through a real `sluice run` started with the Kubernetes sidecar's configuration, to a
local TLS origin, each client trusting sluice's CA only through the documented
environment variables. Standard library only; each optional client (Python requests or
httpx, Node and its packages, git) is skipped, with the reason, when missing.

How it is set up, per run in a fresh temporary directory:
  * the sidecar configuration is read from deploy/k8s/overlays/sidecar/configmap.yaml and
    adapted: data dir, audit file and ports moved here, the test CA as upstream.ca_file,
    one rule (first) allowing the origin's address, and private_destinations for it. Its
    listener identity, DLP settings and other rules are the shipped ones;
  * the origin listens on 127.0.0.2, which is not in the documented NO_PROXY, with a
    certificate from a throwaway test CA that no client trusts: a client that bypassed
    sluice would fail its TLS handshake;
  * the client environment is the `recipe: env` block of deploy/README.md with the
    address and CA path replaced, on top of an environment cleared of proxy and CA
    variables;
  * each `recipe: NAME` block of deploy/README.md runs as written (sh with bash, python
    with this interpreter, js with node), with $URL/$BODY (and $REPO_URL, $WS_URL) set.

Run by ctest (tests/e2e/CMakeLists.txt) with SLUICE_BIN set, or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_deploy.py -v
"""

import atexit
import base64
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
README = os.path.join(ROOT, "deploy", "README.md")
SIDECAR_CONFIGMAP = os.path.join(ROOT, "deploy", "k8s", "overlays", "sidecar", "configmap.yaml")
SIDECAR_DEPLOYMENT = os.path.join(ROOT, "deploy", "k8s", "overlays", "sidecar", "deployment.yaml")
GATEWAY_CONFIGMAP = os.path.join(ROOT, "deploy", "k8s", "overlays", "gateway", "configmap.yaml")
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
BOOTSTRAP_JOB = os.path.join(ROOT, "deploy", "k8s", "base", "bootstrap-job.yaml")

ORIGIN_HOST = "127.0.0.2"     # loopback, but not in the documented NO_PROXY
DOC_PROXY = "http://127.0.0.1:3128"
DOC_CA = "/run/sluice/ca.pem"
CLIENT_TIMEOUT_S = 60.0       # Node and git start slowly on a loaded 2-core machine
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Variables a client could use to find a proxy or a CA outside the documented environment.
CLEARED = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ssl_cert_file",
           "ssl_cert_dir", "curl_ca_bundle", "requests_ca_bundle", "node_extra_ca_certs",
           "node_use_env_proxy", "node_options", "git_ssl_cainfo", "git_ssl_capath",
           "pip_cert", "npm_config_cafile", "npm_config_proxy", "npm_config_https_proxy",
           "npm_config_registry")


class st:
    tmp = None
    sluice = None
    stdout = None
    stderr = None
    origin = None
    proxy_port = None
    admin_port = None
    sluice_ca = None
    audit = None
    config_text = None
    recipes = {}
    env = {}
    token = None
    repo_root = None


# ---------------------------------------------------------------- deploy/README.md

def readme_blocks():
    """{name: (language, code)} for every fenced block whose first line is
    `# recipe: NAME` or `// recipe: NAME` (list-item indentation removed)."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    blocks = {}
    for m in re.finditer(r"^([ \t]*)```(\w+)\n(.*?)^\1```", text, re.M | re.S):
        indent, lang, body = m.group(1), m.group(2), m.group(3)
        lines = [line[len(indent):] if line.startswith(indent) else line
                 for line in body.split("\n")]
        first = re.match(r"^(?:#|//) recipe: ([\w-]+)$", lines[0].strip())
        if first:
            blocks[first.group(1)] = (lang, "\n".join(lines[1:]))
    return blocks


def documented_env(code):
    """The variables of the `recipe: env` block (`export A=B C=D` lines)."""
    env = {}
    for line in code.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        for assignment in line[len("export "):].split():
            name, _, value = assignment.partition("=")
            env[name] = value
    return env


def sidecar_config_text(path=None):
    """The `sluice.yaml` literal block of the sidecar ConfigMap (or of `path`)."""
    with open(path or SIDECAR_CONFIGMAP, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == "sluice.yaml: |")
    key_indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= key_indent:
            break
        body.append(line)
    indent = min(len(line) - len(line.lstrip()) for line in body if line.strip())
    return "\n".join(line[indent:] for line in body) + "\n"


def replace_once(text, old, new):
    if text.count(old) != 1:
        raise AssertionError("the sidecar config no longer has exactly one %r; adapt "
                             "test_deploy.py to the change" % old)
    return text.replace(old, new)


def adapt_sidecar_config(text, data_dir, audit, proxy_port, admin_port, metrics_port,
                         origin_port, upstream_ca):
    text = replace_once(text, "data_dir: /var/lib/sluice/data", "data_dir: %s" % data_dir)
    text = replace_once(text, "- address: 127.0.0.1:3128\n", "- address: 127.0.0.1:%d\n" % proxy_port)
    text = replace_once(text, "admin: {address: 0.0.0.0:9901,",
                        'admin: {address: "127.0.0.1:%d",' % admin_port)
    text = replace_once(text, "metrics: {address: 0.0.0.0:9902}",
                        'metrics: {address: "127.0.0.1:%d"}' % metrics_port)
    text = replace_once(text, "audit: {path: /var/log/sluice/audit.jsonl,", "audit: {path: %s," % audit)
    # The test origin, first in the identity's rules; the shipped rules and DLP stay.
    text = replace_once(text, "    rules:\n",
                        "    rules:\n"
                        "      - hosts: [\"%s\"]\n"
                        "        ports: [%d]\n"
                        "        action: allow\n" % (ORIGIN_HOST, origin_port))
    text = replace_once(text, "    limits: {",
                        "    private_destinations: [%s/32]\n    limits: {" % ORIGIN_HOST)
    return text + "upstream:\n  ca_file: %s\n  connect_timeout: 5s\n" % upstream_ca


# ---------------------------------------------------------------- the origin

class origin_server:
    """A threaded HTTP/1.1 TLS origin on ORIGIN_HOST that records every request and
    answers: JSON describing it (default); the smart-HTTP protocol of `git http-backend`
    under /git/; a one-message WebSocket echo for an upgrade request under /ws/."""

    def __init__(self, certfile, keyfile):
        self.records = []
        self.lock = threading.Lock()
        self.git_root = None
        origin = self

        class handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = CLIENT_TIMEOUT_S

            def log_message(self, *args):
                pass

            def read_body(self):
                return tp.read_request_body(self)

            def handle_any(self):
                body = self.read_body()
                with origin.lock:
                    origin.records.append({"method": self.command, "path": self.path,
                                           "headers": list(self.headers.items()),
                                           "body": body})
                if self.path.startswith("/git/"):
                    origin.git(self, body)
                elif self.path.startswith("/ws/") and \
                        self.headers.get("Upgrade", "").lower() == "websocket":
                    origin.websocket(self)
                else:
                    origin.send(self, 200, "application/json", json.dumps({
                        "origin": "deploy-test", "method": self.command, "path": self.path,
                        "body_sha256": hashlib.sha256(body).hexdigest()}).encode())

            do_GET = do_POST = do_PUT = handle_any

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certfile, keyfile)

        class server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address):
                request.settimeout(CLIENT_TIMEOUT_S)
                with tls.wrap_socket(request, server_side=True) as wrapped:
                    super().finish_request(wrapped, client_address)

            def handle_error(self, request, client_address):
                pass

        self.server = server((ORIGIN_HOST, 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @staticmethod
    def send(h, status, content_type, body, extra=()):
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def git(self, h, body):
        """CGI: `git http-backend` answers smart-HTTP requests for repositories under
        git_root (RFC 3875 variables; Git-Protocol carries protocol v2)."""
        path, _, query = h.path.partition("?")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "GIT_PROJECT_ROOT": self.git_root, "GIT_HTTP_EXPORT_ALL": "1",
               "REQUEST_METHOD": h.command, "PATH_INFO": path[len("/git"):],
               "QUERY_STRING": query, "CONTENT_TYPE": h.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": h.client_address[0],
               "GIT_PROTOCOL": h.headers.get("Git-Protocol", ""),
               "HTTP_CONTENT_ENCODING": h.headers.get("Content-Encoding", "")}
        r = subprocess.run(["git", "http-backend"], input=body, capture_output=True,
                           env=env, timeout=CLIENT_TIMEOUT_S)
        head, _, out = r.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, out = r.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name.strip(), value.strip()))
        content_type = dict((k.lower(), v) for k, v in headers).get("content-type", "text/plain")
        self.send(h, status, content_type, out,
                  [(k, v) for k, v in headers if k.lower() not in ("content-type", "content-length")])

    def websocket(self, h):
        """RFC 6455: accept, read one (masked, unfragmented) text frame, echo it back,
        then close with 1000."""
        accept = base64.b64encode(hashlib.sha1(
            (h.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest()).decode()
        h.send_response(101)
        h.send_header("Upgrade", "websocket")
        h.send_header("Connection", "Upgrade")
        h.send_header("Sec-WebSocket-Accept", accept)
        h.end_headers()
        h.wfile.flush()
        b1, b2 = h.rfile.read(2)
        n = b2 & 0x7F
        if n == 126:
            n = struct.unpack("!H", h.rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", h.rfile.read(8))[0]
        mask = h.rfile.read(4) if b2 & 0x80 else b"\0\0\0\0"
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(h.rfile.read(n)))
        with self.lock:
            self.records.append({"method": "WS", "path": h.path, "headers": [], "body": payload})
        out = payload if len(payload) < 126 else payload[:125]
        h.wfile.write(bytes([0x81, len(out)]) + out + bytes([0x88, 2]) + struct.pack("!H", 1000))
        h.wfile.flush()
        h.close_connection = True

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def requests_for(self, marker):
        with self.lock:
            return [r for r in self.records if marker in r["path"]]

    def saw(self, needle):
        with self.lock:
            return any(needle.encode() in r["body"] or needle in r["path"] or
                       any(needle in v for _, v in r["headers"]) for r in self.records)


# ---------------------------------------------------------------- the run

def make_origin_certificate(d):
    """A leaf for ORIGIN_HOST signed by test_proxy's throwaway test CA."""
    with open(os.path.join(d, "origin2.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:%s\n" % ORIGIN_HOST)
    tp.openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
               "-keyout", "origin2.key", "-out", "origin2.csr", "-subj", "/CN=" + ORIGIN_HOST,
               cwd=d)
    tp.openssl("x509", "-req", "-in", "origin2.csr", "-CA", "test-ca.pem", "-CAkey",
               "test-ca.key", "-CAcreateserial", "-out", "origin2.pem", "-days", "2",
               "-extfile", "origin2.ext", cwd=d)


def stop_everything():
    tp.stop_run(st.sluice, (st.origin,), (st.stdout, st.stderr), st.tmp)
    st.origin = None


def setUpModule():
    binary = tp.sluice_binary()
    atexit.register(stop_everything)
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-deploy-")
    tp.make_certificates(st.tmp)
    make_origin_certificate(st.tmp)
    st.origin = origin_server(os.path.join(st.tmp, "origin2.pem"),
                              os.path.join(st.tmp, "origin2.key"))
    st.proxy_port, st.admin_port = tp.free_port(), tp.free_port()
    data_dir = os.path.join(st.tmp, "data")
    st.audit = os.path.join(st.tmp, "audit.jsonl")
    st.config_text = adapt_sidecar_config(
        sidecar_config_text(), data_dir, st.audit, st.proxy_port, st.admin_port,
        tp.free_port(), st.origin.port, os.path.join(st.tmp, "test-ca.pem"))
    config = os.path.join(st.tmp, "sluice.yaml")
    with open(config, "w") as f:
        f.write(st.config_text)
    st.token = tp.github_classic_token()

    st.stdout = open(os.path.join(st.tmp, "sluice.stdout"), "wb")
    st.stderr = open(os.path.join(st.tmp, "sluice.stderr"), "wb")
    st.sluice = subprocess.Popen([binary, "run", "--config", config], stdout=st.stdout,
                                 stderr=st.stderr, stdin=subprocess.DEVNULL,
                                 env=tp.client_env())
    if not tp.wait_for_port(st.proxy_port, st.sluice, tp.START_TIMEOUT_S):
        with open(os.path.join(st.tmp, "sluice.stderr"), "rb") as f:
            err = f.read().decode(errors="replace")[-4000:]
        raise RuntimeError("sluice did not start (exit %s):\n%s" % (st.sluice.poll(), err))
    st.sluice_ca = os.path.join(data_dir, "ca.pem")

    st.recipes = readme_blocks()
    doc_env = documented_env(st.recipes["env"][1])
    home = os.path.join(st.tmp, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if k.lower() not in CLEARED}
    env.update({"HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                "PYTHONDONTWRITEBYTECODE": "1"})
    for name, value in doc_env.items():
        env[name] = (value.replace(DOC_PROXY, "http://127.0.0.1:%d" % st.proxy_port)
                     .replace(DOC_CA, st.sluice_ca))
    st.env = env


def tearDownModule():
    stop_everything()


def marker():
    return uuid.uuid4().hex[:12]


def url(path):
    return "https://%s:%d%s" % (ORIGIN_HOST, st.origin.port, path)


def run_recipe(name, **variables):
    """Runs README block `name` as written, with the client environment and `variables`.
    Returns the CompletedProcess (stdout/stderr as text)."""
    lang, code = st.recipes[name]
    env = dict(st.env)
    env.update(variables)
    if lang == "sh":
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    elif lang == "python":
        cmd = [sys.executable, "-c", code]
    elif lang == "js":
        cmd = [shutil.which("node") or "node", "-e", code]
    else:
        raise AssertionError("recipe %s: unknown language %s" % (name, lang))
    cwd = tempfile.mkdtemp(dir=st.tmp)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=CLIENT_TIMEOUT_S)


def audit_records(path):
    try:
        with open(path, "rb") as f:
            recs = tp.audit_lines(f.read())
        return [r for r in recs if r.get("event") != "start"]  # completions: one per exchange
    except FileNotFoundError:
        return []


def wait_for_audit(predicate, count=1):
    """Polls the audit file (bounded) until `count` records satisfy `predicate`; returns
    (None, all records, matching records)."""
    return wait_for_audit_in(st.audit, predicate, count)


def wait_for_audit_in(path, predicate, count=1):
    deadline = time.monotonic() + tp.AUDIT_WAIT_S
    while True:
        records = audit_records(path)
        hits = [r for r in records if predicate(r)]
        if len(hits) >= count or time.monotonic() > deadline:
            return None, records, hits
        time.sleep(0.05)


def node_version():
    node = shutil.which("node")
    if not node:
        return None
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    return tuple(int(x) for x in out.strip().lstrip("v").split(".")[:2])


def node_has(*modules):
    node = shutil.which("node")
    if not node:
        return False
    script = "".join("require.resolve(%s);" % json.dumps(m) for m in modules)
    return subprocess.run([node, "-e", script], env=st.env, capture_output=True,
                          timeout=30).returncode == 0


def with_debian_node_path():
    """Debian's node-* packages live in /usr/share/nodejs, which only Debian's own Node
    searches; the guide says NODE_PATH=/usr/share/nodejs for any other Node."""
    if os.path.isdir("/usr/share/nodejs") and "NODE_PATH" not in st.env:
        st.env["NODE_PATH"] = "/usr/share/nodejs"


# ---------------------------------------------------------------- tests

class guide_test(unittest.TestCase):
    maxDiff = 4000

    def assert_through_sluice(self, m, body=None):
        """The origin got exactly one request for marker `m` (with `body`), and the audit
        has it as allowed for the sidecar's listener identity."""
        seen = [r for r in st.origin.requests_for(m) if r["method"] != "WS"]
        self.assertEqual(len(seen), 1, seen)
        if body is not None:
            self.assertEqual(seen[0]["body"], body.encode())
        _, records, hits = wait_for_audit(lambda r: m in str(r.get("url", "")))
        self.assertEqual(len(hits), 1, records[-5:])
        self.assertEqual(hits[0]["decision"], "allow", hits[0])
        self.assertEqual(hits[0]["identity"], "agent", "the listener fixes the identity")
        return seen[0]

    def assert_denied(self, m, output):
        self.assertIn("dlp_finding", output)
        self.assertIn("github-pat-classic", output)
        self.assertNotIn(st.token, output)
        self.assertEqual(st.origin.requests_for(m), [], "the origin received it")
        self.assertFalse(st.origin.saw(st.token), "the token reached the origin")

    # -- the documented environment

    def test_env_block_is_the_sidecar_agent_environment(self):
        """The README's variables are the ones the sidecar manifest gives the agent."""
        doc_env = documented_env(st.recipes["env"][1])
        with open(SIDECAR_DEPLOYMENT, encoding="utf-8") as f:
            manifest = dict(re.findall(r'\{name: (\w+), value: "?([^"}]*)"?\}', f.read()))
        for name, value in doc_env.items():
            self.assertIn(name, manifest, "the sidecar agent lacks %s" % name)
            self.assertEqual(manifest[name].replace("/etc/sluice-ca/ca.pem", DOC_CA), value, name)
        for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "SSL_CERT_FILE", "CURL_CA_BUNDLE",
                     "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"):
            self.assertIn(name, doc_env)
        self.assertEqual(st.env["HTTPS_PROXY"], "http://127.0.0.1:%d" % st.proxy_port)
        self.assertEqual(st.env["SSL_CERT_FILE"], st.sluice_ca)

    def test_every_recipe_is_tested(self):
        tested = {"env", "curl", "python-urllib", "python-requests", "python-httpx",
                  "node-fetch-env", "node-undici", "node-ws", "git"}
        self.assertEqual(set(st.recipes), tested)

    def test_a_client_that_bypasses_sluice_fails(self):
        """Without the proxy the origin's certificate is not trusted: trust exists only
        through sluice, so a passing recipe went through it."""
        m = marker()
        r = run_recipe("curl", URL=url("/bypass/" + m), BODY="{}", HTTPS_PROXY="",
                       https_proxy="", NO_PROXY="*", no_proxy="*")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(st.origin.requests_for(m), [])

    # -- curl

    def test_curl(self):
        m = marker()
        body = json.dumps({"client": "curl", "marker": m})
        r = run_recipe("curl", URL=url("/v1/curl/" + m), BODY=body)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["path"], "/v1/curl/" + m)
        self.assert_through_sluice(m, body)

    def test_curl_secret_is_denied(self):
        m = marker()
        r = run_recipe("curl", URL=url("/v1/curl/" + m),
                       BODY=json.dumps({"note": "my token is " + st.token}))
        self.assertEqual(r.returncode, 22, "--fail-with-body exits 22 on the 403")
        self.assert_denied(m, r.stdout)
        self.assertEqual(json.loads(r.stdout)["reason"], "dlp_finding")

    # -- Python

    def test_python_urllib(self):
        m = marker()
        body = json.dumps({"client": "urllib", "marker": m})
        r = run_recipe("python-urllib", URL=url("/v1/urllib/" + m), BODY=body)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("200 "), r.stdout)
        self.assert_through_sluice(m, body)

    def test_python_urllib_secret_is_denied(self):
        m = marker()
        r = run_recipe("python-urllib", URL=url("/v1/urllib/" + m), BODY="key=" + st.token)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HTTP Error 403", r.stderr)
        self.assertEqual(st.origin.requests_for(m), [])
        self.assertFalse(st.origin.saw(st.token))

    def python_module_recipe(self, module, recipe):
        if subprocess.run([sys.executable, "-c", "import " + module],
                          capture_output=True).returncode != 0:
            self.skipTest("Python module %s is not installed" % module)
        m = marker()
        body = json.dumps({"client": module, "marker": m})
        r = run_recipe(recipe, URL=url("/v1/%s/%s" % (module, m)), BODY=body)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("200 "), r.stdout)
        self.assert_through_sluice(m, body)
        m = marker()
        r = run_recipe(recipe, URL=url("/v1/%s/%s" % (module, m)), BODY="key=" + st.token)
        self.assertTrue(r.stdout.startswith("403 "), r.stdout + r.stderr)
        self.assert_denied(m, r.stdout)

    def test_python_requests(self):
        self.python_module_recipe("requests", "python-requests")

    def test_python_httpx(self):
        self.python_module_recipe("httpx", "python-httpx")

    # -- Node

    def test_node_fetch_with_node_use_env_proxy(self):
        v = node_version()
        if v is None:
            self.skipTest("node is not installed")
        if not (v >= (24, 0) or (v[0] == 22 and v >= (22, 21))):
            self.skipTest("Node %d.%d: NODE_USE_ENV_PROXY needs Node 24 (or 22.21+); the "
                          "guide's undici recipe covers older Node" % v)
        m = marker()
        body = json.dumps({"client": "node-fetch", "marker": m})
        r = run_recipe("node-fetch-env", URL=url("/v1/node-fetch/" + m), BODY=body)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("200 "), r.stdout)
        self.assert_through_sluice(m, body)

    def test_node_undici_proxy_agent(self):
        with_debian_node_path()
        if not node_has("undici"):
            self.skipTest("node or the undici package is missing (npm install undici, or "
                          "Debian's node-undici)")
        m = marker()
        body = json.dumps({"client": "undici", "marker": m})
        r = run_recipe("node-undici", URL=url("/v1/undici/" + m), BODY=body)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("200 "), r.stdout)
        self.assert_through_sluice(m, body)
        m = marker()
        r = run_recipe("node-undici", URL=url("/v1/undici/" + m),
                       BODY=json.dumps({"k": st.token}))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("403 "), r.stdout)
        self.assert_denied(m, r.stdout)

    def test_node_ws_with_https_proxy_agent(self):
        with_debian_node_path()
        if not node_has("ws", "https-proxy-agent"):
            self.skipTest("node or the ws / https-proxy-agent packages are missing")
        m = marker()
        r = run_recipe("node-ws", WS_URL="wss://%s:%d/ws/%s" % (ORIGIN_HOST, st.origin.port, m),
                       BODY="hello " + m)
        got = st.origin.requests_for(m)
        # The client found sluice through the agent and trusted its CA (the upgrade
        # request reached the origin inside the intercepted tunnel, as the audit says).
        self.assertTrue(got, "no request reached the origin: " + r.stderr[-2000:])
        self.assertEqual(got[0]["method"], "GET")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("message hello " + m, r.stdout)

    # -- git

    def test_git_clone_over_https_from_smart_http(self):
        git = shutil.which("git")
        backend = subprocess.run(["git", "--exec-path"], capture_output=True, text=True) \
            if git else None
        if not git or not os.path.exists(os.path.join(backend.stdout.strip(), "git-http-backend")):
            self.skipTest("git or git-http-backend is not installed")
        root = os.path.join(st.tmp, "git")
        work = os.path.join(root, "work")
        os.makedirs(work)
        m = marker()
        genv = dict(st.env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                    GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
        for cmd in (["git", "init", "-q", "-b", "main", work],
                    ["git", "-C", work, "commit", "-q", "--allow-empty", "-m", "deploy " + m],
                    ["git", "clone", "-q", "--bare", work, os.path.join(root, "repo-%s.git" % m)]):
            r = subprocess.run(cmd, capture_output=True, text=True, env=genv, timeout=CLIENT_TIMEOUT_S)
            self.assertEqual(r.returncode, 0, r.stderr)
        st.origin.git_root = root
        r = run_recipe("git", REPO_URL=url("/git/repo-%s.git" % m))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("deploy " + m, r.stdout)
        paths = [x["path"] for x in st.origin.requests_for("/git/repo-" + m)]
        self.assertTrue(any("/info/refs?service=git-upload-pack" in p for p in paths), paths)
        self.assertTrue(any(p.endswith("/git-upload-pack") for p in paths), paths)
        _, _, hits = wait_for_audit(lambda x: "/git/repo-" + m in str(x.get("url", "")),
                                            len(paths))
        self.assertEqual(len(hits), len(paths), "one audit record per git request")
        self.assertTrue(all(h["decision"] == "allow" and h["identity"] == "agent" for h in hits))

    # -- the container's HEALTHCHECK

    def test_image_healthcheck_command_against_sluice(self):
        with open(DOCKERFILE, encoding="utf-8") as f:
            text = f.read().replace("\\\n", " ")
        cmd = json.loads(re.search(r"^HEALTHCHECK .*?CMD (\[.*\])\s*$", text, re.M).group(1))
        self.assertIn("9901", cmd[-1])
        ok = [c.replace("9901", str(st.admin_port)) for c in cmd]
        r = subprocess.run(ok, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        closed = [c.replace("9901", str(tp.free_port())) for c in cmd]
        self.assertNotEqual(subprocess.run(closed, capture_output=True,
                                           timeout=CLIENT_TIMEOUT_S).returncode, 0)

    # -- last: nothing leaked

    def test_zz_no_token_in_audit_or_logs(self):
        data = b""
        if os.path.exists(st.audit):
            with open(st.audit, "rb") as f:
                data = f.read()
        self.assertNotIn(st.token[4:].encode(), data)
        st.stderr.flush()
        with open(os.path.join(st.tmp, "sluice.stderr"), "rb") as f:
            self.assertNotIn(st.token[4:].encode(), f.read())


# ---------------------------------------------------------------- the gateway's identities

class gateway_test(unittest.TestCase):
    """The gateway ConfigMap's configuration: each agent workload proves who it is with
    its own token in the proxy URL (HTTPS_PROXY=http://NAME:TOKEN@...), and sluice holds
    only the token's SHA-256 from the Secret sluice-agent-tokens, passed in through the
    pod's environment (${SLUICE_TOKEN_SHA256_*}), made as deploy/README.md says."""

    proc = None
    redis = None
    tmp = None

    @classmethod
    def start_redis(cls):
        """The fleet's control store the ConfigMap names (${SLUICE_REDIS_URL}): a real
        redis-server on loopback with a password, as the Secret sluice-redis would give."""
        cls.redis_port, cls.redis_pw = tp.free_port(), uuid.uuid4().hex
        cls.redis = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(cls.redis_port), "--save", "",
             "--appendonly", "no", "--dir", cls.tmp, "--requirepass", cls.redis_pw],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        if not tp.wait_for_port(cls.redis_port, cls.redis, tp.START_TIMEOUT_S):
            raise RuntimeError("redis-server did not start (exit %s)" % cls.redis.poll())
        return "redis://:%s@127.0.0.1:%d/0" % (cls.redis_pw, cls.redis_port)

    def redis_cli(self, *args):
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port),
                            "--no-auth-warning", "-a", self.redis_pw, *args],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=st.tmp)
        cls.tokens = {"patcher": uuid.uuid4().hex + uuid.uuid4().hex,
                      "reviewer": uuid.uuid4().hex + uuid.uuid4().hex}
        env = tp.client_env(SLUICE_REDIS_URL=cls.start_redis())
        for name, token in cls.tokens.items():
            # printf %s "$TOKEN" | sha256sum | cut -d' ' -f1
            r = subprocess.run("printf %s \"$T\" | sha256sum | cut -d' ' -f1", shell=True,
                               capture_output=True, text=True, env=dict(env, T=token), timeout=30)
            env["SLUICE_TOKEN_SHA256_" + name.upper()] = r.stdout.strip()
        text = sidecar_config_text(GATEWAY_CONFIGMAP)
        cls.port = tp.free_port()
        text = replace_once(text, "data_dir: /var/lib/sluice/data",
                            "data_dir: " + os.path.join(cls.tmp, "data"))
        text = replace_once(text, "- address: 0.0.0.0:3128\n", "- address: 127.0.0.1:%d\n" % cls.port)
        cls.admin_port = tp.free_port()
        text = replace_once(text, "admin: {address: 0.0.0.0:9901,",
                            'admin: {address: "127.0.0.1:%d",' % cls.admin_port)
        text = replace_once(text, "metrics: {address: 0.0.0.0:9902}",
                            'metrics: {address: "127.0.0.1:%d"}' % tp.free_port())
        cls.audit = os.path.join(cls.tmp, "audit.jsonl")
        text = replace_once(text, "audit: {path: /var/log/sluice/audit.jsonl,", "audit: {path: %s," % cls.audit)
        text = replace_once(text, "  - identity: patcher\n    rules:\n",
                            "  - identity: patcher\n    rules:\n"
                            "      - hosts: [\"%s\"]\n        ports: [%d]\n        action: allow\n"
                            % (ORIGIN_HOST, st.origin.port))
        text = replace_once(text, "    limits: {requests_per_minute: 600,",
                            "    private_destinations: [%s/32]\n"
                            "    limits: {requests_per_minute: 600," % ORIGIN_HOST)
        text = replace_once(text, "upstream:\n  connect_timeout: 10s\n",
                            "upstream:\n  connect_timeout: 10s\n  ca_file: %s\n"
                            % os.path.join(st.tmp, "test-ca.pem"))
        config = os.path.join(cls.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(text)
        cls.err = open(os.path.join(cls.tmp, "stderr"), "wb")
        cls.proc = subprocess.Popen([tp.sluice_binary(), "run", "--config", config],
                                    stdout=subprocess.DEVNULL, stderr=cls.err,
                                    stdin=subprocess.DEVNULL, env=env)
        if not tp.wait_for_port(cls.port, cls.proc, tp.START_TIMEOUT_S):
            with open(os.path.join(cls.tmp, "stderr"), "rb") as f:
                raise RuntimeError("the gateway config did not start (exit %s):\n%s"
                                   % (cls.proc.poll(), f.read().decode(errors="replace")[-3000:]))
        # A replica that finds an empty control store waits for the fleet's kill switch
        # state before it serves (README, fleet): /readyz says when.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + tp.START_TIMEOUT_S
        while True:
            try:
                with opener.open("http://127.0.0.1:%d/readyz" % cls.admin_port, timeout=5) as r:
                    if r.status == 200:
                        break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline or cls.proc.poll() is not None:
                raise RuntimeError("the gateway config never became ready")
            time.sleep(0.05)
        cls.ca = os.path.join(cls.tmp, "data", "ca.pem")

    @classmethod
    def tearDownClass(cls):
        tp.stop_run(cls.proc, (), (cls.err,), None)
        if cls.redis is not None:
            cls.redis.kill()
            cls.redis.wait(timeout=30)

    def test_the_gateway_joins_its_control_store(self):
        # Registered as a live replica (the heartbeat), the kill switch state read; the
        # store password never reaches the log.
        deadline = time.monotonic() + tp.START_TIMEOUT_S
        while self.redis_cli("ZCARD", "sluice:replicas") != "1":
            self.assertLess(time.monotonic(), deadline, "the gateway never registered")
            time.sleep(0.05)
        with open(os.path.join(self.tmp, "stderr"), "rb") as f:
            self.assertNotIn(self.redis_pw.encode(), f.read())

    def curl_as(self, user, token, m):
        proxy = "http://%s:%s@127.0.0.1:%d" % (user, token, self.port)
        env = dict(st.env, HTTPS_PROXY=proxy, https_proxy=proxy, SSL_CERT_FILE=self.ca,
                   CURL_CA_BUNDLE=self.ca)
        return subprocess.run(["bash", "-euo", "pipefail", "-c", st.recipes["curl"][1]],
                              capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                              env=dict(env, URL=url("/v1/gateway/" + m), BODY="{}"))

    def test_each_workload_is_its_identity_and_a_wrong_token_is_refused(self):
        m = marker()
        r = self.curl_as("patcher", self.tokens["patcher"], m)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(st.origin.requests_for(m)), 1)
        _, _, hits = wait_for_audit_in(self.audit, lambda x: m in str(x.get("url", "")))
        self.assertEqual(hits[0]["identity"], "patcher")
        # The reviewer's policy does not list the origin: policy_deny for that identity.
        m2 = marker()
        r = self.curl_as("reviewer", self.tokens["reviewer"], m2)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(st.origin.requests_for(m2), [])
        # Another workload's token, or none, resolves no identity: 407, nothing sent.
        for user, token in (("patcher", self.tokens["reviewer"]), ("patcher", "wrong")):
            m3 = marker()
            r = self.curl_as(user, token, m3)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("407", r.stderr + r.stdout)
            self.assertEqual(st.origin.requests_for(m3), [])
        self.err.flush()
        with open(os.path.join(self.tmp, "stderr"), "rb") as f:
            err = f.read().decode(errors="replace")
        for token in self.tokens.values():
            self.assertNotIn(token, err, "a proxy token is in sluice's log")

    def test_node_undici_recipe_sends_the_proxy_token(self):
        """The guide's undici recipe with a gateway URL (NAME:TOKEN@): older undici (5.x)
        sends no Proxy-Authorization from the URL, so the recipe passes it as `token`."""
        with_debian_node_path()
        if not node_has("undici"):
            self.skipTest("node or the undici package is missing (npm install undici, or "
                          "Debian's node-undici)")

        def run(user, token, m):
            proxy = "http://%s:%s@127.0.0.1:%d" % (user, token, self.port)
            env = dict(st.env, HTTPS_PROXY=proxy, https_proxy=proxy, NODE_EXTRA_CA_CERTS=self.ca,
                       URL=url("/v1/gateway-undici/" + m), BODY="{}")
            return subprocess.run([shutil.which("node") or "node", "-e",
                                   st.recipes["node-undici"][1]],
                                  capture_output=True, text=True, env=env,
                                  timeout=CLIENT_TIMEOUT_S)

        m = marker()
        r = run("patcher", self.tokens["patcher"], m)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("200 "), r.stdout)
        self.assertEqual(len(st.origin.requests_for(m)), 1)
        _, _, hits = wait_for_audit_in(self.audit, lambda x: m in str(x.get("url", "")))
        self.assertEqual(hits[0]["identity"], "patcher")
        m = marker()
        r = run("patcher", "wrong", m)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(st.origin.requests_for(m), [])


# ---------------------------------------------------------------- the pod, as its users

def init_container_script(deployment_text, name):
    """The folded `- >-` script of init container `name` (args of bash -c)."""
    lines = deployment_text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == "- name: " + name)
    at = next(i for i in range(start, len(lines)) if lines[i].strip() == "- >-")
    indent = len(lines[at + 1]) - len(lines[at + 1].lstrip())
    words = []
    for line in lines[at + 1:]:
        if len(line) - len(line.lstrip()) < indent or not line.strip():
            break
        words.append(line.strip())
    return " ".join(words)


class sidecar_pod_test(unittest.TestCase):
    """The sidecar pod's start as Kubernetes runs it, minus Kubernetes: the bootstrap
    Job's ca-init step, Secret files owned by root with the manifest's defaultMode, volume
    roots owned by root (mode 0777, as an emptyDir), the `sluice-files` copy step and
    `sluice run` as the manifest's user 10001, on the ConfigMap's configuration with its
    paths moved under a scratch root."""

    def test_copy_step_and_sluice_start_as_user_10001(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to create root-owned volumes and switch to user 10001")
        if not shutil.which("setpriv"):
            self.skipTest("setpriv (util-linux) is not installed")
        with open(SIDECAR_DEPLOYMENT, encoding="utf-8") as f:
            deployment = f.read()
        modes = dict(re.findall(r"secret: \{secretName: ([\w-]+), defaultMode: (0\d+)\}", deployment))
        self.assertIn("sluice-ca", modes)
        self.assertIn("sluice-admin-token", modes)
        self.assertIn("runAsUser: 10001", deployment)

        pod = tempfile.mkdtemp(prefix="sluice-pod-")
        try:
            os.chmod(pod, 0o755)
            as_sluice = ["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups"]
            # The bootstrap Job's ca-init step, as its user 10001 on a root-owned emptyDir,
            # with `sluice` on the PATH as in the image.
            with open(BOOTSTRAP_JOB, encoding="utf-8") as f:
                job = f.read()
            self.assertIn("runAsUser: 10001", job)
            bootstrap = os.path.join(pod, "bootstrap")
            os.makedirs(bootstrap)
            os.chmod(bootstrap, 0o777)
            # The binary where user 10001 can reach it (the build folder may be private).
            bin_dir = os.path.join(pod, "bin")
            os.makedirs(bin_dir)
            os.chmod(bin_dir, 0o755)
            sluice = os.path.join(bin_dir, "sluice")
            try:
                os.link(os.path.realpath(tp.sluice_binary()), sluice)
            except OSError:
                shutil.copy2(tp.sluice_binary(), sluice)
            os.chmod(sluice, 0o755)
            r = subprocess.run(as_sluice + ["bash", "-c", init_container_script(job, "ca-init")
                                            .replace("/bootstrap", bootstrap)],
                               capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                               env=dict(tp.client_env(), PATH=bin_dir + ":" + os.environ["PATH"]))
            self.assertEqual(r.returncode, 0, "the Job's ca-init step failed: " + r.stderr)
            with open(os.path.join(bootstrap, "admin.token")) as f:
                self.assertRegex(f.read(), r"^[0-9a-f]{64}$")
            # The Secrets the Job creates from them, as the kubelet mounts them: root-owned,
            # with the Deployment's defaultMode.
            secrets = os.path.join(pod, "run", "secrets")
            for volume, files, mode in (
                    ("sluice-ca", ("ca/ca.pem", "ca/ca.key"), modes["sluice-ca"]),
                    ("sluice-admin", ("admin.token",), modes["sluice-admin-token"])):
                d = os.path.join(secrets, volume)
                os.makedirs(d)
                os.chmod(d, 0o755)
                for name in files:
                    target = os.path.join(d, os.path.basename(name))
                    shutil.copyfile(os.path.join(bootstrap, name), target)
                    os.chown(target, 0, 0)
                    os.chmod(target, int(mode, 8))
            for d in ("run", "run/secrets"):
                os.chmod(os.path.join(pod, d), 0o755)
            for volume in ("var/lib/sluice", "var/log/sluice"):
                os.makedirs(os.path.join(pod, volume))
                os.chmod(os.path.join(pod, volume), 0o777)
            for d in ("var", "var/lib", "var/log"):
                os.chmod(os.path.join(pod, d), 0o755)

            script = init_container_script(deployment, "sluice-files")
            moved = script.replace("/run/secrets/", pod + "/run/secrets/") \
                          .replace("/var/lib/sluice", pod + "/var/lib/sluice")
            r = subprocess.run(as_sluice + ["bash", "-c", moved], capture_output=True, text=True,
                               timeout=CLIENT_TIMEOUT_S)
            self.assertEqual(r.returncode, 0, "the copy step failed as user 10001: " + r.stderr)

            config_text = sidecar_config_text()
            for old, new in (("/var/lib/sluice/data", pod + "/var/lib/sluice/data"),
                             ("/var/log/sluice/", pod + "/var/log/sluice/")):
                config_text = replace_once(config_text, old, new)
            proxy_port, admin_port = tp.free_port(), tp.free_port()
            config_text = replace_once(config_text, "- address: 127.0.0.1:3128\n",
                                       "- address: 127.0.0.1:%d\n" % proxy_port)
            config_text = replace_once(config_text, "admin: {address: 0.0.0.0:9901,",
                                       'admin: {address: "127.0.0.1:%d",' % admin_port)
            config_text = replace_once(config_text, "metrics: {address: 0.0.0.0:9902}",
                                       'metrics: {address: "127.0.0.1:%d"}' % tp.free_port())
            config = os.path.join(pod, "sluice.yaml")
            with open(config, "w") as f:
                f.write(config_text)
            os.chmod(config, 0o644)
            with open(os.path.join(pod, "stderr"), "wb") as err:
                proc = subprocess.Popen(as_sluice + [sluice, "run", "--config", config],
                                        stdout=subprocess.DEVNULL, stderr=err,
                                        stdin=subprocess.DEVNULL, env=tp.client_env())
                try:
                    started = tp.wait_for_port(proxy_port, proc, tp.START_TIMEOUT_S)
                    with open(os.path.join(pod, "stderr"), "rb") as f:
                        log = f.read().decode(errors="replace")[-3000:]
                    self.assertTrue(started, "sluice did not start as user 10001 (exit %s):\n%s"
                                    % (proc.poll(), log))
                    with socket.create_connection(("127.0.0.1", admin_port), timeout=10) as c:
                        c.sendall(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
                        self.assertIn(b" 200 ", c.recv(200))
                finally:
                    proc.terminate()
                    proc.wait(timeout=15)
            data = os.path.join(pod, "var", "lib", "sluice", "data")
            self.assertEqual(os.stat(data).st_uid, 10001)
            self.assertEqual(os.stat(data).st_mode & 0o777, 0o700)
            for name in ("ca.pem", "ca.key", "admin.token"):
                st_ = os.stat(os.path.join(data, name))
                self.assertEqual((st_.st_uid, st_.st_mode & 0o777), (10001, 0o600), name)
        finally:
            shutil.rmtree(pod, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
