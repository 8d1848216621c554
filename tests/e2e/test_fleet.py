#!/usr/bin/env python3
"""End-to-end tests for issue 22 (fleet mode): replicas of `sluice run` share the kill
switch through a real `redis-server` started by the test on loopback.

- A kill on replica A closes a live flow of that identity on replica C, and every new
  request of it is refused on every replica; a replica started after the kill refuses it
  from its first request; a revive on B lifts it everywhere.
- The store stopped: the last state read stays in force (last_known), a revive is refused
  with 503 control_store_unavailable, a kill still applies at once; the store restarted
  empty (its data lost) gets the replicas' kills written back.
- on_unavailable: fail_closed refuses every new flow while the store cannot be read.
- rediss:// with a password, verified against the test CA; a wrong password is reported
  without the password.

Identities by source address (127.0.0.2 alpha, 127.0.0.3 beta). Reuses
tests/e2e/test_proxy.py's helpers (certificates, recording origin, process handling).

Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_fleet.py -v
"""

import http.client
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
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)
from test_supervise import WAIT_S, closed_by_peer, poll  # noqa: E402  (bounded waits)

SRC = {"alpha": "127.0.0.2", "beta": "127.0.0.3", "lim": "127.0.0.4", "con": "127.0.0.5"}
RATE = 300  # lim's requests_per_minute, for the whole fleet
PASSWORD = "fleet-pw-" + os.urandom(8).hex()  # must never reach a log line
# A replica that finds an empty store waits for the replicas that may hold kills before
# it serves: their longest backoff (5 s) + connect_timeout (1 s here) + a heartbeat.
SETTLE_S = 7.0


class st:
    tmp = None
    origin = None
    redis = []      # every redis_server started
    replicas = []   # every replica started


class redis_server:
    """A throwaway redis-server on loopback (no persistence: a restart loses the data,
    as a flushed or replaced store does)."""

    def __init__(self, name, tls=False):
        self.name, self.tls, self.port = name, tls, tp.free_port()
        self.dir = os.path.join(st.tmp, "redis-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        st.redis.append(self)

    def start(self):
        args = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--requirepass", PASSWORD, "--logfile",
                os.path.join(self.dir, "redis.log")]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", os.path.join(st.tmp, "origin.pem"),
                     "--tls-key-file", os.path.join(st.tmp, "origin.key"),
                     "--tls-ca-cert-file", os.path.join(st.tmp, "test-ca.pem"),
                     "--tls-auth-clients", "no"]
        else:
            args += ["--port", str(self.port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        if not tp.wait_for_port(self.port, self.proc, tp.START_TIMEOUT_S):
            raise RuntimeError("redis-server did not start (exit %s)" % self.proc.poll())

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def cli(self, *args):
        """One redis-cli command against this server (the test's own hand on the store)."""
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "--no-auth-warning",
                            "-a", PASSWORD, *args], capture_output=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode()

    def url(self, password=PASSWORD):
        scheme = "rediss" if self.tls else "redis"
        return "%s://:%s@%s:%d/0" % (scheme, password, "localhost" if self.tls else "127.0.0.1",
                                     self.port)


class relay:
    """A TCP relay on loopback in front of a store: cut() severs one replica from it (a
    network partition) while the others keep it; reopen() heals it on the same port."""

    def __init__(self, target_port):
        self.port, self.target = tp.free_port(), target_port
        self.lsock, self.socks, self.lock = None, [], threading.Lock()
        self.reopen()

    def reopen(self):
        self.lsock = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        threading.Thread(target=self._accept, args=(self.lsock,), daemon=True).start()

    def _accept(self, lsock):
        while True:
            try:
                c, _ = lsock.accept()
                u = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                return
            u.settimeout(None)
            with self.lock:
                self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.lsock.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()


class replica:
    """One `sluice run` sharing `store`; the CA is shared so one client trust store
    serves the fleet."""

    def __init__(self, name, store_url, on_unavailable="last_known", tls_ca=False):
        self.name = name
        self.proxy_port, self.admin_port = tp.free_port(), tp.free_port()
        self.metrics_port = tp.free_port()
        self.dir = os.path.join(st.tmp, "replica-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.config = os.path.join(self.dir, "sluice.yaml")
        tls = ("\n    tls: {ca_file: %s}" % os.path.join(st.tmp, "test-ca.pem")) if tls_ca else ""
        with open(self.config, "w") as f:
            f.write(f"""version: 1
data_dir: {self.dir}
listeners:
  - address: 127.0.0.1:{self.proxy_port}
ca: {{cert: {st.tmp}/fleet-ca.pem, key: {st.tmp}/fleet-ca.key}}
upstream:
  ca_file: {os.path.join(st.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: alpha
    source_cidrs: [127.0.0.2/32]
  - name: beta
    source_cidrs: [127.0.0.3/32]
  - name: lim
    source_cidrs: [127.0.0.4/32]
  - name: con
    source_cidrs: [127.0.0.5/32]
policies:
  - identity: lim
    rules: [{{hosts: ["localhost"], ports: [{st.origin.port}], action: allow}}]
    limits: {{requests_per_minute: {RATE}}}
    private_destinations: [127.0.0.1/32]
  - identity: con
    rules: [{{hosts: ["localhost"], ports: [{st.origin.port}], action: allow}}]
    limits: {{max_connections: 2}}
    private_destinations: [127.0.0.1/32]
  - identity: "*"
    rules:
      - hosts: ["localhost"]
        ports: [{st.origin.port}]
        path_prefix: /held/
        action: supervise
      - hosts: ["localhost"]
        ports: [{st.origin.port}]
        action: allow
    private_destinations: [127.0.0.1/32]
admin: {{address: "127.0.0.1:{self.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{self.metrics_port}"}}
audit: {{path: {self.dir}/audit.jsonl, fsync: 1s}}
logging: {{level: info, format: json}}
control_store:
  redis:
    url: "${{FLEET_STORE_URL}}"
    key_prefix: "e2e:"{tls}
  on_unavailable: {on_unavailable}
  connect_timeout: 1s
""")
        self.env = tp.client_env(FLEET_STORE_URL=store_url)
        self.stderr = open(os.path.join(self.dir, "sluice.stderr"), "ab")
        self.proc = None
        self.token = None
        st.replicas.append(self)

    def start(self, ready=True):
        """Starts it; with `ready`, waits until /readyz says 200 (a replica that finds an
        empty store first waits for the fleet's kill switch state, README)."""
        self.proc = subprocess.Popen([tp.sluice_binary(), "run", "--config", self.config],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     stdin=subprocess.DEVNULL, env=self.env)
        for port in (self.proxy_port, self.admin_port):
            if not tp.wait_for_port(port, self.proc, tp.START_TIMEOUT_S):
                raise RuntimeError("replica %s did not start (exit %s); stderr:\n%s"
                                   % (self.name, self.proc.poll(), self.stderr_text()[-4000:]))
        with open(os.path.join(self.dir, "admin.token")) as f:
            self.token = f.read().strip()
        if ready:
            poll(lambda: self.admin("GET", "/readyz")[0] == 200,
                 "replica %s to be ready" % self.name, timeout=SETTLE_S + WAIT_S)
        return self

    def stop(self):
        tp.stop_run(self.proc, (), (self.stderr,), None)
        self.proc = None

    def stderr_text(self):
        with open(os.path.join(self.dir, "sluice.stderr"), "rb") as f:
            return f.read().decode(errors="replace")

    def admin(self, method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.admin_port, path),
                                     method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Authorization", "Bearer " + self.token)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def killed(self):
        status, doc = self.admin("GET", "/v1/flows")
        assert status == 200, doc
        return doc["killed"]

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def tunnel(self, who):
        """An intercepted CONNECT from `who`, TLS to sluice's leaf; (socket, CONNECT status,
        CONNECT answer's JSON reason or None)."""
        s = socket.create_connection(("127.0.0.1", self.proxy_port), timeout=10,
                                     source_address=(SRC[who], 0))
        port = st.origin.port
        s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (port, port))
        r = http.client.HTTPResponse(s, method="CONNECT")
        r.begin()
        if r.status != 200:
            body = r.read()
            s.close()
            return None, r.status, json.loads(body).get("reason")
        ctx = ssl.create_default_context(cafile=os.path.join(st.tmp, "fleet-ca.pem"))
        return ctx.wrap_socket(s, server_hostname="localhost"), 200, None

    def get(self, who):
        """(status, reason) of one GET from `who` through this replica."""
        t, status, reason = self.tunnel(who)
        if t is None:
            return status, reason
        try:
            return exchange(t)
        finally:
            t.close()


def exchange(t, path="/fleet/"):
    mark = tp.marker()
    t.sendall(("GET %s%s HTTP/1.1\r\nHost: localhost:%d\r\n\r\n"
               % (path, mark, st.origin.port)).encode())
    r = http.client.HTTPResponse(t, method="GET")
    r.begin()
    body = r.read()
    if r.status == 200:
        assert st.origin.requests_for(mark), "a 200 that the origin never saw"
        return 200, None
    return r.status, json.loads(body).get("reason")


def setUpModule():
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is missing: run deploy/install-deps.sh")
    st.tmp = tempfile.mkdtemp(prefix="sluice-e2e-fleet-")
    tp.make_certificates(st.tmp)
    st.origin = tp.recording_origin("fleet", os.path.join(st.tmp, "origin.pem"),
                                    os.path.join(st.tmp, "origin.key"))


def tearDownModule():
    try:
        for r in st.replicas:
            if r.proc is not None:
                r.stop()
        for s in st.redis:
            s.stop()
        # No password in any replica's output, ever (the URL carries it).
        for r in st.replicas:
            if PASSWORD in r.stderr_text():
                raise AssertionError("the store password is in replica %s's log" % r.name)
    finally:
        tp.stop_run(None, (st.origin,), (), st.tmp)


class fleet_test(unittest.TestCase):
    """Three replicas on one plain redis:// store with a password."""

    @classmethod
    def setUpClass(cls):
        cls.store = redis_server("plain")
        cls.store.start()
        url = cls.store.url()
        cls.a = replica("a", url).start()  # first alone: it makes the shared CA
        cls.b, cls.c = replica("b", url).start(), replica("c", url).start()

    @classmethod
    def tearDownClass(cls):
        for r in (cls.a, cls.b, cls.c):
            r.stop()
        cls.store.stop()

    def everyone_sees(self, killed, replicas):
        for r in replicas:
            poll(lambda: r.killed() == killed, "replica %s to see %s" % (r.name, killed))

    def test_1_kill_on_a_closes_a_live_flow_on_c_and_reaches_a_new_replica(self):
        a, b, c = self.a, self.b, self.c
        self.assertEqual(a.metric("sluice_control_store_up"), 1.0)
        live, status, _ = c.tunnel("alpha")
        self.assertEqual(status, 200)
        self.assertEqual(exchange(live), (200, None))
        beta, _, _ = c.tunnel("beta")
        self.assertEqual(exchange(beta), (200, None))

        status, doc = a.admin("POST", "/v1/kill", {"identity": "alpha"})
        t0 = time.monotonic()
        self.assertEqual((status, doc["killed"], doc["store"]), (200, "alpha", "shared"), doc)
        self.assertTrue(closed_by_peer(live), "alpha's live flow on replica c")
        cut_ms = (time.monotonic() - t0) * 1000
        print("\nkill on a -> alpha's flow on c closed %.1f ms after a answered" % cut_ms)
        # The message, not the once-a-second read: well under the heartbeat period.
        self.assertLess(cut_ms, 250.0)
        # beta's flow on c lives on; alpha is refused on every replica.
        self.assertEqual(exchange(beta), (200, None))
        for r in (a, b, c):
            self.assertEqual(r.get("alpha"), (503, "killed"), r.name)
        self.assertEqual(b.get("beta"), (200, None))

        # A replica started after the kill refuses alpha from its first request.
        d = replica("d", self.store.url()).start()
        try:
            self.assertEqual(d.get("alpha"), (503, "killed"))
            self.assertEqual(d.killed(), {"all": False, "identities": ["alpha"]})
            # Revive on b lifts it everywhere, d included.
            status, doc = b.admin("POST", "/v1/revive", {"identity": "alpha"})
            self.assertEqual((status, doc["revived"]), (200, "alpha"), doc)
            self.everyone_sees({"all": False, "identities": []}, (a, b, c, d))
            for r in (a, b, c, d):
                self.assertEqual(r.get("alpha"), (200, None), r.name)
        finally:
            d.stop()
        beta.close()

    def test_2_kill_all_then_revive_all_across_the_fleet(self):
        status, doc = self.c.admin("POST", "/v1/kill", {"all": True})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        self.everyone_sees({"all": True, "identities": []}, (self.a, self.b, self.c))
        self.assertEqual(self.a.get("beta"), (503, "killed"))
        status, doc = self.b.admin("POST", "/v1/revive", {"all": True})
        self.assertEqual(status, 200, doc)
        self.everyone_sees({"all": False, "identities": []}, (self.a, self.b, self.c))
        self.assertEqual(self.a.get("beta"), (200, None))

    def test_3_store_outage_keeps_kills_refuses_revive_and_restores_them(self):
        a, b, c = self.a, self.b, self.c
        status, doc = a.admin("POST", "/v1/kill", {"identity": "beta"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        self.everyone_sees({"all": False, "identities": ["beta"]}, (a, b, c))

        self.store.stop()  # SIGKILL: with no persistence its data is gone
        for r in (a, b, c):
            poll(lambda: r.metric("sluice_control_store_up") == 0.0,
                 "replica %s to notice the store is down" % r.name)
        status, doc = a.admin("GET", "/readyz")
        self.assertEqual((status, doc.get("control_store")), (200, "unavailable"), doc)
        self.assertGreaterEqual(a.metric("sluice_control_store_errors_total"), 1.0)
        # last_known: the kill stays in force; nothing is revived; a kill still applies.
        self.assertEqual(c.get("beta"), (503, "killed"))
        status, doc = b.admin("POST", "/v1/revive", {"identity": "beta"})
        self.assertEqual((status, doc.get("error"), doc.get("reason")),
                         (503, "service_unavailable", "control_store_unavailable"), doc)
        self.assertEqual(b.get("beta"), (503, "killed"))
        status, doc = c.admin("POST", "/v1/kill", {"identity": "alpha"})
        self.assertEqual((status, doc["store"]), (200, "pending"), doc)
        self.assertEqual(c.get("alpha"), (503, "killed"))
        self.assertEqual(a.get("alpha"), (200, None))  # a cannot know yet

        # Back, empty: beta is written back by every replica, alpha by c.
        self.store.start()
        both = {"all": False, "identities": ["alpha", "beta"]}
        self.everyone_sees(both, (a, b, c))
        for r in (a, b, c):
            poll(lambda: r.metric("sluice_control_store_up") == 1.0, "the store to be up")
        self.assertEqual(a.get("alpha"), (503, "killed"))
        for who in ("alpha", "beta"):
            status, doc = a.admin("POST", "/v1/revive", {"identity": who})
            self.assertEqual(status, 200, doc)
        self.everyone_sees({"all": False, "identities": []}, (a, b, c))
        self.assertEqual(c.get("beta"), (200, None))


    def see_replicas(self, n, replicas):
        for r in replicas:
            poll(lambda: r.metric("sluice_control_store_replicas") == n,
                 "replica %s to count %d live replicas" % (r.name, n))

    def test_4_a_rate_limit_holds_across_the_fleet(self):
        replicas = (self.a, self.b, self.c)
        self.see_replicas(3, replicas)
        tunnels = [r.tunnel("lim")[0] for r in replicas]
        admitted, refused, attempts = 0, 0, int(RATE * 1.5)
        t0 = time.monotonic()
        for i in range(attempts):  # spread evenly, as a load balancer would
            status, reason = exchange(tunnels[i % 3])
            if status == 200:
                admitted += 1
            else:
                self.assertEqual((status, reason), (429, "rate_limit"))
                refused += 1
        elapsed = time.monotonic() - t0
        for t in tunnels:
            t.close()
        # Each replica starts with RATE/3 and refills RATE/3 per minute: the fleet admits
        # RATE plus what refilled while the test ran (and one token of rounding each).
        refill = RATE / 60.0 * elapsed
        print("\n%d of %d admitted across 3 replicas in %.2f s (limit %d/min, refill %.1f)"
              % (admitted, attempts, elapsed, RATE, refill))
        self.assertGreaterEqual(admitted, RATE)
        self.assertLessEqual(admitted, RATE + refill + 3)

    def test_5_connections_count_fleet_wide_and_a_crashed_replicas_expire(self):
        a, b, c = self.a, self.b, self.c
        self.see_replicas(3, (a, b, c))
        first, status, _ = a.tunnel("con")
        self.assertEqual(status, 200)
        k = replica("k", self.store.url()).start()
        held, status, _ = k.tunnel("con")
        self.assertEqual(status, 200)

        def refused_on(r):
            t, status, reason = r.tunnel("con")
            if t is not None:  # the others' count is read once a second: not yet
                t.close()
                return False
            self.assertEqual((status, reason), (429, "connection_limit"))
            return True
        poll(lambda: refused_on(c), "c to count a's and k's connections")
        # k dies holding its connection: its count expires with it (3 missed heartbeats).
        k.proc.send_signal(signal.SIGKILL)
        k.proc.wait(timeout=10)
        held.close()

        def admitted_on(r):
            t, status, _ = r.tunnel("con")
            if t is None:
                return False
            t.close()
            return True
        poll(lambda: admitted_on(c), "k's connection to expire")
        first.close()
        k.stop()


    def held_through(self, r, who):
        """A GET of /held/<mark> from `who` through `r`, in a thread; returns (thread,
        result list that gets (status, reason))."""
        out = []
        t, status, _ = r.tunnel(who)
        self.assertEqual(status, 200)

        def run():
            try:
                out.append(exchange(t, "/held/"))
            finally:
                t.close()
        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th, out

    def listed_on(self, r, replica_field=True):
        status, doc = r.admin("GET", "/v1/approvals")
        self.assertEqual(status, 200, doc)
        return [a for a in doc["approvals"] if "/held/" in a["url"] and
                (("replica" in a) == replica_field)]

    def test_6_an_approval_held_by_a_is_listed_and_decided_through_c(self):
        a, b, c = self.a, self.b, self.c
        th, out = self.held_through(a, "alpha")
        entry = poll(lambda: self.listed_on(c), "c to list a's held request")[0]
        self.assertEqual(entry["identity"], "alpha")
        self.assertEqual([x["id"] for x in self.listed_on(a, replica_field=False)], [entry["id"]])
        self.assertGreater(entry["expires_in_ms"], 0)
        status, doc = c.admin("POST", "/v1/approvals/%s/approve" % entry["id"], {"by": "carol"})
        self.assertEqual((status, doc["decision"], doc.get("forwarded")), (200, "approved", True))
        th.join(WAIT_S)
        self.assertEqual(out, [(200, None)])  # exchange() checks the origin saw it
        for r in (a, b, c):
            poll(lambda: not self.listed_on(r) and not self.listed_on(r, False),
                 "the entry to leave %s's list" % r.name)
        # Decided once: a second decision anywhere is 404.
        status, doc = b.admin("POST", "/v1/approvals/%s/deny" % entry["id"])
        self.assertEqual((status, doc.get("reason")), (404, "unknown_approval"))

        th, out = self.held_through(b, "beta")
        entry = poll(lambda: self.listed_on(a), "a to list b's held request")[0]
        status, doc = a.admin("POST", "/v1/approvals/%s/deny" % entry["id"], {"reason": "no"})
        self.assertEqual((status, doc["decision"]), (200, "denied"))
        th.join(WAIT_S)
        self.assertEqual(out, [(403, "approval_denied")])
        with open(os.path.join(b.dir, "audit.jsonl")) as f:
            audit = f.read()
        self.assertIn(entry["id"], audit)


    def test_7_a_rewound_store_never_loses_a_kill(self):
        a, b, c = self.a, self.b, self.c
        status, doc = a.admin("POST", "/v1/kill", {"identity": "alpha"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        self.everyone_sees({"all": False, "identities": ["alpha"]}, (a, b, c))
        # As after a restore from a backup or a failover to a lagging replica: the same
        # state, an older version. A kill made now must still reach every replica.
        self.store.cli("HSET", "e2e:kill:state", "version", "1")
        status, doc = b.admin("POST", "/v1/kill", {"identity": "beta"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        both = {"all": False, "identities": ["alpha", "beta"]}
        self.everyone_sees(both, (a, b, c))
        # A malformed state is not read as "nothing killed": the kills stay.
        self.store.cli("HSET", "e2e:kill:state", "ids", "not json")
        for r in (a, b, c):
            poll(lambda: r.metric("sluice_control_store_up") == 0.0,
                 "replica %s to refuse the malformed state" % r.name)
        self.assertEqual(c.get("beta"), (503, "killed"))
        self.assertEqual([r.killed() for r in (a, b, c)], [both] * 3)
        # The next change replaces it, and the replicas write their kills back.
        self.store.cli("DEL", "e2e:kill:state")
        for r in (a, b, c):
            poll(lambda: r.metric("sluice_control_store_up") == 1.0, "the store to be read")
        self.everyone_sees(both, (a, b, c))
        for who in ("alpha", "beta"):
            status, doc = c.admin("POST", "/v1/revive", {"identity": who})
            self.assertEqual(status, 200, doc)
        self.everyone_sees({"all": False, "identities": []}, (a, b, c))


    def test_8_one_decision_wins_when_the_holder_and_another_replica_decide_at_once(self):
        a, c = self.a, self.c
        for round_ in range(3):
            th, out = self.held_through(a, "alpha")
            entry = poll(lambda: self.listed_on(c), "c to list a's held request")[0]
            answers = {}
            go = threading.Barrier(2)

            def decide(r, verdict):
                go.wait(WAIT_S)
                answers[r.name] = r.admin("POST", "/v1/approvals/%s/%s" % (entry["id"], verdict))
            deciders = [threading.Thread(target=decide, args=(a, "approve")),
                        threading.Thread(target=decide, args=(c, "deny"))]
            for t in deciders:
                t.start()
            for t in deciders:
                t.join(WAIT_S)
            th.join(WAIT_S)
            won = [n for n, (status, _) in answers.items() if status == 200]
            lost = [n for n, (status, doc) in answers.items()
                    if (status, doc.get("reason")) == (404, "unknown_approval")]
            self.assertEqual((len(won), len(lost)), (1, 1), (round_, answers))
            # What the agent got is what the winner was told.
            self.assertEqual(out, [(200, None)] if won == ["a"] else [(403, "approval_denied")],
                             (round_, answers))

    def test_9_a_kill_through_the_cli_holds_even_where_a_replica_refuses_the_token(self):
        a, b, c = self.a, self.b, self.c
        # Each replica made its own admin token; a's is wrong for b. The kill reaches b all
        # the same, through the store, and the command says so and succeeds.
        urls = "http://127.0.0.1:%d,http://127.0.0.1:%d" % (a.admin_port, b.admin_port)
        token = os.path.join(a.dir, "admin.token")
        for cmd, killed in (("kill", ["alpha"]), ("revive", [])):
            r = subprocess.run([tp.sluice_binary(), cmd, "alpha", "--admin", urls,
                                "--token-file", token], capture_output=True, timeout=60,
                               env=tp.client_env())
            err = r.stderr.decode()
            self.assertEqual(r.returncode, 0, (cmd, r.stdout, err))
            self.assertIn("1 of 2 replica(s) failed", err)
            self.assertIn("is in the control store", err)
            self.everyone_sees({"all": False, "identities": killed}, (a, b, c))

    def test_10_every_record_names_the_replica_that_wrote_its_chain(self):
        names = {}
        for r in (self.a, self.b, self.c):
            self.assertEqual(r.get("beta"), (200, None))
            path = os.path.join(r.dir, "audit.jsonl")
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
            seen = {x.get("replica") for x in recs}
            self.assertEqual(len(seen), 1, (r.name, seen))
            names[r.name] = seen.pop()
            self.assertTrue(names[r.name].startswith(socket.gethostname() + "-"), names)
            v = subprocess.run([tp.sluice_binary(), "audit", "verify", path],
                               capture_output=True, timeout=60)
            self.assertEqual(v.returncode, 0, v.stderr)
        self.assertEqual(len(set(names.values())), 3, names)


    def test_11_a_replica_started_on_a_store_that_lost_its_data_never_serves_a_kill(self):
        a, b, c = self.a, self.b, self.c
        status, doc = a.admin("POST", "/v1/kill", {"identity": "alpha"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        self.everyone_sees({"all": False, "identities": ["alpha"]}, (a, b, c))
        errors = [r.metric("sluice_control_store_errors_total") for r in (a, b, c)]
        self.store.stop()  # SIGKILL, no persistence: the kill is gone from the store
        # Until each old replica has failed six reconnects: its next try is 3.2-5 s away,
        # so a replica started now meets an empty store well before they write back.
        for r, e0 in zip((a, b, c), errors):
            poll(lambda: r.metric("sluice_control_store_errors_total") >= e0 + 6,
                 "replica %s to back off" % r.name, timeout=SETTLE_S + WAIT_S)
        self.store.start()
        e = replica("e", self.store.url()).start(ready=False)
        seen = []
        try:
            def refused_as_killed():
                seen.append(e.get("alpha"))
                return seen[-1] == (503, "killed")
            poll(refused_as_killed, "e to refuse alpha as killed", timeout=SETTLE_S + WAIT_S)
            # Before the old replicas wrote alpha's kill back, e refused everyone: it could
            # not tell a new fleet from a store that lost its data. Never a 200.
            self.assertTrue(set(seen) <= {(503, "control_store_unavailable"), (503, "killed")},
                            seen)
            self.assertEqual(e.get("beta"), (200, None))
        finally:
            e.stop()
        status, doc = b.admin("POST", "/v1/revive", {"identity": "alpha"})
        self.assertEqual(status, 200, doc)
        self.everyone_sees({"all": False, "identities": []}, (a, b, c))

    def test_12_a_decision_made_while_the_holder_was_cut_off_reaches_it_later(self):
        c = self.c
        rl = relay(self.store.port)
        h = replica("h", self.store.url().replace(":%d/" % self.store.port, ":%d/" % rl.port))
        h.start()
        try:
            th, out = self.held_through(h, "beta")
            entry = poll(lambda: self.listed_on(c), "c to list h's held request")[0]
            rl.cut()
            poll(lambda: h.metric("sluice_control_store_up") == 0.0, "h to lose the store")
            status, doc = c.admin("POST", "/v1/approvals/%s/approve" % entry["id"])
            self.assertEqual((status, doc.get("forwarded")), (200, True), doc)
            rl.reopen()  # the message went while h was away; the claim kept the decision
            th.join(SETTLE_S + WAIT_S)
            self.assertEqual(out, [(200, None)])
        finally:
            h.stop()
            rl.cut()


    def test_13_a_change_written_onto_a_rewound_store_keeps_the_kills_it_dropped(self):
        a, b, c = self.a, self.b, self.c
        status, doc = a.admin("POST", "/v1/kill", {"identity": "alpha"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        self.everyone_sees({"all": False, "identities": ["alpha"]}, (a, b, c))
        # A failover to a replica of Redis that lags by the last write: the version before,
        # alpha's kill gone. A kill made at once, before any replica read the store again,
        # must not make the lagging state current.
        version = int(self.store.cli("HGET", "e2e:kill:state", "version"))
        self.store.cli("HSET", "e2e:kill:state", "version", str(version - 1), "ids", "[]")
        status, doc = b.admin("POST", "/v1/kill", {"identity": "beta"})
        self.assertEqual((status, doc["store"]), (200, "shared"), doc)
        both = {"all": False, "identities": ["alpha", "beta"]}
        self.everyone_sees(both, (a, b, c))
        self.assertEqual(c.get("alpha"), (503, "killed"))
        for who in ("alpha", "beta"):
            status, doc = c.admin("POST", "/v1/revive", {"identity": who})
            self.assertEqual(status, 200, doc)
        self.everyone_sees({"all": False, "identities": []}, (a, b, c))


class fail_closed_test(unittest.TestCase):
    def test_fail_closed_refuses_new_flows_until_the_store_is_read(self):
        store = redis_server("late")  # not started yet: the port is free
        r = replica("fc", store.url(), on_unavailable="fail_closed").start(ready=False)
        try:
            self.assertEqual(r.get("alpha"), (503, "control_store_unavailable"))
            status, doc = r.admin("GET", "/readyz")
            self.assertEqual((status, doc.get("reason")), (503, "control_store_unavailable"))
            store.start()
            poll(lambda: r.get("alpha") == (200, None), "the replica to serve once the store is up",
                 timeout=SETTLE_S + WAIT_S)
            status, doc = r.admin("GET", "/readyz")
            self.assertEqual((status, doc), (200, {"status": "ready"}))
        finally:
            r.stop()
            store.stop()


    def test_a_replica_that_never_read_the_store_refuses_in_last_known_mode(self):
        # last_known, but nothing known: no killed.json and no store. Serving would lift
        # every kill the fleet holds, so it refuses until the store is read.
        store = redis_server("never")
        r = replica("nk", store.url()).start(ready=False)
        try:
            self.assertEqual(r.get("alpha"), (503, "control_store_unavailable"))
            status, doc = r.admin("GET", "/readyz")
            self.assertEqual((status, doc.get("reason")), (503, "control_store_unavailable"))
            store.start()
            poll(lambda: r.get("alpha") == (200, None), "the replica to serve once it read",
                 timeout=SETTLE_S + WAIT_S)
        finally:
            r.stop()
            store.stop()


class tls_store_test(unittest.TestCase):
    def test_rediss_with_password_shares_a_kill_and_a_wrong_password_is_reported(self):
        store = redis_server("tls", tls=True)
        store.start()
        e = replica("e", store.url(), tls_ca=True).start()
        f = replica("f", store.url(), tls_ca=True).start()
        wrong = replica("w", store.url(password="not-" + PASSWORD), tls_ca=True).start(ready=False)
        try:
            self.assertEqual(e.metric("sluice_control_store_up"), 1.0)
            status, doc = e.admin("POST", "/v1/kill", {"identity": "alpha"})
            self.assertEqual((status, doc["store"]), (200, "shared"), doc)
            poll(lambda: f.killed() == {"all": False, "identities": ["alpha"]}, "f to see it")
            self.assertEqual(f.get("alpha"), (503, "killed"))
            status, doc = f.admin("POST", "/v1/revive", {"identity": "alpha"})
            self.assertEqual(status, 200, doc)
            poll(lambda: e.killed() == {"all": False, "identities": []}, "e to see the revive")
            # The wrong password: never up, said in the log, the password never shown.
            self.assertEqual(wrong.metric("sluice_control_store_up"), 0.0)
            poll(lambda: "refused AUTH" in wrong.stderr_text(), "the AUTH refusal in the log")
        finally:
            for r in (e, f, wrong):
                r.stop()
            store.stop()


if __name__ == "__main__":
    unittest.main()
