#!/usr/bin/env python3
"""End-to-end tests of the operator's admin commands (issue 7): `sluice approvals
list|approve|deny`, `sluice flows`, `sluice kill`, `sluice revive`, run as subprocesses
against real `sluice run` instances on loopback (real curl clients held by supervise rules,
a real TLS origin, real CONNECT tunnels). Standard library only.

Covered: tables and --json; approve (the client gets the origin's answer, the audit record
names who approved) and deny (403 approval_denied); findings shown by fingerprint, never
the secret; flows per identity; kill cuts an open tunnel of one identity and not another,
new requests get 503 killed until revive; a wrong token is exit 3 with a clear message and
changes nothing; an unreadable token file names the file (exit 2); an unreachable admin is
exit 3; two replicas given as a list (merged with a replica column, kill/revive on both,
a dead replica reported after the others were acted on); a DNS name resolving to two
replicas' addresses (a private /etc/hosts in a user+mount namespace via `unshare`).

    SLUICE_BIN=build/sluice python3 tests/e2e/test_admin_cli.py -v
"""

import json
import os
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, secret maker)

START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
CLIENT_TIMEOUT_S = 30.0
WAIT_S = 20.0


def binary():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    return path


def wait_until(predicate, what, deadline_s=WAIT_S):
    """Polls `predicate` (state, not time, is what is waited for) until it returns a
    true value, which is returned; fails the test after the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


class instance:
    """One `sluice run`: listeners for identities alice and bob (one each), a supervise
    rule for /hold/ on the TLS origin, DLP findings supervised, everything else to the
    origins allowed. `admin_host`/`admin_port` place the admin listener."""

    def __init__(self, name, admin_host="127.0.0.1", admin_port=None, token=None):
        self.tmp = tempfile.mkdtemp(prefix="sluice-admin-%s-" % name)
        tp.make_certificates(self.tmp)
        self.origin = tp.recording_origin("tls-" + name, os.path.join(self.tmp, "origin.pem"),
                                          os.path.join(self.tmp, "origin.key"))
        self.plain = tp.recording_origin("plain-" + name)
        self.ports = {"alice": tp.free_port(), "bob": tp.free_port()}
        self.admin_host = admin_host
        self.admin_port = admin_port or tp.free_port()
        self.data_dir = os.path.join(self.tmp, "data")
        self.audit_path = os.path.join(self.tmp, "audit.jsonl")
        self.config = os.path.join(self.tmp, "sluice.yaml")
        if token is not None:
            # Replicas of one deployment share the token (one Secret): sluice reads an
            # existing token file instead of generating one.
            os.makedirs(self.data_dir, mode=0o700)
            fd = os.open(os.path.join(self.data_dir, "admin.token"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (token + "\n").encode())
            os.close(fd)
        listeners = "".join("  - address: 127.0.0.1:%d\n    identity: %s\n" % (p, n)
                            for n, p in self.ports.items())
        policies = "".join(f"""  - identity: {n}
    rules:
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{self.origin.port}]
        path_prefix: /hold/
        action: supervise
      - hosts: ["127.0.0.1", "localhost"]
        ports: [{self.origin.port}, {self.plain.port}]
        action: allow
    dlp:
      detectors: [all]
      on_finding: supervise
    private_destinations: [127.0.0.1/32]
""" for n in self.ports)
        with open(self.config, "w") as f:
            f.write(f"""version: 1
data_dir: {self.data_dir}
listeners:
{listeners}ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(self.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: alice
  - name: bob
policies:
{policies}supervise: {{timeout: 60s}}
admin: {{address: "{admin_host}:{self.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{tp.free_port()}"}}
audit: {{path: {self.audit_path}, fsync: always}}
""")
        self.log = open(os.path.join(self.tmp, "sluice.log"), "wb")
        self.proc = subprocess.Popen([binary(), "run", "--config", self.config],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=tp.client_env())
        ok = all(tp.wait_for_port(p, self.proc, START_TIMEOUT_S) for p in self.ports.values())
        if ok:
            ok = self.wait_admin()
        if not ok:
            self.stop()
            raise RuntimeError("sluice %s did not start:\n%s" % (name, self.log_text()[-3000:]))
        self.sluice_ca = os.path.join(self.data_dir, "ca.pem")
        self.token_file = os.path.join(self.data_dir, "admin.token")
        with open(self.token_file) as f:
            self.token = f.read().strip()
        self.url = "http://%s:%d" % (admin_host, self.admin_port)

    def wait_admin(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection((self.admin_host, self.admin_port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def log_text(self):
        try:
            with open(os.path.join(self.tmp, "sluice.log"), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        tp.stop_run(self.proc, (self.origin, self.plain), (self.log,), self.tmp)

    # -- clients

    def curl_https(self, identity, path, data=None):
        """A curl through `identity`'s listener to the TLS origin, started in the
        background. Returns the Popen; its stdout is the body, the last line the status."""
        cmd = ["curl", "-sS", "--max-time", "60", "--proxy",
               "http://127.0.0.1:%d" % self.ports[identity], "--cacert", self.sluice_ca,
               "-w", "\n%{http_code}", "https://localhost:%d%s" % (self.origin.port, path)]
        if data is not None:
            cmd += ["--data-binary", data]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=tp.client_env())

    def plain_get(self, identity, path):
        """An absolute-form GET to the plain origin through `identity`'s listener:
        (status, body)."""
        r = subprocess.run(["curl", "-sS", "--max-time", "20", "--proxy",
                            "http://127.0.0.1:%d" % self.ports[identity], "-w", "\n%{http_code}",
                            "http://127.0.0.1:%d%s" % (self.plain.port, path)],
                           capture_output=True, timeout=CLIENT_TIMEOUT_S, env=tp.client_env())
        body, _, code = r.stdout.decode(errors="replace").rpartition("\n")
        return int(code or 0), body

    def open_tunnel(self, identity):
        """A CONNECT tunnel through `identity`'s listener to the TLS origin, TLS set up
        through it and left open (a live flow). Returns the TLS socket."""
        s = socket.create_connection(("127.0.0.1", self.ports[identity]), timeout=CLIENT_TIMEOUT_S)
        target = "localhost:%d" % self.origin.port
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise AssertionError("tunnel closed during CONNECT: %r" % head)
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            raise AssertionError("CONNECT refused: %r" % head)
        ctx = ssl.create_default_context(cafile=self.sluice_ca)
        return ctx.wrap_socket(s, server_hostname="localhost")


def finish(proc):
    """Waits for a background curl: (status, body)."""
    out, err = proc.communicate(timeout=CLIENT_TIMEOUT_S + 60)
    body, _, code = out.decode(errors="replace").rpartition("\n")
    return int(code or 0), body, err.decode(errors="replace")


def cli(*args, token_file=None, env_token=None, admin=None, check=None):
    """Runs `sluice <args>`: CompletedProcess with text stdout/stderr."""
    cmd = [binary(), *args]
    if admin is not None:
        for a in admin if isinstance(admin, (list, tuple)) else [admin]:
            cmd += ["--admin", a]
    if token_file is not None:
        cmd += ["--token-file", token_file]
    env = tp.client_env()
    env.pop("SLUICE_ADMIN_TOKEN", None)
    env.pop("SLUICE_ADMIN_URL", None)
    env["XDG_DATA_HOME"] = "/nonexistent-sluice-test"  # no fallback token from the user's dir
    if env_token is not None:
        env["SLUICE_ADMIN_TOKEN"] = env_token
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, env=env)
    if check is not None and r.returncode != check:
        raise AssertionError("%s: exit %d (wanted %d)\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(args), r.returncode, check, r.stdout, r.stderr))
    return r


class A:
    a = None  # the main instance
    b = None  # a second replica


def setUpModule():
    binary()
    A.a = instance("a")


def tearDownModule():
    for i in (A.a, A.b):
        if i is not None:
            i.stop()


def read_audit(inst):
    try:
        with open(inst.audit_path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        return [r for r in recs if r.get("event") != "start"]  # completions: one per exchange
    except OSError:
        return []


class admin_cli_test(unittest.TestCase):

    def run_a(self, *args, check=0):
        return cli(*args, admin=A.a.url, token_file=A.a.token_file, check=check)

    def pending(self, inst=None, marker=None):
        inst = inst or A.a
        r = cli("approvals", "list", "--json", admin=inst.url, token_file=inst.token_file,
                check=0)
        items = json.loads(r.stdout)["approvals"]
        return [a for a in items if marker is None or marker in a["url"]]

    def wait_pending(self, marker, inst=None):
        return wait_until(lambda: self.pending(inst, marker), "an approval for " + marker)[0]

    # ------------------------------------------------------------ approvals

    def test_approve_list_table_and_json(self):
        marker = "/hold/approve-%d" % time.monotonic_ns()
        client = A.a.curl_https("alice", marker)
        entry = self.wait_pending(marker)
        self.assertEqual(entry["identity"], "alice")
        self.assertEqual(entry["method"], "GET")
        self.assertEqual(entry["replica"], "127.0.0.1:%d" % A.a.admin_port)
        self.assertIn(marker, entry["url"])
        for key in ("id", "flow", "source", "reason", "findings", "created", "age_ms",
                    "expires_in_ms"):
            self.assertIn(key, entry)
        self.assertEqual(A.a.origin.requests_for(marker), [])  # held: not sent yet

        table = self.run_a("approvals", "list").stdout
        header = table.splitlines()[0].split()
        self.assertEqual(header[:3], ["ID", "IDENTITY", "SOURCE"])
        self.assertNotIn("REPLICA", header)  # one replica: no replica column
        row = [l for l in table.splitlines() if entry["id"] in l]
        self.assertEqual(len(row), 1, table)
        self.assertIn("alice", row[0])
        self.assertIn("GET https://localhost", row[0])

        r = self.run_a("approvals", "approve", entry["id"], "--by", "tester",
                       "--reason", "looks fine")
        self.assertEqual(r.stdout.strip(), "approved %s by tester" % entry["id"])
        status, body, err = finish(client)
        self.assertEqual(status, 200, err)
        self.assertEqual(json.loads(body)["origin"], "tls-a")
        self.assertEqual(len(A.a.origin.requests_for(marker)), 1)
        self.assertEqual(self.pending(marker=marker), [])
        rec = wait_until(lambda: [x for x in read_audit(A.a) if marker in x.get("url", "")],
                         "the audit record")[0]
        self.assertEqual(rec["decision"], "supervise_approved")
        self.assertEqual(rec["approval"]["id"], entry["id"])
        self.assertEqual(rec["approval"]["by"], "tester")

        # Deciding it again: no such pending approval (input error, exit 2).
        r = self.run_a("approvals", "approve", entry["id"], check=2)
        self.assertIn("no pending approval " + entry["id"], r.stderr)

    def test_deny_json(self):
        marker = "/hold/deny-%d" % time.monotonic_ns()
        client = A.a.curl_https("bob", marker)
        entry = self.wait_pending(marker)
        self.assertEqual(entry["identity"], "bob")
        r = self.run_a("approvals", "deny", entry["id"], "--json", "--reason", "no")
        out = json.loads(r.stdout)
        self.assertEqual(out["id"], entry["id"])
        self.assertEqual(out["decision"], "denied")
        self.assertTrue(out["by"])  # USER@HOST by default
        self.assertEqual(out["replicas"][0]["ok"], True)
        status, body, err = finish(client)
        self.assertEqual(status, 403, err)
        self.assertEqual(json.loads(body)["reason"], "approval_denied")
        self.assertEqual(A.a.origin.requests_for(marker), [])

    def test_findings_by_fingerprint_never_the_secret(self):
        secret = tp.github_classic_token()
        marker = "/data/finding-%d" % time.monotonic_ns()
        client = A.a.curl_https("alice", marker, data="token=" + secret)
        entry = self.wait_pending(marker)
        self.assertTrue(entry["findings"], entry)
        f = entry["findings"][0]
        self.assertRegex(f["fingerprint"], r"^sha256:[0-9a-f]{16}$")
        table = self.run_a("approvals", "list").stdout
        self.assertIn(f["fingerprint"], table)
        self.assertIn("finding " + f["rule"] + " in " + f["location"], table)
        self.assertNotIn(secret, table)
        as_json = self.run_a("approvals", "list", "--json").stdout
        self.assertNotIn(secret, as_json)
        self.run_a("approvals", "deny", entry["id"])
        status, body, _ = finish(client)
        self.assertEqual(status, 403)
        self.assertEqual(A.a.origin.requests_for(marker), [])

    def test_unknown_id_and_usage(self):
        r = self.run_a("approvals", "approve", "ap-00000000-000000", check=2)
        self.assertIn("no pending approval", r.stderr)
        self.assertIn("approval id", self.run_a("approvals", "deny", "../kill", check=2).stderr)
        self.run_a("approvals", "frobnicate", check=2)
        self.run_a("approvals", "approve", check=2)
        self.run_a("kill", check=2)
        self.run_a("kill", "alice", "--all", check=2)
        self.run_a("revive", "--bogus", check=2)
        r = cli("flows", admin="https://127.0.0.1:1", token_file=A.a.token_file, check=2)
        self.assertIn("plain http://", r.stderr)
        self.assertIn("usage:", cli("flows", "--help", check=0).stdout)

    def test_timeout_option(self):
        # Durations as in the configuration (config::parse_duration), a bare number being
        # seconds; above 0 and at most one hour.
        for good in ("5", "10s", "60m", "1h", "30000ms"):
            self.run_a("flows", "--json", "--timeout", good, check=0)
        for bad in ("0", "0s", "61m", "2h", "3600001ms", "10x", "s", "-1", "1.5s"):
            r = self.run_a("flows", "--timeout=" + bad, check=2)
            self.assertIn("--timeout '%s'" % bad, r.stderr)

    # ------------------------------------------------------------ tokens, reachability

    def test_wrong_token_changes_nothing(self):
        wrong = os.path.join(A.a.tmp, "wrong.token")
        with open(wrong, "w") as f:
            f.write("0" * 64 + "\n")
        for args in (("flows",), ("approvals", "list"), ("kill", "alice")):
            r = cli(*args, admin=A.a.url, token_file=wrong, check=3)
            self.assertIn("refused the token", r.stderr)
            self.assertIn("401", r.stderr)
            self.assertNotIn("0" * 64, r.stdout + r.stderr)
        # The same through the environment.
        r = cli("kill", "--all", admin=A.a.url, env_token="nope", check=3)
        self.assertIn("refused the token", r.stderr)
        # Nothing was killed.
        self.assertEqual(A.a.plain_get("alice", "/still-alive")[0], 200)
        flows = json.loads(self.run_a("flows", "--json").stdout)
        self.assertEqual(flows["replicas"][0]["killed"], {"all": False, "identities": []})
        # The right token from the environment works and is never printed.
        r = cli("flows", admin=A.a.url, env_token=A.a.token, check=0)
        self.assertNotIn(A.a.token, r.stdout + r.stderr)

    def test_token_file_problems(self):
        missing = os.path.join(A.a.tmp, "no-such.token")
        r = cli("flows", admin=A.a.url, token_file=missing, check=2)
        self.assertIn(missing, r.stderr)
        empty = os.path.join(A.a.tmp, "empty.token")
        open(empty, "w").close()
        r = cli("flows", admin=A.a.url, token_file=empty, check=2)
        self.assertIn(empty, r.stderr)
        r = cli("flows", admin=A.a.url, check=2)  # no token anywhere
        self.assertIn("--token-file", r.stderr)

    def test_unreachable_admin(self):
        dead = "http://127.0.0.1:%d" % tp.free_port()
        r = cli("flows", admin=dead, token_file=A.a.token_file, check=3)
        self.assertIn("unreachable", r.stderr)
        self.assertIn("127.0.0.1:", r.stderr)

    # ------------------------------------------------------------ flows, kill, revive

    def test_flows_kill_revive(self):
        alice = A.a.open_tunnel("alice")
        bob = A.a.open_tunnel("bob")
        try:
            def kinds():
                fl = json.loads(self.run_a("flows", "--json").stdout)["flows"]
                got = {(f["identity"], f["kind"]) for f in fl}
                return got if {("alice", "tunnel"), ("bob", "tunnel")} <= got else None
            wait_until(kinds, "both tunnels in `sluice flows`")
            table = self.run_a("flows").stdout
            lines = table.splitlines()
            self.assertEqual(lines[0].split()[:3], ["IDENTITY", "KIND", "FLOW"])
            self.assertTrue(any(l.split()[:2] == ["bob", "tunnel"] for l in lines), table)
            self.assertIn("kill switch: off", table)

            r = self.run_a("kill", "bob")
            self.assertIn("killed bob", r.stdout)
            self.assertRegex(r.stdout, r"\d+ flows? closed")
            # bob's tunnel is closed by sluice, alice's stays usable.
            bob.settimeout(10)
            try:
                self.assertEqual(bob.recv(1), b"")
            except (ssl.SSLError, ConnectionResetError):
                pass  # closed without close_notify: also closed
            alice.sendall(b"GET /alive HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n\r\n"
                          % A.a.origin.port)
            alice.settimeout(10)
            got = b""
            while len(got) < 12:
                chunk = alice.recv(12 - len(got))
                if not chunk:
                    break
                got += chunk
            self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)

            status, body = A.a.plain_get("bob", "/after-kill")
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["reason"], "killed")
            self.assertEqual(A.a.plain_get("alice", "/after-kill")[0], 200)
            table = self.run_a("flows").stdout
            self.assertIn("kill switch: on for bob", table)
            out = json.loads(self.run_a("flows", "--json").stdout)
            self.assertEqual(out["replicas"][0]["killed"]["identities"], ["bob"])

            r = self.run_a("revive", "bob", "--json")
            self.assertEqual(json.loads(r.stdout)["revived"], "bob")
            self.assertEqual(A.a.plain_get("bob", "/after-revive")[0], 200)
        finally:
            for s in (alice, bob):
                try:
                    s.close()
                except OSError:
                    pass

    # ------------------------------------------------------------ several replicas

    def second(self):
        if A.b is None:
            A.b = instance("b", token=A.a.token)
        return A.b

    def test_two_replicas(self):
        b = self.second()
        shared = A.a.token_file  # both replicas hold this token
        both = [A.a.url, b.url]  # --admin given twice

        ta = A.a.open_tunnel("alice")
        tb = b.open_tunnel("bob")
        try:
            def merged():
                fl = json.loads(cli("flows", "--json", admin=both, token_file=shared,
                                    check=0).stdout)["flows"]
                got = {(f["replica"], f["identity"]) for f in fl}
                want = {("127.0.0.1:%d" % A.a.admin_port, "alice"),
                        ("127.0.0.1:%d" % b.admin_port, "bob")}
                return want <= got
            wait_until(merged, "flows of both replicas")
            table = cli("flows", admin=both, token_file=shared, check=0).stdout
            self.assertEqual(table.splitlines()[0].split()[:2], ["REPLICA", "IDENTITY"])
            self.assertTrue(any(l.split()[:2] == ["127.0.0.1:%d" % b.admin_port, "bob"]
                                for l in table.splitlines()), table)

            r = cli("kill", "--all", admin=[A.a.url + "," + b.url], token_file=shared, check=0)
            for inst in (A.a, b):
                self.assertRegex(r.stdout, r"127\.0\.0\.1:%d\s+killed all" % inst.admin_port)
                self.assertEqual(inst.plain_get("alice", "/all-killed")[0], 503)
            r = cli("revive", "--all", "--json", admin=both, token_file=shared, check=0)
            out = json.loads(r.stdout)
            self.assertEqual(len(out["replicas"]), 2)
            self.assertTrue(all(x["ok"] for x in out["replicas"]))
            for inst in (A.a, b):
                self.assertEqual(inst.plain_get("alice", "/revived")[0], 200)

            # A dead replica: the live ones are still acted on, then exit 3.
            dead = "http://127.0.0.1:%d" % tp.free_port()
            r = cli("kill", "alice", admin=[A.a.url, dead], token_file=shared, check=3)
            self.assertRegex(r.stdout, r"127\.0\.0\.1:%d\s+killed alice" % A.a.admin_port)
            self.assertIn("FAILED", r.stdout)
            self.assertIn("1 of 2 replica(s) failed", r.stderr)
            self.assertEqual(A.a.plain_get("alice", "/killed-anyway")[0], 503)
            cli("revive", "alice", admin=A.a.url, token_file=shared, check=0)
            self.assertEqual(A.a.plain_get("alice", "/back")[0], 200)
        finally:
            for s in (ta, tb):
                s.close()

    def test_dns_name_with_two_addresses(self):
        """A headless Service: one name, one A record per replica. Here: a private
        /etc/hosts (user + mount namespace) maps one name to 127.0.0.1 and 127.0.0.2,
        where two replicas' admin listeners share a port."""
        if shutil.which("unshare") is None:
            self.skipTest("unshare (util-linux) is not installed")
        probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
        if probe.returncode != 0:
            self.skipTest("user namespaces are not available here: %s" % probe.stderr.decode())
        port = A.a.admin_port
        try:
            c = instance("c", admin_host="127.0.0.2", admin_port=port, token=A.a.token)
        except RuntimeError as e:
            self.skipTest("cannot bind 127.0.0.2:%d: %s" % (port, e))
        try:
            hosts = os.path.join(A.a.tmp, "hosts")
            with open(hosts, "w") as f:
                f.write("127.0.0.1 localhost\n127.0.0.1 sluice-admin.test\n"
                        "127.0.0.2 sluice-admin.test\n")
            shared = A.a.token_file
            marker = "/hold/dns-%d" % time.monotonic_ns()
            client = c.curl_https("alice", marker)
            self.wait_pending(marker, inst=c)

            def via_name(*args, check=0):
                cmd = ["unshare", "-rm", "sh", "-c",
                       'mount --bind "$0" /etc/hosts && exec "$@"', hosts, binary(), *args,
                       "--admin", "http://sluice-admin.test:%d" % port, "--token-file", shared]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                                   env=dict(tp.client_env(), XDG_DATA_HOME="/nonexistent"))
                self.assertEqual(r.returncode, check, r.stderr)
                return r

            out = json.loads(via_name("approvals", "list", "--json").stdout)
            self.assertEqual(sorted(x["replica"] for x in out["replicas"]),
                             ["127.0.0.1:%d" % port, "127.0.0.2:%d" % port])
            held = [x for x in out["approvals"] if marker in x["url"]]
            self.assertEqual(len(held), 1)
            self.assertEqual(held[0]["replica"], "127.0.0.2:%d" % port)
            # Approve by id through the name: the replica holding it decides, the other
            # says unknown_approval, the command succeeds.
            r = via_name("approvals", "approve", held[0]["id"], "--by", "dns")
            self.assertIn("approved %s by dns on 127.0.0.2:%d" % (held[0]["id"], port), r.stdout)
            status, body, err = finish(client)
            self.assertEqual(status, 200, err)
            r = via_name("kill", "bob")
            self.assertEqual(len(r.stdout.strip().splitlines()), 3, r.stdout)  # header + 2
            self.assertEqual(A.a.plain_get("bob", "/dns-kill")[0], 503)
            self.assertEqual(c.plain_get("bob", "/dns-kill")[0], 503)
            via_name("revive", "bob")
            self.assertEqual(A.a.plain_get("bob", "/dns-revive")[0], 200)
            self.assertEqual(c.plain_get("bob", "/dns-revive")[0], 200)
        finally:
            c.stop()


if __name__ == "__main__":
    unittest.main()
