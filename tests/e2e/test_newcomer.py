#!/usr/bin/env python3
"""End-to-end tests for issue 24, "First hour with sluice": what a new user meets, run with
real clients (curl, Python, Node, npm, git) through one real `sluice run`.

Per run, in a fresh temporary directory (one sluice process for the module):
  * test_proxy.py's throwaway test CA; a TLS origin on 127.0.0.2 (loopback, but not in the
    printed NO_PROXY, so clients reach it through sluice) that also serves git smart HTTP
    through `git http-backend` (test_deploy.py's origin), and a plain "local service" on
    127.0.0.1 that clients must reach directly;
  * `sluice run --config C --data-dir D` with a plain and an HTTPS proxy listener; the
    client environment is exactly the `export` lines sluice printed.
The README walkthrough (`# walkthrough` block of README.md) runs as written against its own
sluice, with the run line pointed at a test config and example.com at the local origin.

Run by ctest (tests/e2e/CMakeLists.txt) with SLUICE_BIN set, or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_newcomer.py -v
"""

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)
import test_deploy as td  # noqa: E402

ORIGIN_HOST = td.ORIGIN_HOST  # 127.0.0.2
CLIENT_TIMEOUT_S = 60.0
CLEARED = td.CLEARED


class st:
    tmp = None
    sluice = None
    stdout = None
    stderr = None
    origin = None
    local = None
    npm_origin = None  # TLS on 127.0.0.1, reached as localhost
    proxy_port = None
    tls_proxy_port = None
    admin_port = None
    metrics_port = None
    data_dir = None
    audit = None
    config = None
    banner = ""
    env = {}
    token = None


def config_text(proxy_port, tls_proxy_port, admin_port, metrics_port, audit):
    """The embedded default's shape (no data_dir: --data-dir gives it) plus the origin."""
    tls_listener = ""
    if tls_proxy_port:
        tls_listener = ("  - address: 127.0.0.1:%d\n    tls: {cert: %s, key: %s}\n"
                        % (tls_proxy_port, os.path.join(st.tmp, "origin.pem"),
                           os.path.join(st.tmp, "origin.key")))
    return f"""version: 1
listeners:
  - address: 127.0.0.1:{proxy_port}
{tls_listener}ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(st.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: local
    source_cidrs: [127.0.0.0/8, "::1/128"]
policies:
  - identity: local
    rules:
      - hosts: ["{ORIGIN_HOST}"]
        ports: [{st.origin.port}]
        action: allow
      - hosts: ["localhost"]
        ports: [{st.npm_origin.port}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: deny
    private_destinations: [{ORIGIN_HOST}/32, 127.0.0.1/32]
admin: {{address: "127.0.0.1:{admin_port}"}}
metrics: {{address: "127.0.0.1:{metrics_port}"}}
audit: {{path: {audit}, fsync: always}}
"""


def exports(text):
    """The variables of the `export A=B C=D` lines sluice printed."""
    env = {}
    for line in text.splitlines():
        if line.startswith("export "):
            for assignment in line[len("export "):].split():
                name, _, value = assignment.partition("=")
                env[name] = value
    return env


def stop_everything():
    tp.stop_run(st.sluice, (st.origin, st.local, st.npm_origin), (st.stdout, st.stderr),
                st.tmp)
    st.origin = st.local = st.npm_origin = None


def setUpModule():
    binary = tp.sluice_binary()
    atexit.register(stop_everything)
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-newcomer-")
    tp.make_certificates(st.tmp)
    td.make_origin_certificate(st.tmp)
    st.origin = td.origin_server(os.path.join(st.tmp, "origin2.pem"),
                                 os.path.join(st.tmp, "origin2.key"))
    st.local = tp.recording_origin("local")  # plain HTTP on 127.0.0.1
    # npm's registry: by name (see test_npm_trusts_sluice_through_the_printed_lines)
    st.npm_origin = tp.recording_origin("npm", os.path.join(st.tmp, "origin.pem"),
                                        os.path.join(st.tmp, "origin.key"))
    st.proxy_port, st.tls_proxy_port = tp.free_port(), tp.free_port()
    st.admin_port, st.metrics_port = tp.free_port(), tp.free_port()
    st.data_dir = os.path.join(st.tmp, "custom-data")
    st.audit = os.path.join(st.tmp, "audit.jsonl")
    st.config = os.path.join(st.tmp, "sluice.yaml")
    with open(st.config, "w") as f:
        f.write(config_text(st.proxy_port, st.tls_proxy_port, st.admin_port, st.metrics_port,
                            st.audit))
    st.token = tp.github_classic_token()
    home = os.path.join(st.tmp, "home")
    os.makedirs(home)
    st.stdout = open(os.path.join(st.tmp, "sluice.stdout"), "wb")
    st.stderr = open(os.path.join(st.tmp, "sluice.stderr"), "wb")
    base = {k: v for k, v in os.environ.items() if k.lower() not in CLEARED}
    base.update({"HOME": home, "XDG_DATA_HOME": os.path.join(home, "xdg")})
    st.sluice = subprocess.Popen([binary, "run", "--config", st.config, "--data-dir",
                                  st.data_dir], stdout=st.stdout, stderr=st.stderr,
                                 stdin=subprocess.DEVNULL, env=base)
    if not tp.wait_for_port(st.proxy_port, st.sluice, tp.START_TIMEOUT_S):
        raise RuntimeError("sluice did not start (exit %s):\n%s"
                           % (st.sluice.poll(), read(os.path.join(st.tmp, "sluice.stderr"))))
    deadline = time.monotonic() + 20
    while "export GIT_SSL_CAINFO" not in st.banner and time.monotonic() < deadline:
        st.banner = read(os.path.join(st.tmp, "sluice.stdout"))
        time.sleep(0.05)
    env = dict(base)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                "npm_config_update_notifier": "false", "npm_config_fund": "false",
                "npm_config_audit": "false", "npm_config_cache": os.path.join(home, "npm")})
    env.update(exports(st.banner))
    st.env = env


def tearDownModule():
    stop_everything()


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def marker():
    return uuid.uuid4().hex[:12]


def url(path):
    return "https://%s:%d%s" % (ORIGIN_HOST, st.origin.port, path)


def sh(cmd, env=None, timeout=CLIENT_TIMEOUT_S, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=env or st.env,
                          timeout=timeout, **kw)


def sluice(*args, env=None, timeout=CLIENT_TIMEOUT_S):
    return sh([tp.sluice_binary(), *args], env=env, timeout=timeout)


def wait_for_audit(predicate, count=1):
    return td.wait_for_audit_in(st.audit, predicate, count)


def metrics_text():
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            "http://127.0.0.1:%d/metrics" % st.metrics_port, timeout=10) as r:
        return r.read().decode()


def metric_value(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(?:\{(.*)\})? ([0-9.eE+-]+|NaN)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


class newcomer_test(unittest.TestCase):
    maxDiff = 4000

    def assert_through_sluice(self, m):
        self.assertTrue(st.origin.requests_for(m), "the request did not reach the origin")
        _, records, hits = wait_for_audit(lambda r: m in str(r.get("url", "")))
        self.assertEqual(len(hits), 1, records[-5:])
        self.assertEqual(hits[0]["decision"], "allow", hits[0])

    # -- 1, 2, 12: the printed lines

    def test_banner_prints_no_proxy_client_ca_variables_and_https_listener(self):
        env = exports(st.banner)
        ca = os.path.join(st.data_dir, "ca.pem")
        for name in ("NO_PROXY", "no_proxy"):
            self.assertEqual(env.get(name, "").split(","), ["localhost", "127.0.0.1", "::1"],
                             st.banner)
        for name in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT",
                     "NODE_EXTRA_CA_CERTS", "NPM_CONFIG_CAFILE", "GIT_SSL_CAINFO"):
            self.assertEqual(env.get(name), ca, name + " in\n" + st.banner)
        self.assertEqual(env.get("NODE_USE_ENV_PROXY"), "1")
        self.assertEqual(env.get("HTTPS_PROXY"), "http://127.0.0.1:%d" % st.proxy_port)
        self.assertIn("private destination", st.banner, "the NO_PROXY line says why")
        self.assertIn("EnvHttpProxyAgent", st.banner, "the Node 20 fetch note")
        # 12: the HTTPS proxy listener is printed as https://
        self.assertIn("also listening on https://127.0.0.1:%d" % st.tls_proxy_port, st.banner)

    def test_https_proxy_listener_works_as_printed(self):
        m = marker()
        r = sh(["curl", "-sS", "--max-time", "20", "--proxy",
                "https://127.0.0.1:%d" % st.tls_proxy_port, "--proxy-cacert",
                os.path.join(st.tmp, "test-ca.pem"), "-o", "/dev/null", "-w", "%{http_code}",
                url("/https-listener/" + m)])
        self.assertEqual(r.stdout, "200", r.stderr)
        self.assert_through_sluice(m)

    def test_curl_goes_through_sluice_and_loopback_goes_direct(self):
        m = marker()
        r = sh(["curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}",
                url("/curl/" + m)])
        self.assertEqual(r.stdout, "200", r.stderr)
        self.assert_through_sluice(m)
        # sluice's own admin API and a local service: direct, not 403 private_destination
        r = sh(["curl", "-sS", "--max-time", "20", "http://127.0.0.1:%d/healthz" % st.admin_port])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"ok"', r.stdout)
        m = marker()
        r = sh(["curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}",
                "http://127.0.0.1:%d/local/%s" % (st.local.port, m)])
        self.assertEqual(r.stdout, "200", r.stderr)
        self.assertTrue(st.local.requests_for(m))
        _, _, hits = wait_for_audit(lambda x: m in str(x.get("url", "")), count=1)
        self.assertEqual(hits, [], "a loopback request went through sluice")

    def test_python_goes_through_sluice_and_loopback_goes_direct(self):
        m, local_m = marker(), marker()
        code = ("import sys, urllib.request\n"
                "for u in sys.argv[1:]:\n"
                "    print(urllib.request.urlopen(u, timeout=20).status)\n")
        r = sh([sys.executable, "-c", code, url("/python/" + m),
                "http://localhost:%d/local/%s" % (st.local.port, local_m)])
        self.assertEqual(r.stdout.split(), ["200", "200"], r.stderr)
        self.assert_through_sluice(m)
        self.assertTrue(st.local.requests_for(local_m))

    def test_node_undici_env_agent_goes_through_sluice_and_loopback_goes_direct(self):
        env = dict(st.env, NODE_PATH="/usr/share/nodejs")
        probe = sh(["node", "-e", "process.exit(require('undici').EnvHttpProxyAgent ? 0 : 1)"],
                   env=env) if shutil.which("node") else None
        if probe is None or probe.returncode != 0:
            self.skipTest("node or undici with EnvHttpProxyAgent (undici >= 6.7) is missing")
        m, local_m = marker(), marker()
        code = ("const {fetch, setGlobalDispatcher, EnvHttpProxyAgent} = require('undici');\n"
                "setGlobalDispatcher(new EnvHttpProxyAgent());\n"
                "(async () => { for (const u of process.argv.slice(1)) "
                "console.log((await fetch(u)).status); })();\n")
        r = sh(["node", "-e", code, url("/node/" + m),
                "http://127.0.0.1:%d/local/%s" % (st.local.port, local_m)], env=env)
        self.assertEqual(r.stdout.split(), ["200", "200"], r.stderr)
        self.assert_through_sluice(m)
        self.assertTrue(st.local.requests_for(local_m))

    def test_npm_trusts_sluice_through_the_printed_lines(self):
        if not shutil.which("npm"):
            self.skipTest("npm is not installed")
        # An npmrc with `cafile` (as Debian's) would win over NODE_EXTRA_CA_CERTS; the
        # printed NPM_CONFIG_CAFILE wins over it.
        npmrc = os.path.join(st.tmp, "npmrc-with-cafile")
        with open(npmrc, "w") as f:
            f.write("cafile=/etc/ssl/certs/ca-certificates.crt\n")
        # The registry by name: npm's proxy agent sends no SNI to an IP literal and then
        # checks the certificate against "localhost" whatever the IP (any proxy, not only
        # sluice). localhost is in the printed NO_PROXY, so this registry is taken out of
        # it for the test; the CA lines are what is under test.
        no_proxy = ",".join(h for h in st.env.get("NO_PROXY", "").split(",")
                            if h and h != "localhost")
        env = dict(st.env, NPM_CONFIG_GLOBALCONFIG=npmrc, npm_config_fetch_retries="0",
                   NO_PROXY=no_proxy, no_proxy=no_proxy)
        registry = "https://localhost:%d" % st.npm_origin.port
        m = marker()
        r = sh(["npm", "ping", "--registry", "%s/npm/%s/" % (registry, m)], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(st.npm_origin.requests_for(m), r.stderr)
        # 5: a denial shows sluice's reason in npm's own error line
        m = marker()
        r = sh(["npm", "ping", "--registry", "%s/npm/%s/%s/" % (registry, m, st.token)],
               env=env)
        self.assertNotEqual(r.returncode, 0)
        out = r.stdout + r.stderr
        self.assertRegex(out, r"403 Forbidden \(sluice: dlp_finding github-pat-classic, "
                              r"flow [0-9a-f]{8}-[0-9a-f]{6}\)")
        self.assertEqual(st.npm_origin.requests_for(m), [])

    # -- 3, 4: one --data-dir everywhere

    def test_ca_path_takes_data_dir_and_dir_alias(self):
        ca = os.path.join(st.data_dir, "ca.pem")
        for flag in ("--data-dir", "--dir"):
            r = sluice("ca", "path", flag, st.data_dir)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, ca), r.stderr)
        r = sluice("ca", "path", "--data-dir=" + st.data_dir)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, ca), r.stderr)

    def test_ca_path_without_a_ca_exits_2_with_a_clear_message(self):
        empty = tempfile.mkdtemp(dir=st.tmp)
        r = sluice("ca", "path", "--data-dir", empty)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertIn("no CA certificate at " + os.path.join(empty, "ca.pem"), r.stderr)
        self.assertIn("sluice ca init --data-dir " + empty, r.stderr)
        # the default data dir (HOME without one) is the same case
        r = sluice("ca", "path")
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_admin_commands_find_the_token_in_data_dir(self):
        admin = "127.0.0.1:%d" % st.admin_port
        r = sluice("flows", "--admin", admin, "--data-dir", st.data_dir, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("flows", json.loads(r.stdout))
        r = sluice("flows", "--admin", admin, "--dir=" + st.data_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        # without it (HOME has no data dir): exit 2, naming what to pass
        r = sluice("flows", "--admin", admin)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--data-dir", r.stderr)
        token = read(os.path.join(st.data_dir, "admin.token")).strip()
        self.assertNotIn(token, r.stderr + r.stdout)

    # -- 5: the reason where the client shows it

    def test_curl_status_line_names_rule_and_flow(self):
        m = marker()
        # --suppress-connect-headers: curl -i would print the CONNECT's own 200 first
        r = sh(["curl", "-sS", "-i", "--suppress-connect-headers", "--max-time", "20",
                "-d", '{"k":"%s"}' % st.token, url("/reason/" + m)])
        first = r.stdout.splitlines()[0] if r.stdout else ""
        got = re.match(r"^HTTP/1\.1 403 Forbidden \(sluice: dlp_finding github-pat-classic, "
                       r"flow ([0-9a-f]{8}-[0-9a-f]{6})\)\s*$", first)
        self.assertTrue(got, r.stdout[:500])
        self.assertIn("x-sluice-flow: " + got.group(1), r.stdout.lower())
        self.assertNotIn(st.token, r.stdout)

    def git_repo(self, m):
        if not shutil.which("git"):
            self.skipTest("git is not installed")
        root = os.path.join(st.tmp, "git-" + m)
        st.origin.git_root = root
        bare = os.path.join(root, "repo.git")
        work = os.path.join(root, "work")
        for cmd in (["git", "init", "-q", "--bare", bare],
                    ["git", "-C", bare, "config", "http.receivepack", "true"],
                    ["git", "init", "-q", "-b", "main", work]):
            r = sh(cmd)
            self.assertEqual(r.returncode, 0, r.stderr)
        return work, url("/git/repo.git")

    def git(self, work, *args):
        return sh(["git", "-C", work, "-c", "user.name=t", "-c", "user.email=t@example.com",
                   *args])

    def test_git_push_of_a_secret_prints_sluices_reason(self):
        m = marker()
        work, remote = self.git_repo(m)
        with open(os.path.join(work, "config.txt"), "w") as f:
            f.write("token = %s\n" % st.token)
        self.git(work, "add", "config.txt")
        self.assertEqual(self.git(work, "commit", "-q", "-m", "add " + m).returncode, 0)
        # The pack is compressed as git sends it: sluice reads it with libgit2 and names
        # the file (and the other rules the line matches: "token = ..." is also a generic
        # assignment) in the message.
        r = self.git(work, "push", remote, "main")
        self.assertNotEqual(r.returncode, 0, r.stderr)
        got = re.search(r"remote: sluice: dlp_finding [a-z0-9,-]*github-pat-classic[a-z0-9,-]* in "
                        r"git:blob:config\.txt, flow ([0-9a-f]{8}-[0-9a-f]{6})", r.stderr)
        self.assertTrue(got, r.stderr)
        self.assertNotIn("Everything up-to-date", r.stderr)
        self.assertNotIn(st.token, r.stderr)
        _, _, hits = wait_for_audit(lambda x: x.get("flow") == got.group(1)
                                    and x.get("decision") == "deny")
        self.assertTrue(hits, "the flow id git printed is the audit's")
        self.assertEqual(hits[0]["reason"], "dlp_finding")
        # a clean push to the same repository goes through
        clean = os.path.join(st.origin.git_root, "clean-work")
        self.assertEqual(sh(["git", "init", "-q", "-b", "main", clean]).returncode, 0)
        self.git(clean, "commit", "-q", "--allow-empty", "-m", "clean " + m)
        r = self.git(clean, "push", remote, "main")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_git_info_refs_denial_shows_as_remote_lines(self):
        m = marker()
        work, remote = self.git_repo(m)
        # a token in the remote URL's path: denied on the first request (info/refs)
        r = self.git(work, "ls-remote", remote.replace("/git/", "/git/%s/" % st.token))
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, r"remote: sluice: dlp_finding github-pat-classic, flow "
                                   r"[0-9a-f]{8}-[0-9a-f]{6}")
        # (git itself echoes the URL it was given, token included, in its fatal line)

    # -- 6: a client that does not trust the CA

    def test_client_without_the_ca_is_audited_counted_and_hinted_once(self):
        before = metric_value(metrics_text(), "sluice_client_tls_errors_total",
                              reason="unknown_ca") or 0
        env = dict(st.env, CURL_CA_BUNDLE="/etc/ssl/certs/ca-certificates.crt",
                   SSL_CERT_FILE="/etc/ssl/certs/ca-certificates.crt")
        marks = [marker(), marker()]
        for m in marks:
            r = sh(["curl", "-sS", "--max-time", "20", url("/untrusted/" + m)], env=env)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(st.origin.requests_for(m), [])
        target = "%s:%d" % (ORIGIN_HOST, st.origin.port)
        _, records, hits = wait_for_audit(lambda x: x.get("reason") == "client_tls"
                                          and x.get("url") == target, count=2)
        self.assertGreaterEqual(len(hits), 2, records[-5:])
        self.assertEqual(hits[-1]["decision"], "deny")
        self.assertEqual(hits[-1]["method"], "CONNECT")
        self.assertEqual(hits[-1]["identity"], "local")
        after = metric_value(metrics_text(), "sluice_client_tls_errors_total",
                             reason="unknown_ca")
        self.assertGreaterEqual(after - before, 2)
        log = read(os.path.join(st.tmp, "sluice.stderr"))
        hint = "refused sluice's certificate (unknown_ca)"
        self.assertEqual(log.count(hint), 1, log[-3000:])
        self.assertIn(os.path.join(st.data_dir, "ca.pem"), log)

    # -- 7: latency and byte metrics

    def test_duration_bytes_and_upstream_timing_metrics(self):
        m = marker()
        body = "x" * 1000
        r = sh(["curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}",
                "-d", body, url("/metrics/" + m)])
        self.assertEqual(r.stdout, "200", r.stderr)
        wait_for_audit(lambda x: m in str(x.get("url", "")))
        text = metrics_text()
        count = metric_value(text, "sluice_request_duration_seconds_count", identity="local",
                             decision="allow")
        self.assertGreaterEqual(count or 0, 1, text)
        self.assertIsNotNone(metric_value(text, "sluice_request_duration_seconds_bucket",
                                          identity="local", decision="allow", le="+Inf"))
        self.assertGreaterEqual(metric_value(text, "sluice_bytes_total", direction="up") or 0,
                                1000)
        self.assertGreater(metric_value(text, "sluice_bytes_total", direction="down") or 0, 0)
        self.assertGreaterEqual(metric_value(text, "sluice_upstream_connect_seconds_count") or 0,
                                1)
        self.assertGreaterEqual(metric_value(text, "sluice_upstream_tls_seconds_count") or 0, 1)

    # -- 8: an opaque bearer token gets the exact dlp.ignore entry, never the value

    def test_bearer_token_denial_offers_the_ignore_entry(self):
        secret = "Xk" + uuid.uuid4().hex + "Qm7pL2"  # opaque, high entropy, no vendor format
        m = marker()
        r = sh(["curl", "-sS", "--max-time", "20", "-H", "Authorization: Bearer " + secret,
                url("/bearer/" + m)])
        doc = json.loads(r.stdout)
        self.assertEqual(doc["reason"], "dlp_finding", doc)
        self.assertIn("http-bearer-token", doc["rules"], doc)
        self.assertEqual(doc["ignore"][0]["rule"], "http-bearer-token")
        fp = doc["ignore"][0]["fingerprint"]
        self.assertRegex(fp, r"^sha256:[0-9a-f]{16}$")
        self.assertIn('- {rule: http-bearer-token, fingerprint: "%s"}' % fp, doc["hint"])
        self.assertNotIn(secret, r.stdout)
        log = read(os.path.join(st.tmp, "sluice.stderr"))
        self.assertIn('dlp.ignore: - {rule: http-bearer-token, fingerprint: "%s"}' % fp, log)
        self.assertNotIn(secret, log)
        _, _, hits = wait_for_audit(lambda x: doc["flow"] == x.get("flow"))
        self.assertIn(fp, [f["fingerprint"] for f in hits[0]["findings"]], "the audit's")


CUSTOM_RULES = """rules:
  - id: acme-token
    name: ACME token
    category: generic
    pattern: 'acme_[0-9a-f]{24}'
    examples: ['acme_0123456789abcdef01234567']
  - id: acme-key
    name: ACME key
    category: generic
    pattern: 'acmekey_[A-Z]{20}'
    examples: ['acmekey_ABCDEFGHIJKLMNOPQRST']
"""

BAD_RULES = """rules:
  - id: broken-rule
    name: broken
    category: generic
    pattern: 'abc(def[0-9]{8}'
"""


class scan_cli_test(unittest.TestCase):
    """Item 11: `sluice scan --rule-cost` and `--rules`, and `sluice help`."""

    def write(self, name, text):
        path = os.path.join(tempfile.mkdtemp(dir=st.tmp), name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_rule_cost_takes_a_separate_number_and_can_be_limited_to_rules_files(self):
        rules = self.write("acme.yml", CUSTOM_RULES)
        corpus = self.write("corpus.txt", "nothing here but acme_0123456789abcdef01234567\n" * 50)
        # Three Hyperscan compiles of the whole ruleset: tens of seconds in the sanitizer
        # build on 2 busy cores (it once took over 60 s there).
        r = sluice("scan", "--rules", rules, "--rule-cost", "1", "--rule-cost-scope", "rules",
                   "--format", "text", corpus, timeout=300)
        self.assertEqual(r.returncode, 1, r.stderr)  # a finding; "1" was not read as a file
        self.assertIn("acme-token", r.stdout)
        self.assertNotIn("cannot read", r.stderr)
        self.assertIn("rule cost: compiling and timing 3 databases", r.stderr)
        ranked = [line for line in r.stderr.splitlines() if re.match(r"^\s+\d+\. ", line)]
        self.assertEqual(len(ranked), 1, r.stderr)
        self.assertRegex(ranked[0], r"acme-(token|key)")

    def test_rule_cost_refuses_bad_numbers(self):
        corpus = self.write("c.txt", "x\n")
        for args in (["--rule-cost=-1"], ["--rule-cost", "-1"], ["--rule-cost=0"],
                     ["--rule-cost=5x"], ["--rule-cost-scope", "rules", "--rule-cost"]):
            r = sluice("scan", *args, corpus)
            self.assertEqual(r.returncode, 2, (args, r.stderr))

    def test_regex_error_in_a_custom_rule_names_file_line_col(self):
        rules = self.write("bad.yml", BAD_RULES)
        r = sluice("scan", "--rules", rules, self.write("c.txt", "x\n"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, re.escape(rules) + r":5:\d+: rule broken-rule: ")
        # the same rule through a configuration's rule_files
        cfg = os.path.join(os.path.dirname(rules), "sluice.yaml")
        with open(cfg, "w") as f:
            f.write("version: 1\nrule_files: [bad.yml]\n")
        r = sluice("check-config", cfg)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, re.escape(rules) + r":5:\d+: rule broken-rule: ")

    def test_help_lists_the_scan_flags(self):
        r = sluice("help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--rules", "--rule-cost", "--rule-cost-scope", "--data-dir"):
            self.assertIn(flag, r.stdout)

    def test_load_harness_checks_json_out_before_running(self):
        missing = os.path.join(st.tmp, "no-such-folder", "figures.json")
        r = sh([sys.executable, os.path.join(ROOT, "bench", "load", "run.py"), "--build",
                os.path.dirname(tp.sluice_binary()), "--json-out", missing], timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--json-out", r.stderr)
        self.assertIn("does not exist", r.stderr)


def readme_walkthrough():
    """The README.md block whose first line is `# walkthrough`."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    for m in re.finditer(r"^```sh\n(.*?)^```", text, re.M | re.S):
        if m.group(1).startswith("# walkthrough\n"):
            return m.group(1)
    raise AssertionError("README.md has no ```sh block starting with '# walkthrough'")


def replace_once(text, old, new):
    if text.count(old) < 1:
        raise AssertionError("the walkthrough no longer has %r; adapt test_newcomer.py" % old)
    return text.replace(old, new)


class walkthrough_test(unittest.TestCase):
    """README.md's walkthrough, pasted as written into bash against the local origin: the
    run line gets a test config (the embedded default's shape, free ports, the origin
    allowed), example.com becomes the origin and 9901 the test's admin port."""

    def test_readme_walkthrough_runs_as_written(self):
        d = tempfile.mkdtemp(dir=st.tmp)
        home = os.path.join(d, "home")
        os.makedirs(home)
        proxy_port, admin_port, metrics_port = tp.free_port(), tp.free_port(), tp.free_port()
        config = os.path.join(d, "walkthrough.yaml")
        with open(config, "w") as f:
            f.write(config_text(proxy_port, None, admin_port, metrics_port, "audit.jsonl"))
        binary = tp.sluice_binary()
        code = readme_walkthrough()
        code = replace_once(code, './build/sluice run --data-dir "$DATA"',
                            '%s run --config %s --data-dir "$DATA"' % (binary, config))
        code = replace_once(code, "./build/sluice", binary)
        code = replace_once(code, "https://example.com/", url("/walkthrough/"))
        code = replace_once(code, "127.0.0.1:9901", "127.0.0.1:%d" % admin_port)
        env = {k: v for k, v in os.environ.items() if k.lower() not in CLEARED}
        env.update({"HOME": home, "SLUICE_ADMIN_URL": "http://127.0.0.1:%d" % admin_port})
        env.pop("XDG_DATA_HOME", None)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=d, env=env,
                           capture_output=True, text=True, timeout=tp.START_TIMEOUT_S + 120)
        out = r.stdout
        self.assertEqual(r.returncode, 0, out + r.stderr + read(os.path.join(d, "sluice.out")))
        lines = out.splitlines()
        data = os.path.join(home, "sluice-demo")
        self.assertEqual(lines[0], os.path.join(data, "ca.pem"))
        self.assertEqual(lines[1], "200", out)
        self.assertEqual(lines[2], '{"status":"ok"}', out)
        self.assertRegex(lines[3], r"^HTTP/1\.1 403 Forbidden \(sluice: dlp_finding "
                                   r"github-pat-classic, flow [0-9a-f]{8}-[0-9a-f]{6}\)\s*$")
        record = json.loads(lines[4])
        self.assertEqual((record["decision"], record["reason"]), ("deny", "dlp_finding"))
        self.assertNotIn("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", lines[4])
        self.assertTrue(any("kill switch" in line.lower() or "killed" in line.lower()
                            for line in lines[5:]), out)
        self.assertTrue(st.origin.requests_for("/walkthrough/"), "the clean request arrived")


if __name__ == "__main__":
    unittest.main(verbosity=2)
