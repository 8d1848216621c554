#!/usr/bin/env python3
"""The approvals console in a real browser (issue 7): headless Debian Chromium driven by
playwright-core (deploy/install-deps.sh installs it into /opt/sluice-test-node) opens the
console of a real `sluice run`, is refused with a wrong token, then with the right one
approves a request held by a supervise rule (the test checks curl got the TLS origin's
answer) and presses Kill for an identity with an open tunnel (the test checks the tunnel
was closed, new requests get 503 killed, another identity is untouched). Screenshots go to
$SLUICE_ARTIFACT_DIR (ctest: the build's tests/e2e folder).

Also without a browser: the page, script and style are served without a token, with a
Content-Security-Policy allowing only this origin, byte for byte the files in
proxy/src/console/, and the script never writes data as HTML.

    SLUICE_BIN=build/sluice python3 tests/e2e/test_console.py -v
"""

import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_admin_cli as ac  # noqa: E402  (the instance with alice/bob and supervise rules)
import test_proxy as tp  # noqa: E402

CONSOLE_SRC = os.path.join(HERE, "..", "..", "proxy", "src", "console")
NODE_PREFIX = os.environ.get("SLUICE_TEST_NODE_PREFIX", "/opt/sluice-test-node")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


class C:
    inst = None


def setUpModule():
    ac.binary()
    C.inst = ac.instance("console")


def tearDownModule():
    if C.inst is not None:
        C.inst.stop()


def get(path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", C.inst.admin_port, timeout=20)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


class console_files_test(unittest.TestCase):

    def test_served_without_token_with_csp(self):
        for path, kind, name in (("/", "text/html", "index.html"),
                                 ("/console", "text/html", "index.html"),
                                 ("/console/app.js", "text/javascript", "app.js"),
                                 ("/console/app.css", "text/css", "app.css")):
            status, headers, body = get(path)
            self.assertEqual(status, 200, path)
            self.assertTrue(headers["content-type"].startswith(kind), headers)
            csp = headers["content-security-policy"]
            self.assertIn("default-src 'none'", csp)
            self.assertIn("script-src 'self'", csp)
            self.assertIn("connect-src 'self'", csp)
            self.assertNotIn("unsafe-inline", csp)
            self.assertEqual(headers["x-content-type-options"], "nosniff")
            with open(os.path.join(CONSOLE_SRC, name), "rb") as f:
                self.assertEqual(body, f.read(), path)
        # The data routes still need the token.
        self.assertEqual(get("/v1/flows")[0], 401)

    def test_page_loads_nothing_external_and_never_writes_html(self):
        for name in ("index.html", "app.js", "app.css"):
            with open(os.path.join(CONSOLE_SRC, name)) as f:
                text = f.read()
            self.assertNotRegex(text, r"(src|href)=\"(https?:)?//", name)
            self.assertNotRegex(text, r"@import|url\(", name)
            self.assertNotRegex(text, r"innerHTML|outerHTML|insertAdjacentHTML|document\.write",
                                name)
        with open(os.path.join(CONSOLE_SRC, "app.js")) as f:
            js = f.read()
        self.assertIn("sessionStorage", js)
        self.assertNotIn("localStorage", js)


class console_browser_test(unittest.TestCase):

    def test_approve_and_kill_in_chromium(self):
        module = os.path.join(NODE_PREFIX, "node_modules", "playwright-core")
        if not os.path.isdir(module) or not os.access(CHROMIUM, os.X_OK) or \
                shutil.which("node") is None:
            self.skipTest("needs node, %s and %s (deploy/install-deps.sh installs them)"
                          % (CHROMIUM, module))
        inst = C.inst
        marker = "/hold/console-%d" % time.monotonic_ns()
        client = inst.curl_https("alice", marker)
        entry = ac.wait_until(lambda: [a for a in json.loads(ac.cli(
            "approvals", "list", "--json", admin=inst.url, token_file=inst.token_file,
            check=0).stdout)["approvals"] if marker in a["url"]], "the held request")[0]
        tunnel = inst.open_tunnel("bob")  # a live flow of the identity to kill
        artifacts = os.environ.get("SLUICE_ARTIFACT_DIR") or tempfile.mkdtemp(
            prefix="sluice-console-shots-")
        os.makedirs(artifacts, exist_ok=True)
        try:
            env = dict(os.environ, CONSOLE_URL="http://127.0.0.1:%d/" % inst.admin_port,
                       CONSOLE_TOKEN=inst.token, APPROVAL_ID=entry["id"], KILL_IDENTITY="bob",
                       SCREENSHOT_DIR=artifacts, SLUICE_TEST_NODE_PREFIX=NODE_PREFIX,
                       CHROMIUM=CHROMIUM)
            r = subprocess.run(["node", os.path.join(HERE, "console", "console_test.js")],
                               capture_output=True, text=True, timeout=180, env=env)
            self.assertEqual(r.returncode, 0, "node failed:\n" + r.stderr[-4000:])
            seen = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertTrue(seen["ok"])
            self.assertIn("refused", seen["wrong_token_message"])
            self.assertIn(marker, seen["card_text"])
            self.assertIn("alice", seen["card_text"])
            self.assertEqual(seen["storage"], {"session": True, "local": 0})
            self.assertEqual(seen["external_requests"], [])
            self.assertIn("approved " + entry["id"] + " by console-tester",
                          seen["message_after_approve"])
            self.assertIn("killed bob", seen["message_after_kill"])
            self.assertTrue(seen["revive_visible"])
            for shot in ("console-pending.png", "console-killed.png"):
                self.assertGreater(os.path.getsize(os.path.join(artifacts, shot)), 10000)

            # At the proxy: the approved request reached the origin and curl got its answer.
            status, body, err = ac.finish(client)
            self.assertEqual(status, 200, err)
            self.assertEqual(json.loads(body)["origin"], "tls-console")
            self.assertEqual(len(inst.origin.requests_for(marker)), 1)
            rec = ac.wait_until(lambda: [x for x in ac.read_audit(inst)
                                         if marker in x.get("url", "")], "the audit record")[0]
            self.assertEqual(rec["approval"]["by"], "console-tester")
            # The kill: bob's open tunnel is closed, bob gets 503 killed, alice is served.
            tunnel.settimeout(10)
            try:
                self.assertEqual(tunnel.recv(1), b"")
            except (ssl.SSLError, ConnectionResetError):
                pass
            status, body = inst.plain_get("bob", "/after-console-kill")
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["reason"], "killed")
            self.assertEqual(inst.plain_get("alice", "/after-console-kill")[0], 200)
        finally:
            tunnel.close()
            if client.poll() is None:
                client.kill()
                client.wait()
            ac.cli("revive", "--all", admin=inst.url, token_file=inst.token_file)


if __name__ == "__main__":
    unittest.main()
