#!/usr/bin/env python3
"""End-to-end (issue 25): a WebSocket session follows the live configuration and the audit.

- Every client message is decided under the configuration in force when it arrives: a
  session opened while the policy only logged findings denies a token sent after a reload
  that makes findings deny (1008, the origin never gets it); a reload that removes the
  allow ends the session (record reason policy_deny) and nothing sent after it arrives.
- A session relays nothing while no record can be written: with the audit on a small
  tmpfs that another writer fills, the next message closes both sides 1011 and never
  reaches the origin. Skipped with a message where a tmpfs cannot be mounted (needs
  CAP_SYS_ADMIN; CI runs as root).

Real parts only: one `sluice run` on loopback reloaded through its admin API, the
`websockets` origin and clients of test_websocket.py.

Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_websocket_live.py -v
"""

import asyncio
import atexit
import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402
import test_websocket as tw  # noqa: E402  (origins and clients; its tests are not collected)

import websockets.exceptions  # noqa: E402  (importable once test_websocket found it)


class L:
    tmp = None
    mnt = None       # tmpfs for the audit, or None
    origin = None
    sluice = None
    stdout = stderr = None
    proxy_port = admin_port = metrics_port = None
    audit = None
    config = None


def config_text(on_finding="deny", allowed=True):
    rules = ("""      - hosts: ["localhost"]
        ports: [%d]
        action: allow
""" % L.origin.port) if allowed else """      - hosts: ["nowhere.invalid"]
        action: allow
"""
    return f"""version: 1
data_dir: {os.path.join(L.tmp, "data")}
listeners:
  - address: 127.0.0.1:{L.proxy_port}
    identity: local
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {os.path.join(L.tmp, "test-ca.pem")}
  connect_timeout: 5s
identities:
  - name: local
policies:
  - identity: local
    rules:
{rules}    dlp:
      detectors: [all]
      on_finding: {on_finding}
    private_destinations: [127.0.0.1/32, "::1/128"]
admin: {{address: "127.0.0.1:{L.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{L.metrics_port}"}}
audit: {{path: {L.audit}, fsync: always}}
"""


def write_config(**kw):
    with open(L.config, "w") as f:
        f.write(config_text(**kw))


def admin_reload():
    return tp.admin_reload(L.admin_port, os.path.join(L.tmp, "data"))


def stop_everything():
    tp.stop_run(L.sluice, (L.origin,), (L.stdout, L.stderr), None)
    L.sluice = L.origin = None
    if L.tmp and os.path.isdir(L.tmp):
        try:
            tp.assert_no_secret_in_audits(L.tmp)  # the audit on the tmpfs too
        finally:
            if L.mnt:
                subprocess.run(["umount", L.mnt], capture_output=True)
                L.mnt = None
            if not os.environ.get("SLUICE_E2E_KEEP"):
                shutil.rmtree(L.tmp, ignore_errors=True)
            L.tmp = None


def setUpModule():
    binary = tp.sluice_binary()
    atexit.register(stop_everything)
    L.tmp = tempfile.mkdtemp(prefix="sluice-e2e-ws-live-")
    tp.make_certificates(L.tmp)
    L.origin = tw.ws_origin(os.path.join(L.tmp, "origin.pem"),
                            os.path.join(L.tmp, "origin.key"), "deflate")
    mnt = os.path.join(L.tmp, "audit")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", mnt],
                       capture_output=True, text=True)
    L.mnt = mnt if m.returncode == 0 else None
    L.audit = os.path.join(mnt, "audit.jsonl")
    L.proxy_port, L.admin_port, L.metrics_port = tp.free_port(), tp.free_port(), tp.free_port()
    L.config = os.path.join(L.tmp, "sluice.yaml")
    write_config()
    L.stdout = open(os.path.join(L.tmp, "sluice.stdout"), "wb")
    L.stderr = open(os.path.join(L.tmp, "sluice.stderr"), "wb")
    L.sluice = subprocess.Popen([binary, "run", "--config", L.config], stdout=L.stdout,
                                stderr=L.stderr, stdin=subprocess.DEVNULL, env=tp.client_env())
    for port in (L.proxy_port, L.admin_port):
        if not tp.wait_for_port(port, L.sluice, tp.START_TIMEOUT_S):
            raise RuntimeError("sluice did not start (exit %s)" % L.sluice.poll())
    # test_websocket's clients read these.
    tw.st.tmp, tw.st.proxy_port = L.tmp, L.proxy_port
    tw.st.sluice_ca = os.path.join(L.tmp, "data", "ca.pem")
    tp.S.tmp, tp.S.audit_path = L.tmp, L.audit  # tp.wait_for_audit reads these


def tearDownModule():
    stop_everything()


def records_for(path):
    with open(L.audit) as f:
        return [r for r in map(json.loads, f) if path in r.get("url", "")]


class websocket_live_test(unittest.TestCase):
    maxDiff = 4000

    @contextlib.contextmanager
    def reloaded(self, **kw):
        """The configuration written with `kw` and reloaded for the `with` body, then
        the module's own restored by another reload."""
        write_config(**kw)
        try:
            status, body = admin_reload()
            self.assertEqual(status, 200, body)
            yield
        finally:
            write_config()
            status, body = admin_reload()
            self.assertEqual(status, 200, body)

    def test_a_message_after_a_reload_is_decided_under_the_new_policy(self):
        path = "/live-dlp/" + tp.marker()
        token = tp.github_classic_token()

        async def go():
            with self.reloaded(on_finding="log"):
                ws = await tw.open_wss(L.origin, path)
                # Findings only logged: the token goes through.
                await ws.send("first " + token)
                self.assertEqual(await asyncio.wait_for(ws.recv(), tw.IO_TIMEOUT_S),
                                 "first " + token)
                write_config(on_finding="deny")
                status, body = admin_reload()
                self.assertEqual(status, 200, body)
                # The same session, the live policy: now a finding denies.
                await ws.send("second " + token)
                return await tw.expect_closed(ws)

        code, _ = run(go())
        self.assertEqual(code, 1008)
        self.assertEqual(L.origin.messages(path), ["first " + token])
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("decision") == "deny")
        self.assertEqual([(h["reason"], h["findings"][0]["location"]) for h in hits],
                         [("dlp_finding", "ws:message:2")])

    def test_a_reload_that_removes_the_allow_ends_the_session(self):
        path = "/live-allow/" + tp.marker()

        async def go():
            ws = await tw.open_wss(L.origin, path)
            await ws.send("before")
            self.assertEqual(await asyncio.wait_for(ws.recv(), tw.IO_TIMEOUT_S), "before")
            with self.reloaded(allowed=False):
                try:
                    await ws.send("after")
                except websockets.exceptions.ConnectionClosed:
                    pass
                await tw.expect_closed(ws)

        run(go())
        self.assertEqual(L.origin.messages(path), ["before"])
        _, _, hits = tp.wait_for_audit(
            lambda r: path in r.get("url", "") and r.get("reason") == "policy_deny")
        self.assertTrue(hits, records_for(path))

    def relay_until_the_disk_fills(self, path, noticed):
        """Opens a session on `path` and relays one message; another writer fills the
        audit's file system; once `noticed()` is true (sluice has seen it) one more message
        is sent. Returns how the session was closed; the filler is removed."""
        if L.mnt is None:
            self.skipTest("cannot mount a tmpfs for the audit (needs CAP_SYS_ADMIN)")
        filler = os.path.join(L.mnt, "filler")

        async def go():
            ws = await tw.open_wss(L.origin, path)
            await ws.send("before")
            self.assertEqual(await asyncio.wait_for(ws.recv(), tw.IO_TIMEOUT_S), "before")
            try:
                with open(filler, "wb", buffering=0) as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                    except OSError:
                        pass
                seen = await asyncio.get_running_loop().run_in_executor(None, noticed)
                self.assertTrue(seen, "sluice did not notice the full disk")
                await ws.send("while full")
                return await tw.expect_closed(ws)
            finally:
                os.unlink(filler)

        return run(go())

    def test_nothing_is_relayed_while_no_record_can_be_written(self):
        # sluice finds out on its next record (a plain request here), then refuses
        # everything.
        path = "/live-audit/" + tp.marker()
        code, _ = self.relay_until_the_disk_fills(path, lambda: plain_request() == 503)
        self.assertEqual(code, 1011)
        self.assertEqual(L.origin.messages(path), ["before"])
        # Room again: new sessions work.
        path2 = "/live-audit-after/" + tp.marker()

        async def again():
            # sluice looks for room again within 100 ms of refusing: retried until then.
            deadline = time.monotonic() + tw.IO_TIMEOUT_S
            while True:
                try:
                    ws = await tw.open_wss(L.origin, path2)
                    break
                except ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            await ws.send("again")
            self.assertEqual(await asyncio.wait_for(ws.recv(), tw.IO_TIMEOUT_S), "again")
            await ws.close()

        run(again())
        self.assertEqual(L.origin.messages(path2), ["again"])

    def test_a_fill_by_another_writer_is_seen_while_no_record_is_written(self):
        """No record is written while a session relays, and sluice still sees the audit's
        file system fill up (it reads the free space again every 100 ms): /readyz turns
        503 and the next message closes the session 1011, never reaching the origin."""
        path = "/live-fill/" + tp.marker()
        code, _ = self.relay_until_the_disk_fills(path, lambda: readyz_is(503))
        self.assertEqual(code, 1011)
        self.assertEqual(L.origin.messages(path), ["before"])
        # Room again, seen the same way, before the next test opens a session.
        self.assertTrue(readyz_is(200), "/readyz stayed 503 after the space was freed")


def readyz_is(status):
    """True once sluice's /readyz answers `status` (asked again at once until then,
    bounded by IO_TIMEOUT_S)."""
    deadline = time.monotonic() + tw.IO_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", L.admin_port, timeout=tw.IO_TIMEOUT_S)
        try:
            conn.request("GET", "/readyz")
            if conn.getresponse().status == status:
                return True
        finally:
            conn.close()
    return False


def plain_request():
    """One request through sluice to the origin; its status (503 while the audit is full,
    retried until sluice has found out)."""
    deadline = time.monotonic() + tw.IO_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", L.proxy_port, timeout=tw.IO_TIMEOUT_S)
        try:
            conn.request("GET", "http://localhost:%d/plain/%s" % (L.origin.port, tp.marker()))
            status = conn.getresponse().status
        finally:
            conn.close()
        if status == 503:
            return status
    return status


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


if __name__ == "__main__":
    unittest.main(verbosity=2)
