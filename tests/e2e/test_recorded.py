#!/usr/bin/env python3
"""Recorded before it leaves (issue 26): no request reaches an origin, and no answer
reaches a client, without a durable audit record, under SIGKILL and on a full disk.

- crash: clients under load (a distinct path per request: keep-alive, one connection per
  request, and an intercepted CONNECT tunnel), sluice killed with SIGKILL three times and
  restarted; afterwards every 200 a client saw and every request the origin logged has a
  record, and `sluice audit verify` passes (exchanges cut by a kill are listed as `cut:`).
- disk full: the audit on a small tmpfs under a 16-connection load; zero 200s and zero
  forwarded requests without a record, then space is freed and traffic flows again.
  Skipped with a message where a tmpfs cannot be mounted (needs CAP_SYS_ADMIN).

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_recorded.py -v
"""

import http.client
import json
import os
import shutil
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
import test_operations as ops  # noqa: E402  (a sluice run that can be killed and restarted)

CLIENT_TIMEOUT_S = 10.0


def all_records(inst):
    """Every record, starts included: a start is the proof that an exchange was recorded
    before it went upstream."""
    try:
        with open(inst.audit_path, "rb") as f:
            return [json.loads(line) for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def recorded_paths(inst):
    return {urllib.parse.urlsplit(r.get("url", "")).path for r in all_records(inst)}


class load:
    """Client threads, each request on a path of its own. Kinds: "close" (one connection
    per request, as an agent running curl in a loop), "keep" (keep-alive, absolute-form),
    "tls" (keep-alive inside an intercepted CONNECT). `ok` collects the paths answered 200,
    `refused` counts 503 audit_unavailable answers."""

    def __init__(self, inst, tag, kinds):
        self.inst, self.tag = inst, tag
        self.ok, self.refused, self.other = [], 0, []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(i, k), daemon=True)
                        for i, k in enumerate(kinds)]
        for t in self.threads:
            t.start()

    def connect(self, kind):
        if kind == "tls":
            ctx = ssl.create_default_context(cafile=self.inst.sluice_ca)
            c = http.client.HTTPSConnection("127.0.0.1", self.inst.proxy_port, context=ctx,
                                            timeout=CLIENT_TIMEOUT_S)
            c.set_tunnel("localhost", self.inst.origin.port)
            return c
        return http.client.HTTPConnection("127.0.0.1", self.inst.proxy_port,
                                          timeout=CLIENT_TIMEOUT_S)

    def client(self, i, kind):
        conn, n = None, 0
        while not self.stop.is_set():
            path = "/rec/%s/%d/%d" % (self.tag, i, n)
            n += 1
            try:
                if conn is None:
                    conn = self.connect(kind)
                target = path if kind == "tls" else \
                    "http://127.0.0.1:%d%s" % (self.inst.plain.port, path)
                headers = {"Connection": "close"} if kind == "close" else {}
                conn.request("GET", target, headers=headers)
                r = conn.getresponse()
                body = r.read()
                with self.lock:
                    if r.status == 200:
                        self.ok.append(path)
                    elif r.status == 503 and b"audit_unavailable" in body:
                        self.refused += 1
                    else:
                        self.other.append((path, r.status, body[:200]))
                if kind == "close" or r.status != 200:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                # sluice killed or refusing the CONNECT: the answer, if any, was not 200.
                if conn is not None:
                    conn.close()
                conn = None
                if self.stop.wait(0.02):
                    break

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=CLIENT_TIMEOUT_S + 5)


def origin_paths(inst, tag):
    prefix = "/rec/%s/" % tag
    return {r["path"] for o in (inst.plain, inst.origin) for r in o.snapshot()
            if r["path"].startswith(prefix)}


class crash_test(unittest.TestCase):
    def test_sigkill_under_load_loses_no_record(self):
        inst = ops.instance("crash")
        try:
            answered = []
            for k in range(3):
                tag = "k%d" % k
                ld = load(inst, tag, ["close"] * 3 + ["keep"] * 2 + ["tls"])
                deadline = time.monotonic() + 2.0
                # Load for ~2 s, but never kill before traffic flows.
                while time.monotonic() < deadline or len(ld.ok) < 20:
                    if time.monotonic() > deadline + 20:
                        break
                    time.sleep(0.05)
                inst.kill()
                ld.finish()
                self.assertGreater(len(ld.ok), 20, "no load before kill %d: %r" % (k, ld.other[:3]))
                answered += ld.ok
                inst.start()  # the chain continues from the last whole line
            # After the restarts: every answer and every forwarded request is on record.
            recorded = recorded_paths(inst)
            missing_answered = [p for p in answered if p not in recorded]
            forwarded = set()
            for k in range(3):
                forwarded |= origin_paths(inst, "k%d" % k)
            missing_forwarded = sorted(forwarded - recorded)
            self.assertEqual(missing_answered, [],
                             "%d of %d answered 200 without a record" %
                             (len(missing_answered), len(answered)))
            self.assertEqual(missing_forwarded, [],
                             "%d of %d forwarded without a record" %
                             (len(missing_forwarded), len(forwarded)))
            r = ops.verify(inst.audit_path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # Every record of an exchange that went upstream is a start or completes one.
            for rec in all_records(inst):
                if rec.get("decision") == "allow":
                    self.assertIn(rec.get("event"), ("start", "end"), rec)
        finally:
            inst.stop()


class disk_full_test(unittest.TestCase):
    def test_full_audit_disk_refuses_and_recovers(self):
        base = tempfile.mkdtemp(prefix="sluice-rec-tmpfs-")
        mnt = os.path.join(base, "audit")
        os.makedirs(mnt)
        m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", mnt],
                           capture_output=True, text=True)
        if m.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            self.skipTest("cannot mount a tmpfs for the audit (needs CAP_SYS_ADMIN): " +
                          (m.stderr.strip() or "mount failed"))
        inst = None
        try:
            # Leave ~384 KiB: full within a second or two of load.
            filler = os.path.join(mnt, "filler")
            with open(filler, "wb") as f:
                f.write(b"\0" * (2 * 1024 * 1024 - 384 * 1024))
            inst = ops.instance("full", audit_dir=mnt)
            ld = load(inst, "full", ["close"] * 8 + ["keep"] * 8)
            # The wait ends as soon as the refusals come; its bound only matters on a slow
            # machine (a sanitizer build sharing two cores with other tests filled the
            # audit after ~30 s at ~12 req/s).
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and ld.refused < 200:
                time.sleep(0.05)
            ld.finish()
            self.assertGreaterEqual(ld.refused, 200, "the audit never filled: %d ok, %d refused, "
                                    "sluice %s; log:\n%s" % (len(ld.ok), ld.refused,
                                                              inst.state(), inst.log()[-4000:]))
            self.assertEqual(ld.other, [], "answers other than 200 and 503 audit_unavailable")
            recorded = recorded_paths(inst)
            missing_answered = [p for p in ld.ok if p not in recorded]
            forwarded = origin_paths(inst, "full")
            self.assertEqual(missing_answered, [], "answered 200 without a record")
            self.assertEqual(sorted(forwarded - recorded), [], "forwarded without a record")
            # Every started exchange was completed: room for completions was reserved.
            r = ops.verify(inst.audit_path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("cut:", r.stdout)

            # Space is freed: traffic flows again.
            os.unlink(filler)
            ld2 = load(inst, "after", ["close"])
            end = time.monotonic() + 10
            while time.monotonic() < end and not ld2.ok:
                time.sleep(0.05)
            ld2.finish()
            self.assertTrue(ld2.ok, "no 200 after space was freed")
            r = ops.verify(inst.audit_path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        finally:
            if inst is not None:
                inst.stop()
            subprocess.run(["umount", mnt], capture_output=True)
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
