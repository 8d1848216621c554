#!/usr/bin/env python3
"""End-to-end (issue 25, detector side): through a real `sluice run` allowing every host,
a hand-typed token-shaped string whose checksum does not verify (and other prefixed
look-alikes, and AWS's documented example key id) sent to a TLS origin on loopback is 403
`dlp_finding` and never reaches the origin; CONNECT to an address in the special-purpose
blocks that are not globally reachable (SIIT ::ffff:0:a.b.c.d, 198.18.0.0/15,
192.0.0.0/24, documentation ranges) is 403 `private_destination`, audited, and never
connected.

Reuses tests/e2e/test_proxy.py (certificates, recording origin, the hand-driven client,
run helpers) but runs its own sluice: the policy here allows "*", so a refusal can only
come from the address check or the detectors.
Run:  SLUICE_BIN=build/sluice python3 tests/e2e/test_unscanned_detectors.py -v
"""

import atexit
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_proxy as tp  # noqa: E402  (helpers only; its tests are not collected here)

S = tp.env_state

LOOK_ALIKES = {
    "github-token-look-alike": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef01",  # 34 characters
    "github-pat-classic": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123",  # checksum fails
    "aws-access-key-id": "AKIAIOSFODNN7EXAMPLE",
    "stripe-secret-key-live": "sk_live_FAKE_TEST_KEY_0123456789abcdefXYZ",
    "sendgrid-api-key": "SG.FAKE_SENDGRID_KEY_0123.abcdefghijklmnopqrstuvwxyz_0123456789",
}

# Special-purpose addresses (RFC 6890 registries) that no public destination has.
PRIVATE_AUTHORITIES = [
    "[::ffff:0:7f00:1]",   # SIIT IPv4-translated 127.0.0.1
    "[::ffff:0:a9fe:a9fe]",  # SIIT 169.254.169.254 (cloud metadata)
    "198.18.0.1",          # benchmarking 198.18.0.0/15
    "198.19.255.254",
    "192.0.0.170",         # NAT64 discovery, IETF protocol assignments 192.0.0.0/24
    "192.0.2.1",           # TEST-NET-1
    "[2001:db8::1]",       # IPv6 documentation
    "[100::1]",            # IPv6 discard-only
]


def write_config(path, data_dir):
    admin_port, metrics_port = tp.free_port(), tp.free_port()
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
      - hosts: ["*"]
        action: allow
    dlp:
      detectors: [all]
      on_finding: deny
    private_destinations: [127.0.0.1/32, "::1/128"]
admin: {{address: "127.0.0.1:{admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{metrics_port}"}}
audit: {{path: {S.audit_path}, fsync: always}}
""")


def stop_everything():
    tp.stop_run(S.sluice, (S.origin,), (S.sluice_stderr, S.sluice_stdout), S.tmp)
    S.origin = None


def setUpModule():
    binary = tp.sluice_binary()
    atexit.register(stop_everything)
    S.tmp = tempfile.mkdtemp(prefix="sluice-e2e-detectors-")
    tp.make_certificates(S.tmp)
    S.origin = tp.recording_origin("good", os.path.join(S.tmp, "origin.pem"),
                                   os.path.join(S.tmp, "origin.key"))
    S.proxy_port = tp.free_port()
    S.audit_path = os.path.join(S.tmp, "audit.jsonl")
    data_dir = os.path.join(S.tmp, "data")
    config = os.path.join(S.tmp, "sluice.yaml")
    write_config(config, data_dir)
    S.sluice_stderr = open(os.path.join(S.tmp, "sluice.stderr"), "wb")
    S.sluice_stdout = open(os.path.join(S.tmp, "sluice.stdout"), "wb")
    S.sluice = subprocess.Popen([binary, "run", "--config", config], stdout=S.sluice_stdout,
                                stderr=S.sluice_stderr, stdin=subprocess.DEVNULL,
                                env=tp.client_env())
    if not tp.wait_for_port(S.proxy_port, S.sluice, tp.START_TIMEOUT_S):
        raise RuntimeError("sluice did not start; stderr:\n" + tp.sluice_stderr_text()[-4000:])
    S.sluice_ca = os.path.join(data_dir, "ca.pem")


def tearDownModule():
    stop_everything()


class unscanned_detectors_test(unittest.TestCase):
    maxDiff = 4000

    def answer_doc(self, a, status, reason):
        self.assertEqual(a.status, status, a)
        self.assertIn("x-sluice-flow", a.headers, a.headers)
        doc = json.loads(a.body)
        self.assertEqual(doc.get("reason"), reason, doc)
        return doc

    def test_look_alike_tokens_in_a_body_are_denied_and_never_reach_the_origin(self):
        for rule, value in LOOK_ALIKES.items():
            with self.subTest(rule=rule):
                m = tp.marker()
                body = json.dumps({"msg": "my key is " + value}).encode()
                a = tp.via_proxy("localhost", S.origin.port, "POST", "/" + m,
                                 {"Content-Type": "application/json"}, body)
                doc = self.answer_doc(a, 403, "dlp_finding")
                self.assertIn(rule, doc.get("rules", []), doc)
                self.assertNotIn(value, a.body.decode(errors="replace"))
                self.assertEqual(S.origin.requests_for(m), [], "the origin received it")
                self.assertFalse(S.origin.saw_bytes(value), "the value reached the origin")
        # The audit holds the decisions, never the values.
        data, _ = tp.read_audit()
        for value in LOOK_ALIKES.values():
            self.assertNotIn(value.encode(), data)

    def test_clean_request_still_reaches_the_origin(self):
        m = tp.marker()
        a = tp.via_proxy("localhost", S.origin.port, "POST", "/" + m,
                         {"Content-Type": "application/json"}, b'{"q":"hello"}')
        self.assertEqual(a.status, 200, a)
        self.assertEqual(len(S.origin.requests_for(m)), 1)

    def test_special_purpose_addresses_are_private_destinations(self):
        for authority in PRIVATE_AUTHORITIES:
            with self.subTest(authority=authority):
                a = tp.via_proxy(authority, 443, "GET", "/")
                self.assertEqual(a.phase, "connect", a)
                doc = self.answer_doc(a, 403, "private_destination")
                _, _, hits = tp.wait_for_audit(lambda r: r.get("flow") == doc["flow"])
                self.assertTrue(hits, "no audit record for flow " + doc["flow"])
                self.assertEqual(hits[-1].get("reason"), "private_destination", hits[-1])

    def test_absolute_form_to_a_benchmarking_address_is_a_private_destination(self):
        a = tp.via_proxy("198.18.0.1", 80, "GET", "/x", tls=False)
        self.answer_doc(a, 403, "private_destination")


if __name__ == "__main__":
    unittest.main()
