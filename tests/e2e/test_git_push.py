#!/usr/bin/env python3
"""End-to-end: `git push` through sluice (issue 21). A real git client pushes over HTTPS
through `sluice run` to a real `git http-backend` behind a TLS origin on loopback. A clean
push lands; a push that adds a secret as a new file, as a change to a file the server has
(the pack holds it in a delta), in a commit message or as a file name is refused, git shows
sluice's message, and nothing of the secret reaches the server's repository. Pushes to a
repository with history work because sluice adds `no-thin` to the advertisement (a thin
pack could not be read whole and would be refused).

Run by ctest (tests/e2e/CMakeLists.txt, SLUICE_BIN set) or by hand:
  SLUICE_BIN=build/sluice python3 tests/e2e/test_git_push.py -v
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_proxy as tp  # noqa: E402  (certificates, recording origins, token maker)

START_TIMEOUT_S = float(os.environ.get("SLUICE_E2E_START_TIMEOUT", "120"))
GIT_TIMEOUT_S = 120.0
AWS_KEY_ID = "AKIAIDVWTFKTANGPVYQE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"


class G:
    tmp = None
    origin = None
    run = None  # the tp.agent_run
    port = None
    ca = None
    root = None  # the server's repositories
    audit_path = None


class git_origin(tp.recording_origin):
    """Records every request, then answers /git/ with `git http-backend` (CGI, RFC 3875)."""

    def respond(self, h, body):
        with self.lock:
            self.records.append({"method": h.command, "path": h.path,
                                 "headers": list(h.headers.items()), "body": body,
                                 "client_port": h.client_address[1], "response": b""})
        path, _, query = h.path.partition("?")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": G.root,
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": h.command,
               "PATH_INFO": path[len("/git"):], "QUERY_STRING": query,
               "CONTENT_TYPE": h.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
               "REMOTE_USER": "agent", "GIT_PROTOCOL": h.headers.get("Git-Protocol", ""),
               "HTTP_CONTENT_ENCODING": h.headers.get("Content-Encoding", "")}
        r = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env,
                           timeout=GIT_TIMEOUT_S)
        head, sep, out = r.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, _, out = r.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name and name.lower() != "content-length":
                headers.append((name.strip(), value.strip()))
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(out)))
        h.end_headers()
        h.wfile.write(out)


def setUpModule():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (ctest sets it to the built sluice)")
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout
    if not os.path.exists(os.path.join(exec_path.strip(), "git-http-backend")):
        raise unittest.SkipTest("git-http-backend is not installed")
    G.tmp = tempfile.mkdtemp(prefix="sluice-git-")
    G.root = os.path.join(G.tmp, "server")
    os.makedirs(G.root)
    tp.make_certificates(G.tmp)
    G.origin = git_origin("git", os.path.join(G.tmp, "origin.pem"),
                          os.path.join(G.tmp, "origin.key"))
    G.run = tp.agent_run(G.tmp, G.origin)
    G.port, G.audit_path, G.ca = G.run.port, G.run.audit_path, G.run.ca


def tearDownModule():
    G.run.stop()


def git(*args, cwd=None, check=True):
    """git as an agent runs it: through sluice (HTTPS_PROXY), trusting sluice's CA, with
    no system or user configuration."""
    env = tp.client_env(HTTPS_PROXY="http://127.0.0.1:%d" % G.port, GIT_SSL_CAINFO=G.ca,
                        GIT_CONFIG_NOSYSTEM="1", HOME=G.tmp, GIT_TERMINAL_PROMPT="0",
                        GIT_AUTHOR_NAME="agent", GIT_AUTHOR_EMAIL="agent@example.com",
                        GIT_COMMITTER_NAME="agent", GIT_COMMITTER_EMAIL="agent@example.com")
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, env=env,
                       timeout=GIT_TIMEOUT_S)
    if check and r.returncode != 0:
        raise AssertionError("git %s failed (%d): %s" % (args, r.returncode,
                                                         r.stderr.decode(errors="replace")))
    return r


def filler(n):
    return "".join("setting_%d = value number %d for the service\n" % (i, i) for i in range(n))


class git_push_test(unittest.TestCase):
    def new_repository(self, name):
        """A server repository with one commit (a settings file), and an agent's clone of it
        through sluice."""
        seed = os.path.join(G.tmp, name + "-seed")
        git("init", "-q", "-b", "main", seed)
        with open(os.path.join(seed, "settings.ini"), "w") as f:
            f.write(filler(300))
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "initial settings", cwd=seed)
        bare = os.path.join(G.root, name + ".git")
        git("clone", "-q", "--bare", seed, bare)
        git("config", "http.receivepack", "true", cwd=bare)
        work = os.path.join(G.tmp, name + "-work")
        git("clone", "-q", "https://localhost:%d/git/%s.git" % (G.origin.port, name), work)
        return bare, work

    def server_holds(self, bare, needle):
        objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=bare,
                                 capture_output=True, timeout=GIT_TIMEOUT_S).stdout
        return needle.encode() in objects

    def assert_refused(self, bare, work, needle, where):
        before = subprocess.run(["git", "rev-parse", "main"], cwd=bare, capture_output=True,
                                text=True).stdout
        r = git("push", "-q", "origin", "main", cwd=work, check=False)
        message = r.stderr.decode(errors="replace")
        self.assertNotEqual(r.returncode, 0, message)
        self.assertIn("sluice: dlp_finding", message)
        self.assertIn(where, message)
        after = subprocess.run(["git", "rev-parse", "main"], cwd=bare, capture_output=True,
                               text=True).stdout
        self.assertEqual(before, after, "the server's branch moved")
        self.assertFalse(self.server_holds(bare, needle), "the secret reached the server")
        with open(G.audit_path, encoding="utf-8", errors="replace") as f:
            self.assertNotIn(needle, f.read())
        return message

    def commit(self, work, message, files):
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(work, name)) or work, exist_ok=True)
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", message, cwd=work)

    def test_a_clean_push_to_a_repository_with_history_lands(self):
        bare, work = self.new_repository("clean")
        with open(os.path.join(work, "settings.ini"), "a") as f:
            f.write("timeout = 30\n")
        self.commit(work, "raise the timeout", {"docs/notes.md": "clean notes\n"})
        git("push", "-q", "origin", "main", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work).stdout
        self.assertEqual(subprocess.run(["git", "rev-parse", "main"], cwd=bare,
                                        capture_output=True).stdout, head)
        # The advertisement sluice relayed asked for a full pack; git http-backend's own
        # answer does not say no-thin.
        self.assertTrue(G.origin.requests_for("/git/clean.git/info/refs?service=git-receive-pack"))
        pushes = [r for r in G.origin.requests_for("/git/clean.git/git-receive-pack")
                  if r["method"] == "POST" and b"PACK" in r["body"]]
        self.assertEqual(len(pushes), 1)

    def test_a_new_file_with_an_aws_key_is_refused(self):
        bare, work = self.new_repository("newfile")
        self.commit(work, "add deploy credentials", {
            "deploy/aws.env": "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n" % (AWS_KEY_ID,
                                                                                   AWS_SECRET)})
        self.assert_refused(bare, work, AWS_KEY_ID, "git:blob:deploy/aws.env")

    def test_a_secret_added_to_a_file_the_server_has_is_refused(self):
        bare, work = self.new_repository("delta")
        token = tp.github_classic_token()
        with open(os.path.join(work, "settings.ini"), "a") as f:
            f.write("github_token = %s\n" % token)
        git("commit", "-q", "-am", "one more setting", cwd=work)
        self.assert_refused(bare, work, token, "git:blob:settings.ini")

    def test_a_secret_in_a_commit_message_is_refused(self):
        bare, work = self.new_repository("message")
        token = tp.github_classic_token()
        self.commit(work, "rotate the key, the old one was %s" % token, {"a.txt": "a\n"})
        self.assert_refused(bare, work, token, "git:commit:")

    def test_a_secret_as_a_file_name_is_refused_and_not_repeated(self):
        bare, work = self.new_repository("filename")
        token = tp.github_classic_token()
        self.commit(work, "a file", {"keys/%s.txt" % token: "nothing\n"})
        message = self.assert_refused(bare, work, token, "git:tree:keys")
        self.assertNotIn(token, message)

    def test_the_refused_push_is_audited_with_its_location(self):
        bare, work = self.new_repository("audited")
        self.commit(work, "creds", {"creds.txt": "key %s\n" % AWS_KEY_ID})
        self.assert_refused(bare, work, AWS_KEY_ID, "git:blob:creds.txt")
        # The record is durable before git gets its answer (fsync: always).
        with open(G.audit_path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        denied = [r for r in records if "/git/audited.git/git-receive-pack" in r.get("url", "")
                  and r.get("decision") == "deny"]
        self.assertTrue(denied, "no deny record for the push")
        locations = [f["location"] for r in denied for f in r.get("findings", [])]
        self.assertIn("git:blob:creds.txt", locations)



class scan_pack_test(unittest.TestCase):
    """`sluice scan` opens a packfile as the proxy opens a push: findings with their
    location, and a pack cut short is an input error, not a clean file."""

    def test_a_pack_made_by_git_is_scanned_with_locations_and_a_cut_one_is_refused(self):
        repo = os.path.join(G.tmp, "scan-pack")
        git("init", "-q", "-b", "main", repo)
        self.commit_in(repo, {"cfg/creds.env": "id = %s\n" % AWS_KEY_ID + filler(40)})
        packs = os.path.join(G.tmp, "scan-pack-out")
        os.makedirs(packs)
        r = subprocess.run(["git", "pack-objects", "--revs", "-q", os.path.join(packs, "p")],
                           cwd=repo, input=b"HEAD\n", capture_output=True, timeout=GIT_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        pack = [os.path.join(packs, n) for n in os.listdir(packs) if n.endswith(".pack")][0]
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", pack], capture_output=True,
                           text=True, timeout=GIT_TIMEOUT_S)
        self.assertEqual(r.returncode, 1, r.stderr)
        found = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertIn(("aws-access-key-id", "git:blob:cfg/creds.env"),
                      [(f["rule"], f.get("location")) for f in found])
        self.assertNotIn(AWS_KEY_ID, r.stdout + r.stderr)
        with open(pack, "rb") as f:
            whole = f.read()
        cut = os.path.join(packs, "cut.pack")
        with open(cut, "wb") as f:
            f.write(whole[:len(whole) // 2])
        r = subprocess.run([os.environ["SLUICE_BIN"], "scan", cut], capture_output=True,
                           text=True, timeout=GIT_TIMEOUT_S)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("bad_encoding", r.stderr)

    def commit_in(self, repo, files):
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(repo, name)), exist_ok=True)
            with open(os.path.join(repo, name), "w") as f:
                f.write(text)
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "config", cwd=repo)


if __name__ == "__main__":
    unittest.main()
