#!/usr/bin/env python3
"""End-to-end tests for operating sluice (issue 8): the audit fails closed and recovers,
configuration reloads under load, /metrics after a scripted session, the admin API's
token, and no planted secret in the audit file or the log. Standard library only.

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_operations.py -v

Each test class starts its own `sluice run` in a fresh temporary directory, with origins
from test_proxy.py (a TLS origin signed by a throwaway test CA, and a plain HTTP origin,
both recording every request). Every wait is bounded.
"""

import base64
import http.client
import json
import os
import re
import resource
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
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, token maker)

# Slow under sanitizers (the rule pack compiles slowly): CI raises it.
START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
CLIENT_TIMEOUT_S = 20.0


def binary():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    return path


class instance:
    """One `sluice run` with its own data dir, config file and origins."""

    def __init__(self, name, fsize_limit=None, gate="allow", audit_dir=None):
        self.tmp = tempfile.mkdtemp(prefix="sluice-ops-%s-" % name)
        tp.make_certificates(self.tmp)
        self.origin = tp.recording_origin("tls", os.path.join(self.tmp, "origin.pem"),
                                          os.path.join(self.tmp, "origin.key"))
        self.plain = tp.recording_origin("plain")
        self.dead_port = tp.free_port()  # allowed by policy, nothing listens: upstream error
        self.proxy_port = tp.free_port()
        self.admin_port = tp.free_port()
        self.metrics_port = tp.free_port()
        self.data_dir = os.path.join(self.tmp, "data")
        self.audit_path = os.path.join(audit_dir or os.path.join(self.tmp, "audit"),
                                       "audit.jsonl")
        self.config = os.path.join(self.tmp, "sluice.yaml")
        self.write_config(gate=gate)
        self.log_lines = []
        self.log_lock = threading.Lock()
        self.fsize_limit = fsize_limit
        self.start()

    def start(self):
        """Starts `sluice run` (again, after kill(): same data dir, config and audit)."""
        fsize_limit = self.fsize_limit

        def limits():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            if fsize_limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, resource.RLIM_INFINITY))

        # stderr through a pipe: a file would itself be subject to the file size limit.
        self.proc = subprocess.Popen([binary(), "run", "--config", self.config],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=tp.client_env(),
                                     preexec_fn=limits)
        self.reader = threading.Thread(target=self.read_log, args=(self.proc,), daemon=True)
        self.reader.start()
        if not tp.wait_for_port(self.proxy_port, self.proc, START_TIMEOUT_S) or \
                not tp.wait_for_port(self.admin_port, self.proc, START_TIMEOUT_S):
            self.stop()
            raise RuntimeError("sluice did not start; log:\n" + self.log()[-3000:])
        self.sluice_ca = os.path.join(self.data_dir, "ca.pem")
        with open(os.path.join(self.data_dir, "admin.token")) as f:
            self.token = f.read().strip()

    def kill(self):
        """SIGKILL, as a crash: nothing is flushed or closed."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.reader.join(timeout=5)

    def state(self):
        """'running', or how the process ended (for failure messages)."""
        rc = self.proc.poll()
        return "running" if rc is None else "exited with %d" % rc

    def read_log(self, proc):
        for line in proc.stderr:
            with self.log_lock:
                self.log_lines.append(line.decode(errors="replace"))

    def log(self):
        with self.log_lock:
            return "".join(self.log_lines)

    def config_text(self, gate="allow", broken=False):
        ports = ", ".join(str(p) for p in (self.origin.port, self.plain.port, self.dead_port))
        # `gate` decides /gate/ on the plain origin: the observable policy difference
        # between configuration versions. `broken` adds an unknown key (must be rejected).
        extra = "        surprise: 1\n" if broken else ""
        return f"""version: 1
data_dir: {self.data_dir}
listeners:
  - address: 127.0.0.1:{self.proxy_port}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(self.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: local
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: local
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{self.plain.port}]
        path_prefix: /gate/
        action: {gate}
{extra}      - hosts: ["127.0.0.1", "localhost"]
        ports: [{ports}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: deny
    private_destinations: [127.0.0.1/32, "::1/128"]
admin: {{address: "127.0.0.1:{self.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{self.metrics_port}"}}
audit: {{path: {self.audit_path}, fsync: always}}
logging: {{level: info, format: json}}
"""

    def write_config(self, **kw):
        # Atomic replace, as an operator's deploy tool would do it.
        tmp = self.config + ".new"
        with open(tmp, "w") as f:
            f.write(self.config_text(**kw))
        os.replace(tmp, self.config)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.reader.join(timeout=5)
        for o in (self.origin, self.plain):
            o.stop()
        if not os.environ.get("SLUICE_E2E_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- clients

    def plain_request(self, method, path, body=b"", headers=None):
        """Absolute-form request to the plain origin through sluice, new connection each
        time (so every request is a new flow). Returns (status, headers, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy_port,
                                          timeout=CLIENT_TIMEOUT_S)
        try:
            conn.request(method, "http://127.0.0.1:%d%s" % (self.plain.port, path), body=body,
                         headers=headers or {})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def tls_request(self, method, path, body=b"", headers=None, port=None):
        """CONNECT + TLS (sluice's CA) to the TLS origin. A refused CONNECT raises
        OSError('Tunnel connection failed: <status> ...')."""
        ctx = ssl.create_default_context(cafile=self.sluice_ca)
        conn = http.client.HTTPSConnection("127.0.0.1", self.proxy_port, context=ctx,
                                           timeout=CLIENT_TIMEOUT_S)
        conn.set_tunnel("localhost", port or self.origin.port)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def admin(self, method, path, token=None, body=b""):
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=60)
        try:
            headers = {"Authorization": "Bearer " + token} if token else {}
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def metrics(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            assert r.status == 200, r.status
            return parse_metrics(r.read().decode())
        finally:
            conn.close()

    def audit_records(self):
        try:
            with open(self.audit_path, "rb") as f:
                recs = tp.audit_lines(f.read())
            return [r for r in recs if r.get("event") != "start"]  # one per exchange
        except FileNotFoundError:
            return []


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format -> {(name, frozenset(labels.items())): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("unparseable metrics line: %r" % line)
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def verify(*files, partial=False):
    cmd = [binary(), "audit", "verify", *(["--partial"] if partial else []), *files]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------- audit failure


class audit_failure_test(unittest.TestCase):
    """A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes audit writes fail with
    EFBIG, as a full disk would. sluice looks ahead (the allow record is written after the
    response): once less than its headroom can be written, new flows get 503
    audit_unavailable, nothing reaches the origin unrecorded, the condition is counted, and
    traffic flows again once space is back."""

    def test_unwritable_audit_denies_new_flows_and_recovers(self):
        inst = instance("fsize", fsize_limit=96 * 1024)
        try:
            statuses = []
            for i in range(400):
                status, headers, body = inst.plain_request("GET", "/fill/%d" % i)
                statuses.append(status)
                if status == 503:
                    doc = json.loads(body)
                    self.assertEqual(doc["reason"], "audit_unavailable", doc)
                    self.assertIn("x-sluice-flow", headers)
                    break
                self.assertEqual(status, 200, body)
            self.assertEqual(statuses[-1], 503, "the audit never failed: %r" % statuses[-5:])
            allowed_before = statuses.count(200)

            # While it is unwritable: plain requests and CONNECT are refused, and the
            # origins see nothing.
            seen_plain = len(inst.plain.snapshot())
            seen_tls = len(inst.origin.snapshot())
            for i in range(3):
                status, _, body = inst.plain_request("POST", "/during/%d" % i, body=b"x" * 100)
                self.assertEqual(status, 503, body)
                with self.assertRaisesRegex(OSError, "503"):
                    inst.tls_request("GET", "/during-tls/%d" % i)
            self.assertEqual(len(inst.plain.snapshot()), seen_plain)
            self.assertEqual(len(inst.origin.snapshot()), seen_tls)
            status, body = inst.admin("GET", "/readyz")
            self.assertEqual(status, 503, body)
            self.assertGreaterEqual(
                metric(inst.metrics(), "sluice_audit_errors_total"), 1.0)

            # Every request the origin got is in the audit as an allow.
            recs = inst.audit_records()
            allowed = [r for r in recs if r["decision"] == "allow"]
            self.assertEqual(len(allowed), allowed_before)
            self.assertEqual(len(inst.plain.requests_for("/fill/")), allowed_before)
            # Refusals are recorded while there is still room for them, never as allow.
            for r in recs:
                if "/during" in r["url"] or r["method"] == "CONNECT":
                    self.assertEqual((r["decision"], r["reason"]), ("deny", "audit_unavailable"))

            # Space is back: the next flow's record is written and traffic flows again.
            resource.prlimit(inst.proc.pid, resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            # (the room check is cached for 100 ms, so allow a moment)
            end, results = time.monotonic() + 5, []
            while time.monotonic() < end and results[-1:] != [200]:
                results.append(inst.plain_request("GET", "/after/%d" % len(results))[0])
                time.sleep(0.05)
            self.assertEqual(results[-1], 200, results)
            self.assertEqual(inst.tls_request("GET", "/after-tls")[0], 200)
            status, _ = inst.admin("GET", "/readyz")
            self.assertEqual(status, 200)
            # No partial line was left behind: the whole chain verifies.
            r = verify(inst.audit_path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        finally:
            inst.stop()


# ---------------------------------------------------------------- reload under load


class reload_test(unittest.TestCase):

    def test_reload_five_times_under_load_with_one_invalid(self):
        inst = instance("reload", gate="allow")
        stop = threading.Event()
        failures, done = [], [0]

        def load():
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    status, _, body = inst.plain_request("POST", "/load/%d" % n,
                                                         body=b"payload " * 64)
                    if status != 200:
                        failures.append((n, status, body[:200]))
                except Exception as e:  # a dropped connection is a failure too
                    failures.append((n, "exception", repr(e)))
                done[0] += 1

        def gate_status():
            return inst.plain_request("GET", "/gate/probe")[0]

        def wait_gate(want, deadline_s=60):
            end = time.monotonic() + deadline_s
            while time.monotonic() < end:
                if gate_status() == want:
                    return True
                time.sleep(0.1)
            return False

        def metric_wait(name, want, deadline_s=60, **labels):
            end = time.monotonic() + deadline_s
            while time.monotonic() < end:
                if metric(inst.metrics(), name, **labels) >= want:
                    return True
                time.sleep(0.1)
            return False

        workers = [threading.Thread(target=load, daemon=True) for _ in range(3)]
        try:
            self.assertEqual(gate_status(), 200)
            for w in workers:
                w.start()
            time.sleep(0.5)

            # 1: deny /gate/, SIGHUP.
            inst.write_config(gate="deny")
            inst.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_gate(403), "SIGHUP reload did not apply")

            # 2: allow again, POST /v1/reload (answers after the new config is published).
            inst.write_config(gate="allow")
            status, body = inst.admin("POST", "/v1/reload", token=inst.token)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["result"], "ok")
            self.assertEqual(gate_status(), 200)

            # 3: an invalid file through the admin API: rejected with FILE:LINE:COL, the
            # old configuration keeps serving.
            inst.write_config(gate="deny", broken=True)
            status, body = inst.admin("POST", "/v1/reload", token=inst.token)
            self.assertEqual(status, 422, body)
            doc = json.loads(body)
            self.assertEqual(doc["reason"], "config_invalid")
            self.assertTrue(any(re.search(re.escape(inst.config) + r":\d+:\d+: .*surprise", p)
                                for p in doc["problems"]), doc)
            self.assertEqual(gate_status(), 200, "the invalid config was applied")
            self.assertTrue(metric_wait("sluice_config_reloads_total", 1, result="error"))

            # 4: a valid file picked up by the file watcher alone.
            inst.write_config(gate="deny")
            self.assertTrue(wait_gate(403), "file change was not reloaded")

            # 5: back to allow by SIGHUP.
            inst.write_config(gate="allow")
            inst.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_gate(200))
            time.sleep(0.5)
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=30)
            samples = None
            try:
                samples = inst.metrics()
            finally:
                log = inst.log()
                inst.stop()
        self.assertGreater(done[0], 20, "the load loop hardly ran")
        self.assertEqual(failures, [], "requests failed during reloads")
        self.assertEqual(metric(samples, "sluice_config_reloads_total", result="ok"), 4.0)
        self.assertEqual(metric(samples, "sluice_config_reloads_total", result="error"), 1.0)
        self.assertIn("rejected", log)
        self.assertIn("surprise", log)


# ---------------------------------------------------------------- session, metrics, admin


class session_test(unittest.TestCase):
    """One scripted session, then /metrics, the admin API and greps for the secret."""

    @classmethod
    def setUpClass(cls):
        cls.inst = instance("session")
        cls.secret = tp.github_classic_token()
        i, s = cls.inst, cls.secret
        cls.answers = []
        # 3 clean requests (2 TLS, 1 plain), 4 with the secret in different places and
        # encodings, 1 to a port where nothing listens.
        cls.answers.append(i.tls_request("POST", "/clean/1", body=b'{"a": 1}'))
        cls.answers.append(i.tls_request("GET", "/clean/2"))
        cls.answers.append(i.plain_request("GET", "/clean/3"))
        cls.answers.append(i.tls_request("POST", "/leak/body", body=("token=" + s).encode()))
        cls.answers.append(i.tls_request(
            "POST", "/leak/b64", body=json.dumps({"blob": base64.b64encode(
                ("config: " + s + "\n").encode()).decode()}).encode(),
            headers={"Content-Type": "application/json"}))
        cls.answers.append(i.tls_request("GET", "/leak/query?key=" + urllib.parse.quote(s)))
        cls.answers.append(i.plain_request("GET", "/leak/header",
                                           headers={"X-Api-Key": s}))
        cls.answers.append(i.tls_request("GET", "/dead", port=i.dead_port))
        cls.samples = i.metrics()

    @classmethod
    def tearDownClass(cls):
        cls.inst.stop()

    def test_session_answers(self):
        statuses = [a[0] for a in self.answers]
        self.assertEqual(statuses, [200, 200, 200, 403, 403, 403, 403, 502],
                         [a[2][:200] for a in self.answers])

    def test_metrics_show_the_session(self):
        m = self.samples
        self.assertEqual(metric(m, "sluice_requests_total", identity="local", decision="allow"),
                         3.0)
        self.assertEqual(metric(m, "sluice_requests_total", identity="local", decision="deny"),
                         5.0)
        github = sum(v for (name, labels), v in m.items()
                     if name == "sluice_findings_total" and
                     ("rule", "github-pat-classic") in labels)
        self.assertGreaterEqual(github, 4.0)
        self.assertTrue(any(name == "sluice_findings_total" and
                            any(k == "variant" and "base64" in v for k, v in labels)
                            for (name, labels) in m), "no base64 variant finding")
        self.assertEqual(metric(m, "sluice_upstream_errors_total", reason="upstream_connect"),
                         1.0)
        self.assertGreater(metric(m, "sluice_scanned_bytes_total"), 0.0)
        self.assertGreaterEqual(metric(m, "sluice_scan_seconds_count"), 7.0)
        self.assertEqual(metric(m, "sluice_audit_errors_total"), 0.0)
        self.assertEqual(metric(m, "sluice_approvals_pending"), 0.0)
        self.assertIn(("sluice_connections_active", frozenset()), m)
        self.assertIn(("sluice_config_reloads_total", frozenset({("result", "ok")})), m)
        # Bounded labels: no host, port, path or address anywhere in a label value.
        for (name, labels) in m:
            for k, v in labels:
                self.assertNotIn("127.0.0.1", v, name)
                self.assertNotIn("/clean", v, name)
                self.assertNotIn("localhost", v, name)

    def test_admin_health_and_token(self):
        i = self.inst
        self.assertEqual(i.admin("GET", "/healthz")[0], 200)
        self.assertEqual(i.admin("GET", "/readyz")[0], 200)
        for token in (None, "wrong", i.token[:-1], i.token + "0"):
            status, body = i.admin("POST", "/v1/reload", token=token)
            self.assertEqual(status, 401, body)
            self.assertEqual(json.loads(body)["reason"], "unauthorized")
        status, body = i.admin("GET", "/v1/nothing-here", token=i.token)
        self.assertEqual(status, 404)
        self.assertIn("reason", json.loads(body))
        self.assertEqual(i.admin("GET", "/v1/reload", token=i.token)[0], 405)
        self.assertRegex(i.token, r"^[0-9a-f]{64}$")
        mode = os.stat(os.path.join(i.data_dir, "admin.token")).st_mode & 0o777
        self.assertEqual(mode, 0o600)

    def test_no_secret_in_audit_or_log(self):
        s = self.secret
        variants = [s, s[4:], base64.b64encode(s.encode()).decode(),
                    base64.b64encode(("config: " + s + "\n").encode()).decode(),
                    urllib.parse.quote(s)]
        with open(self.inst.audit_path, "rb") as f:
            audit = f.read().decode()
        log = self.inst.log()
        self.assertIn("github-pat-classic", audit)
        for v in variants:
            self.assertNotIn(v, audit)
            self.assertNotIn(v, log)
        # The query value of the flagged request is redacted in the url.
        recs = [json.loads(line) for line in audit.splitlines()]
        q = [r for r in recs if "/leak/query" in r["url"]]
        self.assertEqual(len(q), 1)
        self.assertIn("[redacted]", q[0]["url"])
        self.assertEqual(verify(self.inst.audit_path).returncode, 0)

    def test_log_is_json_lines(self):
        for line in self.inst.log().splitlines():
            doc = json.loads(line)
            self.assertEqual(set(doc), {"ts", "level", "msg"}, line)


# ---------------------------------------------------------------- audit verify CLI


class verify_cli_test(unittest.TestCase):

    def test_verify_names_the_first_bad_record(self):
        d = tempfile.mkdtemp(prefix="sluice-verify-")
        try:
            inst = instance("verify")
            try:
                for k in range(6):
                    inst.plain_request("GET", "/v/%d" % k)
                # The allow record is written just after the response: wait for it.
                end = time.monotonic() + 10
                while len(inst.audit_records()) < 6 and time.monotonic() < end:
                    time.sleep(0.05)
            finally:
                path = inst.audit_path
                copy = os.path.join(d, "audit.jsonl")
                shutil.copy(path, copy)
                inst.stop()
            r = verify(copy)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("12 records", r.stdout)  # each exchange: a start and its end
            with open(copy) as f:
                lines = f.read().splitlines(True)
            # The first record of /v/1 (its start): where it falls among the others depends
            # on when /v/0's end record was written, which is after its response.
            at = next(i for i, line in enumerate(lines) if '/v/1"' in line)
            cases = {
                "changed": lines[:at] + [lines[at].replace("/v/1", "/v/9")] + lines[at + 1:],
                "removed": lines[:3] + lines[4:],
                "reordered": lines[:3] + [lines[4], lines[3]] + lines[5:],
                "truncated": lines[:5] + [lines[5][:40]],
            }
            for what, content in cases.items():
                bad = os.path.join(d, what + ".jsonl")
                with open(bad, "w") as f:
                    f.write("".join(content))
                r = verify(bad)
                self.assertEqual(r.returncode, 1, (what, r.stdout, r.stderr))
                self.assertRegex(r.stderr, re.escape(bad) + r":\d+: seq \d+: " + what, what)
            self.assertEqual(subprocess.run([binary(), "audit", "verify"], capture_output=True,
                                            timeout=30).returncode, 2)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
