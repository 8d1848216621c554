"""What the load harness's scenarios share (run.py, download.py): the throwaway CA, the
processes it runs (sluice_bench_origin, `sluice run`), the sluice_loadgen wrapper, and the
/proc readings (CPU seconds, VmRSS, VmHWM). Python standard library only."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (args[0], r.stderr.decode(errors="replace")))


def make_ca(d):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "bench-ca.key", "-out", "bench-ca.pem", "-days", "2",
            "-subj", "/CN=sluice bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return os.path.join(d, "bench-ca.pem"), os.path.join(d, "bench-ca.key")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# Load generators started with Popen (the idle scenarios), stopped by main()'s cleanup
# if a scenario is interrupted (SIGTERM, Ctrl-C) while they run.
CHILDREN = []


def spawn(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    CHILDREN.append(p)
    return p


def wait_or_kill(p, timeout):
    """Waits up to `timeout` seconds for `p` to exit, then kills it."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def accepting(proc, port, seconds):
    """Waits up to `seconds` for a connection to 127.0.0.1:`port` to succeed while `proc`
    runs; False when it exited or the time ran out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def ready(proc, admin_port, seconds):
    """Waits up to `seconds` for sluice's /readyz to answer 200 (a replica joining an empty
    control store first waits for the fleet's kill switch state); False otherwise."""
    deadline = time.monotonic() + seconds
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with opener.open("http://127.0.0.1:%d/readyz" % admin_port, timeout=2) as r:
                if r.status == 200:
                    return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    return False


def stop_children(procs=CHILDREN, timeout=10):
    """Terminates `procs` (default: every spawned child) and waits for them (bounded)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        wait_or_kill(p, timeout)


class origin:
    def __init__(self, binary, ca, ca_key, threads):
        self.proc = subprocess.Popen([binary, "--ca-cert", ca, "--ca-key", ca_key, "--threads",
                                      str(threads)], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening "):
            raise RuntimeError("origin did not start: %r" % line)
        self.port = int(line.split()[1])

    def stop(self):
        stop_children([self.proc], timeout=5)


class sluice:
    """One `sluice run` with TLS interception, all detectors, variants on (the default)."""

    def __init__(self, binary, tmp, name, origin_port, bench_ca, fsync, max_body,
                 large_bodies=None, inspect=True, credential=None, limits=False, store=None):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.port = free_port()
        self.admin_port = free_port()
        data = os.path.join(self.dir, "data")
        config = os.path.join(self.dir, "sluice.yaml")
        max_body_line = "\n      max_body: %s" % max_body if max_body else ""
        if large_bodies:
            max_body_line += "\n      large_bodies: %s" % large_bodies
        # --limits: limits high enough never to refuse, so their bookkeeping is measured;
        # --control-store URL: shared through that Redis (issue 22).
        if limits:
            max_body_line += ("\n    limits: {requests_per_minute: 1000000000, "
                              "upload_per_minute: 1TiB, max_connections: 100000}")
        control_store = ""
        if store:
            control_store = "control_store: {redis: {url: \"%s\", key_prefix: \"bench-%s:\"}}\n" % (
                store, os.urandom(4).hex())
        credentials = ""
        if credential:
            # A brokered secret for the origin: every response sluice relays from it goes
            # through the secret masker (armed whenever a credential is configured).
            secret_file = os.path.join(self.dir, "bench.secret")
            with open(secret_file, "w") as f:
                f.write(credential + "\n")
            os.chmod(secret_file, 0o600)
            credentials = f"""credentials:
  - name: bench
    placeholder: "sluice:bench"
    source: {{file: {secret_file}}}
    hosts: ["localhost"]
    ports: [{origin_port}]
    header: {{name: Authorization, value: "Bearer {{secret}}"}}
    identities: [bench]
"""
        with open(config, "w") as f:
            f.write(f"""version: 1
data_dir: {data}
listeners:
  - address: 127.0.0.1:{self.port}
ca: {{cert: ca.pem, key: ca.key}}
upstream:
  ca_file: {bench_ca}
  connect_timeout: 5s
identities:
  - name: bench
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: bench
    rules:
      - hosts: ["localhost", "127.0.0.1"]
        ports: [{origin_port}]
        action: allow
        inspect: {"true" if inspect else "false"}
    dlp:
      detectors: [all]
      on_finding: deny{max_body_line}
    private_destinations: [127.0.0.1/32]
{credentials}{control_store}admin: {{address: "127.0.0.1:{self.admin_port}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{free_port()}"}}
audit: {{path: {os.path.join(self.dir, "audit.jsonl")}, fsync: {fsync}}}
logging: {{level: warn, format: text}}
""")
        self.stderr = open(os.path.join(self.dir, "sluice.stderr"), "wb")
        self.terminated = False
        self.proc = subprocess.Popen([binary, "run", "--config", config],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     stdin=subprocess.DEVNULL)
        if not accepting(self.proc, self.port, 60) and self.proc.poll() is None:
            self.stop()
            raise RuntimeError("sluice did not start")
        if self.proc.poll() is not None:
            raise RuntimeError("sluice exited: " + self.stderr_text()[-2000:])
        if not ready(self.proc, self.admin_port, 60):
            self.stop()
            raise RuntimeError("sluice never became ready: " + self.stderr_text()[-2000:])
        self.ca = os.path.join(data, "ca.pem")

    def stderr_text(self):
        with open(os.path.join(self.dir, "sluice.stderr"), "rb") as f:
            return f.read().decode(errors="replace")

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def hwm_kib(self):
        return status_kib(self.proc.pid, "VmHWM")

    def rss_kib(self):
        return status_kib(self.proc.pid, "VmRSS")

    def terminate(self):
        """Asks sluice to drain and exit (SIGTERM, once) without waiting: its drain takes
        about 2 s, which the caller may spend on other work before stop()."""
        if self.proc.poll() is None and not self.terminated:
            self.proc.send_signal(signal.SIGTERM)
            self.terminated = True

    def stop(self):
        self.terminate()
        wait_or_kill(self.proc, 15)
        self.stderr.close()


def tool(args, name):
    """A harness binary: in the build dir or its bench/ subfolder."""
    for d in (args.build, os.path.join(args.build, "bench")):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    raise RuntimeError("%s not found in %s (build it first)" % (name, args.build))


def loadgen(args, opts, origin_port, ca, proxy_port=None, extra=(), timeout=None,
            threads=None):
    cmd = [tool(args, "sluice_loadgen"), "--target", "127.0.0.1:%d" % origin_port,
           "--sni", "localhost", "--ca", ca, "--threads", str(threads or args.loadgen_threads),
           *opts, *extra]
    if proxy_port:
        cmd += ["--proxy", "127.0.0.1:%d" % proxy_port]
    r = subprocess.run(cmd, capture_output=True, timeout=timeout or (args.duration + 120))
    out = r.stdout.decode(errors="replace")
    for line in out.splitlines():
        if line.startswith("loadgen-json "):
            res = json.loads(line[len("loadgen-json "):])
            res["command"] = " ".join(cmd)
            return res
    raise RuntimeError("loadgen gave no result (exit %d): %s %s" % (
        r.returncode, out[-2000:], r.stderr.decode(errors="replace")[-2000:]))


def show(label, r):
    print("  %-22s %8.0f req/s  %7.0f hs/s (%d resumed)  p50 %7.0f us  p99 %7.0f us  p99.9 %7.0f us  "
          "%6.1f MB/s  ok %d  errors %d%s" % (
              label, r["requests_per_s"], r["handshakes_per_s"], r["resumed"], r["p50_us"], r["p99_us"],
              r["p999_us"], r["mb_per_s"], r["ok"], r["errors"],
              ("  first error: " + r["first_error"]) if r["first_error"] else ""))


def measured(s, fn):
    """Runs fn() and returns (result, sluice CPU seconds used meanwhile)."""
    before = s.cpu()
    r = fn()
    return r, s.cpu() - before
