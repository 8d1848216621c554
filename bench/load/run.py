#!/usr/bin/env python3
"""sluice load harness (issue 10): the same workload direct and through `sluice run`.

Makes a throwaway CA, starts sluice_bench_origin (a TLS keep-alive origin on 127.0.0.1)
and `sluice run` with TLS interception, all detectors and variants, then runs
sluice_loadgen against the origin directly and through sluice and prints:

  keepalive       1 KiB POSTs over 16 keep-alive connections: requests/s both ways and
                  the ratio, latency p50/p99/p99.9 and p50 added, sluice CPU us per
                  request (utime+stime from /proc/PID/stat), peak RSS (VmHWM); then the
                  same connections paced at --latency-rate requests/s both ways, for
                  the latency sluice adds below saturation
  new-connection  one request per fresh CONNECT + TLS: handshakes/s both ways
  idle            N idle intercepted keep-alive connections: RSS per connection, and
                  RSS --close-settle seconds after they closed (what a burst leaves)
  upload          one large upload streamed through sluice (peak RSS, outcome)
  download        (issue 23) GET /bytes/N from the origin: --download-size GETs over
                  --download-connections keep-alive connections for --duration seconds
                  (at most --download-requests), then one --download-large-size GET on
                  one connection; each direct, through the intercepting sluice (which
                  also has a brokered credential for the origin, so every response runs
                  through the secret masker), and through tunnel-only references:
                  tinyproxy (Debian's, if installed; started here on a free loopback
                  port with a generated config, logging to a file) and a second sluice
                  whose rule for the origin has `inspect: false` (an opaque CONNECT
                  tunnel). Prints MB/s for each, sluice CPU seconds per GiB downloaded,
                  peak RSS and RSS after, and the ratios sluice/direct, sluice/tinyproxy,
                  sluice/opaque

Everything runs on 127.0.0.1, bounded by request counts and durations. Python standard
library only. Usage:
  bench/load/run.py --build BUILD_DIR
                    [--scenarios keepalive,new-connection,idle,upload,download]
                    [--requests N] [--duration S] [--idle-counts 1000,10000] ...
With --smoke it runs a tiny workload (ctest: it checks only that nothing errs).
"""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

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


def stop_children(procs=CHILDREN):
    """Terminates `procs` (default: every spawned child) and waits for them (bounded)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class sluice:
    """One `sluice run` with TLS interception, all detectors, variants on (the default)."""

    def __init__(self, binary, tmp, name, origin_port, bench_ca, fsync, max_body,
                 large_bodies=None, inspect=True, credential=None):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.port = free_port()
        data = os.path.join(self.dir, "data")
        config = os.path.join(self.dir, "sluice.yaml")
        max_body_line = "\n      max_body: %s" % max_body if max_body else ""
        if large_bodies:
            max_body_line += "\n      large_bodies: %s" % large_bodies
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
{credentials}admin: {{address: "127.0.0.1:{free_port()}", token_file: admin.token}}
metrics: {{address: "127.0.0.1:{free_port()}"}}
audit: {{path: {os.path.join(self.dir, "audit.jsonl")}, fsync: {fsync}}}
logging: {{level: warn, format: text}}
""")
        self.stderr = open(os.path.join(self.dir, "sluice.stderr"), "wb")
        self.terminated = False
        self.proc = subprocess.Popen([binary, "run", "--config", config],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("sluice did not start")
        if self.proc.poll() is not None:
            raise RuntimeError("sluice exited: " + self.stderr_text()[-2000:])
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
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


class tinyproxy:
    """Debian's tinyproxy as a tunnel-only reference: CONNECT to any port, loopback
    clients only, logging to a file in its folder (never syslog)."""

    def __init__(self, binary, tmp):
        self.dir = os.path.join(tmp, "tinyproxy")
        os.makedirs(self.dir)
        self.port = free_port()
        config = os.path.join(self.dir, "tinyproxy.conf")
        # No ConnectPort line: CONNECT is allowed to every port (tinyproxy.conf(5)).
        with open(config, "w") as f:
            f.write(f"""Port {self.port}
Listen 127.0.0.1
Timeout 600
MaxClients 1024
Allow 127.0.0.1
Syslog Off
LogFile "{os.path.join(self.dir, 'tinyproxy.log')}"
LogLevel Error
PidFile "{os.path.join(self.dir, 'tinyproxy.pid')}"
DisableViaHeader Yes
""")
        self.stderr = open(os.path.join(self.dir, "tinyproxy.stderr"), "wb")
        # -d: stay in the foreground, so this Popen is the proxy itself.
        self.proc = subprocess.Popen([binary, "-d", "-c", config], stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("tinyproxy did not start: " + self.log_text()[-2000:])

    def log_text(self):
        text = ""
        for name in ("tinyproxy.stderr", "tinyproxy.log"):
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    text += f.read().decode(errors="replace")
            except OSError:
                pass
        return text

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def hwm_kib(self):
        return status_kib(self.proc.pid, "VmHWM")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
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


def scenario_keepalive(args, ctx):
    o, s = ctx["origin"], ctx["start_sluice"]("keepalive")
    base = ["--mode", "keepalive", "--connections", str(args.connections), "--requests",
            str(args.requests), "--duration", str(args.duration), "--body-size",
            str(args.body_size)]
    try:
        # Warm-up: mints the leaf, compiles nothing new, fills caches.
        loadgen(args, ["--mode", "keepalive", "--connections", "2", "--requests", "20"],
                o.port, s.ca, s.port)
        direct = loadgen(args, base, o.port, ctx["bench_ca"])
        proxied, cpu = measured(s, lambda: loadgen(args, base, o.port, s.ca, s.port))
        hwm = s.hwm_kib()
        paced = None
        if args.latency_rate > 0:
            # The same connections at a fixed offered rate below saturation: latency from
            # each request's scheduled time, so the difference is what sluice adds, not
            # queueing behind a saturated CPU (which Little's law fixes at C / throughput).
            pb = ["--mode", "keepalive", "--connections", str(args.connections), "--rate",
                  str(args.latency_rate), "--requests",
                  str(int(args.latency_rate * args.latency_duration)), "--duration",
                  str(args.latency_duration + 5), "--body-size", str(args.body_size)]
            paced = (loadgen(args, pb, o.port, ctx["bench_ca"]),
                     loadgen(args, pb, o.port, s.ca, s.port))
    finally:
        s.stop()
    print("keepalive: %d-byte POSTs over %d keep-alive connections" % (args.body_size,
                                                                      args.connections))
    show("direct", direct)
    show("through sluice", proxied)
    out = {"direct": direct, "proxied": proxied, "sluice_cpu_s": cpu,
           "sluice_peak_rss_kib": hwm}
    if paced:
        print("  paced at %d req/s (latency from each request's scheduled time):" %
              args.latency_rate)
        show("direct, paced", paced[0])
        show("through sluice, paced", paced[1])
        out["paced"] = {"rate": args.latency_rate, "direct": paced[0], "proxied": paced[1],
                        "p50_added_us": paced[1]["p50_us"] - paced[0]["p50_us"],
                        "p99_added_us": paced[1]["p99_us"] - paced[0]["p99_us"]}
        print("  paced: p50 added %.0f us, p99 added %.0f us" % (
            out["paced"]["p50_added_us"], out["paced"]["p99_added_us"]))
    if proxied["ok"]:
        out["ratio"] = proxied["requests_per_s"] / max(direct["requests_per_s"], 1e-9)
        out["cpu_us_per_request"] = cpu / proxied["ok"] * 1e6
        out["cpu_s_per_1000"] = cpu / proxied["ok"] * 1000
        out["p50_added_us"] = proxied["p50_us"] - direct["p50_us"]
        print("  ratio sluice/direct %.3f; sluice CPU %.1f us/request (%.3f s per 1,000); "
              "p50 added %.0f us; sluice peak RSS %.1f MiB" % (
                  out["ratio"], out["cpu_us_per_request"], out["cpu_s_per_1000"],
                  out["p50_added_us"], hwm / 1024))
    return out


def scenario_new_connection(args, ctx):
    o, s = ctx["origin"], ctx["start_sluice"]("new-connection")
    base = ["--mode", "new-connection", "--connections", str(args.connections), "--requests",
            str(args.handshake_requests), "--duration", str(args.duration), "--body-size",
            str(args.body_size)]
    try:
        loadgen(args, ["--mode", "keepalive", "--connections", "1", "--requests", "5"],
                o.port, s.ca, s.port)
        # A client's full handshake (key share, chain and signature checks) costs about
        # as much CPU as sluice's side: one load generator thread would be the limit.
        t = args.handshake_loadgen_threads
        direct = loadgen(args, base, o.port, ctx["bench_ca"], threads=t)
        proxied, cpu = measured(s, lambda: loadgen(args, base, o.port, s.ca, s.port, threads=t))
        resumed, cpu_r = measured(s, lambda: loadgen(args, base + ["--resume"], o.port, s.ca,
                                                      s.port, threads=t))
        hwm = s.hwm_kib()
    finally:
        s.stop()
    print("new-connection: one %d-byte POST per fresh CONNECT + TLS, %d concurrent" % (
        args.body_size, args.connections))
    show("direct", direct)
    show("through sluice", proxied)
    show("sluice, client resumes", resumed)
    out = {"direct": direct, "proxied": proxied, "proxied_client_resume": resumed,
           "sluice_cpu_s": cpu, "sluice_peak_rss_kib": hwm}
    if proxied["ok"]:
        out["ratio"] = proxied["handshakes_per_s"] / max(direct["handshakes_per_s"], 1e-9)
        out["cpu_us_per_connection"] = cpu / proxied["ok"] * 1e6
        out["cpu_us_per_connection_client_resume"] = cpu_r / max(resumed["ok"], 1) * 1e6
        print("  ratio sluice/direct %.3f; sluice CPU %.0f us per new connection (%.0f us "
              "when the client resumes); peak RSS %.1f MiB" % (
                  out["ratio"], out["cpu_us_per_connection"],
                  out["cpu_us_per_connection_client_resume"], hwm / 1024))
    return out


def scenario_idle(args, ctx):
    results = []
    for n in args.idle_counts:
        o, s = ctx["origin"], ctx["start_sluice"]("idle-%d" % n)
        try:
            loadgen(args, ["--mode", "keepalive", "--connections", "1", "--requests", "5"],
                    o.port, s.ca, s.port)
            time.sleep(0.2)
            before = s.rss_kib()
            if args.idle_batch and n > args.idle_batch:
                results.append(idle_batched(args, s, o, n, before))
                continue
            cmd = [tool(args, "sluice_loadgen"), "--target",
                   "127.0.0.1:%d" % o.port, "--sni", "localhost", "--ca", s.ca, "--proxy",
                   "127.0.0.1:%d" % s.port, "--mode", "idle", "--connections", str(n),
                   "--hold", str(max(args.hold, args.idle_settle + 2)), "--duration",
                   str(args.duration),
                   "--threads", str(args.loadgen_threads), "--body-size",
                   str(args.body_size)]
            p = spawn(cmd)
            ready, lines = False, []
            for raw in p.stdout:
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if line.startswith("idle-ready"):
                    ready = True
                    break
            opened = s.rss_kib() if ready else 0
            if ready and args.idle_settle > 0:
                time.sleep(args.idle_settle) # the connections idle; sluice may trim its heap
            rss = s.rss_kib() if ready else 0
            active = n if ready else 0
            rest, _ = p.communicate(timeout=max(args.hold, args.idle_settle + 2) +
                                    args.duration + 60)
            lines += rest.decode(errors="replace").splitlines()
            # The load generator has exited: its connections are closed.
            closed = rss_after_close(args, s) if ready else 0
            res = next((json.loads(l[len("loadgen-json "):]) for l in lines
                        if l.startswith("loadgen-json ")), {"ok": 0, "errors": n,
                                                             "first_error": "no result"})
            per = (rss - before) / n if ready else None
            print("idle: %d intercepted keep-alive connections: %s" % (
                n, ("RSS %.1f MiB -> %.1f MiB, %.1f KiB per connection after %.0f s idle "
                    "(%.1f KiB as they opened); %.1f MiB %.0f s after they closed" % (
                        before / 1024, rss / 1024, per, args.idle_settle,
                        (opened - before) / n, closed / 1024, args.close_settle)) if ready else
                "not all opened (%s)" % res.get("first_error")))
            results.append({"connections": n, "ready": ready, "rss_before_kib": before,
                            "rss_open_kib": opened, "rss_idle_kib": rss,
                            "rss_after_close_kib": closed, "settle_s": args.idle_settle,
                            "close_settle_s": args.close_settle,
                            "kib_per_connection": per, "open": active,
                            "loadgen": res, "command": " ".join(cmd)})
        finally:
            s.stop()
    return results


def rss_after_close(args, s):
    """sluice's RSS --close-settle seconds after every idle connection has closed: what the
    burst left behind (freed memory glibc keeps, caches), against rss_before_kib."""
    time.sleep(args.close_settle)
    return s.rss_kib()


def idle_batched(args, s, o, n, before):
    """Opens n idle connections as several loadgen processes of at most --idle-batch each,
    one after another (each loadgen gives every connection 10 s for connect + CONNECT +
    TLS, which n at once cannot meet when sluice mints fewer handshakes/s than n/10)."""
    procs, ready, errors = [], 0, []
    hold = 600.0
    left = n
    try:
        while left > 0:
            b = min(args.idle_batch, left)
            cmd = [tool(args, "sluice_loadgen"), "--target", "127.0.0.1:%d" % o.port, "--sni",
                   "localhost", "--ca", s.ca, "--proxy", "127.0.0.1:%d" % s.port, "--mode",
                   "idle", "--connections", str(b), "--hold", str(hold), "--duration",
                   str(args.duration), "--threads", str(args.loadgen_threads), "--body-size",
                   str(args.body_size)]
            p = spawn(cmd)
            procs.append(p)
            ok = False
            for raw in p.stdout:
                line = raw.decode(errors="replace").rstrip()
                if line.startswith("idle-ready"):
                    ok = True
                    break
                if line.startswith("loadgen-json "):
                    errors.append(json.loads(line[len("loadgen-json "):]).get("first_error"))
            if not ok:
                break
            ready += b
            left -= b
        time.sleep(1.0)
        opened = s.rss_kib()
        if ready == n and args.idle_settle > 0:
            time.sleep(args.idle_settle) # the connections idle; sluice may trim its heap
        rss = s.rss_kib()
        hwm = s.hwm_kib()
    finally:
        stop_children(procs)
    all_ready = ready == n
    closed = rss_after_close(args, s) if all_ready else 0
    per = (rss - before) / n if all_ready else None
    print("idle: %d intercepted keep-alive connections (batches of %d): %s" % (
        n, args.idle_batch, ("RSS %.1f MiB -> %.1f MiB, %.1f KiB per connection after %.0f s "
                             "idle (%.1f KiB as they opened; peak %.1f MiB); %.1f MiB %.0f s "
                             "after they closed"
                             % (before / 1024, rss / 1024, per, args.idle_settle,
                                (opened - before) / n, hwm / 1024, closed / 1024,
                                args.close_settle)) if all_ready else
        "only %d opened (%s)" % (ready, errors[-1] if errors else "?")))
    return {"connections": n, "ready": all_ready, "rss_before_kib": before,
            "rss_open_kib": opened, "rss_idle_kib": rss, "rss_after_close_kib": closed,
            "settle_s": args.idle_settle, "close_settle_s": args.close_settle,
            "kib_per_connection": per, "open": ready,
            "batch": args.idle_batch, "loadgen": {"ok": ready, "errors": n - ready,
                                                 "first_error": errors[-1] if errors else ""}}


def scenario_upload(args, ctx):
    o, s = ctx["origin"], ctx["start_sluice"]("upload", max_body=args.upload_max_body,
                                           large_bodies="stream")
    base = ["--mode", "upload", "--body-size", str(args.upload_size), "--duration",
            str(args.duration)]
    try:
        direct = loadgen(args, base, o.port, ctx["bench_ca"], timeout=args.duration + 600)
        proxied, cpu = measured(s, lambda: loadgen(args, base, o.port, s.ca, s.port,
                                                   timeout=args.duration + 600))
        hwm = s.hwm_kib()
    finally:
        s.stop()
    print("upload: one %d-byte body streamed" % args.upload_size)
    show("direct", direct)
    show("through sluice", proxied)
    print("  sluice peak RSS %.1f MiB, CPU %.2f s" % (hwm / 1024, cpu))
    return {"direct": direct, "proxied": proxied, "sluice_peak_rss_kib": hwm,
            "sluice_cpu_s": cpu}


def download_leg(args, ctx, ca, proxy=None):
    """The two download runs (many --download-size GETs, then one --download-large-size
    GET) through `proxy` (a sluice or tinyproxy; None: direct). With a proxy: its CPU
    seconds during each run, its peak RSS after the runs and its RSS after them."""
    o = ctx["origin"]
    port = proxy.port if proxy else None
    small = ["--mode", "download", "--connections", str(args.download_connections),
             "--requests", str(args.download_requests), "--duration", str(args.duration),
             "--response-size", str(args.download_size)]
    large = ["--mode", "download", "--connections", "1", "--requests", "1", "--duration",
             str(args.duration), "--response-size", str(args.download_large_size)]
    timeout = args.duration + 600
    if proxy is None:
        return {"small": loadgen(args, small, o.port, ca, timeout=timeout),
                "large": loadgen(args, large, o.port, ca, timeout=timeout)}
    # Warm-up: the intercepting sluice mints its leaf for the origin here.
    loadgen(args, ["--mode", "download", "--connections", "1", "--requests", "2",
                   "--response-size", "4096"], o.port, ca, port)
    out = {"rss_before_kib": status_kib(proxy.proc.pid, "VmRSS")}
    out["small"], out["small_cpu_s"] = measured(proxy, lambda: loadgen(
        args, small, o.port, ca, port, timeout=timeout))
    out["small_peak_rss_kib"] = proxy.hwm_kib()
    out["large"], out["large_cpu_s"] = measured(proxy, lambda: loadgen(
        args, large, o.port, ca, port, timeout=timeout))
    out["peak_rss_kib"] = proxy.hwm_kib()
    out["rss_after_kib"] = status_kib(proxy.proc.pid, "VmRSS")
    for run in ("small", "large"):
        gib = out[run]["bytes_down"] / float(1 << 30)
        out[run + "_cpu_s_per_gib"] = out[run + "_cpu_s"] / gib if gib else None
    return out


def scenario_download(args, ctx):
    legs = {}
    legs["direct"] = download_leg(args, ctx, ctx["bench_ca"])
    # Interception, all detectors, and a brokered credential for the origin (the masker).
    secret = None if args.no_download_masker else "bench-brokered-" + os.urandom(12).hex()
    s = ctx["start_sluice"]("download", credential=secret)
    try:
        legs["sluice"] = download_leg(args, ctx, s.ca, s)
    finally:
        s.terminate() # drains while the references run; main() waits for it at the end
    tp_binary = args.tinyproxy or shutil.which("tinyproxy") or (
        "/usr/sbin/tinyproxy" if os.access("/usr/sbin/tinyproxy", os.X_OK) else None)
    if tp_binary:
        t = tinyproxy(tp_binary, ctx["tmp"])
        try:
            legs["tinyproxy"] = download_leg(args, ctx, ctx["bench_ca"], t)
        finally:
            t.stop()
    else:
        print("note: tinyproxy is not installed (apt-get install tinyproxy); the opaque "
              "sluice tunnel is the only tunnel-only reference")
    # The origin's own certificate reaches the client: an opaque CONNECT tunnel.
    s = ctx["start_sluice"]("download-opaque", inspect=False)
    try:
        legs["opaque"] = download_leg(args, ctx, ctx["bench_ca"], s)
    finally:
        s.stop()

    labels = {"direct": "direct", "sluice": "through sluice", "tinyproxy": "tinyproxy",
              "opaque": "sluice, opaque tunnel"}
    print("download: %d-byte GETs over %d keep-alive connections, then one %d-byte GET "
          "(intercepting sluice %s the secret masker)" % (
              args.download_size, args.download_connections, args.download_large_size,
              "without" if args.no_download_masker else "with"))
    for run, what in (("small", "%d-byte GETs" % args.download_size),
                      ("large", "one %d-byte GET" % args.download_large_size)):
        print("  %s:" % what)
        for name, leg in legs.items():
            show(labels[name], leg[run])
    # CPU and RSS are the proxy's own (sluice or tinyproxy), from /proc/PID.
    print("  %-22s %12s %12s %16s %16s %10s %10s" % (
        "", "MB/s small", "MB/s large", "CPU s/GiB small", "CPU s/GiB large", "peak RSS",
        "RSS after"))
    for name, leg in legs.items():
        def cpu(run):
            v = leg.get(run + "_cpu_s_per_gib")
            return "%.2f" % v if v is not None else "-"

        def mib(key):
            return "%.1f MiB" % (leg[key] / 1024) if key in leg else "-"
        print("  %-22s %12.1f %12.1f %16s %16s %10s %10s" % (
            labels[name], leg["small"]["mb_per_s"], leg["large"]["mb_per_s"], cpu("small"),
            cpu("large"), mib("peak_rss_kib"), mib("rss_after_kib")))
    ratios = {}
    for ref in ("direct", "tinyproxy", "opaque"):
        if ref not in legs:
            continue
        ratios[ref] = {run: legs["sluice"][run]["mb_per_s"] /
                       max(legs[ref][run]["mb_per_s"], 1e-9) for run in ("small", "large")}
    print("  ratios (MB/s, small / large): " + "; ".join(
        "sluice/%s %.3f / %.3f" % (ref, r["small"], r["large"]) for ref, r in ratios.items()))
    return {"masker": not args.no_download_masker, "download_size": args.download_size, "download_large_size": args.download_large_size,
            "connections": args.download_connections, "legs": legs, "ratios": ratios}


SCENARIOS = {"keepalive": scenario_keepalive, "new-connection": scenario_new_connection,
             "idle": scenario_idle, "upload": scenario_upload, "download": scenario_download}


def whole(lo):
    """An argparse type: a whole number of at least `lo`."""
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a whole number" % text)
        if n < lo:
            raise argparse.ArgumentTypeError("%d is below %d" % (n, lo))
        return n
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="build dir with sluice, sluice_loadgen, "
                    "sluice_bench_origin")
    ap.add_argument("--sluice", help="the sluice binary (default: BUILD_DIR/sluice)")
    ap.add_argument("--scenarios", default="keepalive,new-connection,idle,upload,download")
    ap.add_argument("--connections", type=whole(1), default=16,
                    help="keep-alive connections (default 16)")
    ap.add_argument("--requests", type=whole(1), default=200000,
                    help="keep-alive requests per run (default 200000)")
    ap.add_argument("--handshake-requests", type=whole(1), default=20000,
                    help="new-connection requests per run (default 20000)")
    ap.add_argument("--latency-rate", type=float, default=5000,
                    help="keepalive: also run paced at this many requests/s (0: skip)")
    ap.add_argument("--latency-duration", type=float, default=10.0,
                    help="seconds of the paced keepalive run")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per run (bound)")
    ap.add_argument("--body-size", type=whole(0), default=1024)
    ap.add_argument("--idle-counts", default="1000,10000",
                    help="idle: connection counts, comma-separated")
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--idle-settle", type=float, default=5.0,
                    help="idle: seconds the connections stay idle before RSS is read "
                         "(RSS as they opened is printed too)")
    ap.add_argument("--close-settle", type=float, default=5.0,
                    help="idle: seconds after the connections closed before RSS is read "
                         "again (rss_after_close_kib)")
    ap.add_argument("--idle-batch", type=whole(0), default=0,
                    help="open idle connections in loadgen processes of at most this many")
    ap.add_argument("--upload-size", type=whole(1), default=1 << 30)
    ap.add_argument("--upload-max-body", default=None,
                    help="dlp.max_body for the upload run (default: sluice's default)")
    ap.add_argument("--download-size", type=whole(0), default=1 << 20,
                    help="download: bytes per GET of the keep-alive run (default 1 MiB)")
    ap.add_argument("--download-large-size", type=whole(0), default=100 << 20,
                    help="download: bytes of the single large GET (default 100 MiB)")
    ap.add_argument("--download-connections", type=whole(1), default=4,
                    help="download: keep-alive connections of the first run (default 4)")
    ap.add_argument("--download-requests", type=whole(1), default=50000,
                    help="download: at most this many GETs in the first run")
    ap.add_argument("--no-download-masker", action="store_true",
                    help="download: no brokered credential in the intercepting sluice, so "
                         "its responses skip the secret masker")
    ap.add_argument("--tinyproxy", help="download: the tinyproxy binary (default: from PATH)")
    ap.add_argument("--audit-fsync", default="always", help="audit.fsync (always, or 1s)")
    ap.add_argument("--loadgen-threads", type=whole(1), default=1)
    ap.add_argument("--handshake-loadgen-threads", type=whole(1), default=2,
                    help="load generator threads of the new-connection scenario")
    ap.add_argument("--origin-threads", type=whole(1), default=2)
    ap.add_argument("--json-out", help="write every figure to this file")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny bounded workload; exit 1 on any error (ctest)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.smoke:
        args.requests, args.handshake_requests, args.duration = 50, 20, 20.0
        args.latency_rate, args.latency_duration = 100, 0.5
        args.connections = 4
        args.idle_counts, args.hold, args.upload_size = "20", 0.5, 256 * 1024
        args.idle_settle, args.close_settle = 0.5, 0.5
        args.download_size, args.download_requests = 64 * 1024, 8
        args.download_connections, args.download_large_size = 2, 1 << 20
        args.scenarios = "keepalive,new-connection,idle,upload,download"
    try:
        args.idle_counts = [whole(1)(x) for x in str(args.idle_counts).split(",") if x]
    except argparse.ArgumentTypeError as e:
        ap.error("--idle-counts: %s" % e)
    unknown = [x for x in args.scenarios.split(",") if x and x not in SCENARIOS]
    if unknown:
        ap.error("--scenarios: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(SCENARIOS)))
    if args.sluice and not os.access(args.sluice, os.X_OK):
        ap.error("--sluice: %s is not an executable file" % args.sluice)
    if args.json_out:
        # Checked now, not after a run of many minutes.
        folder = os.path.dirname(os.path.abspath(args.json_out))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            ap.error("--json-out: folder %s does not exist or is not writable" % folder)
        if os.path.isdir(args.json_out):
            ap.error("--json-out: %s is a folder; give a file name" % args.json_out)

    # SIGTERM (a CI timeout, `kill`) and SIGHUP end the run like Ctrl-C: the finally
    # below stops sluice, the origin and the load generators and removes the scratch folder.
    def interrupted(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    # Each idle connection holds a client socket in sluice and one in the load generator;
    # sluice pools upstream connections (at most 256 per io thread, 32 per origin), so the
    # origin and sluice's upstream side stay small: raise the limit for children.
    need = max(args.idle_counts or [0]) + 2048
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, need)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit < need:
        print("note: open file limit %d; idle counts above %d are skipped" % (
            limit, limit - 2048))
        args.idle_counts = [n for n in args.idle_counts if n + 2048 <= limit]

    tmp = tempfile.mkdtemp(prefix="sluice-bench-")
    o = None
    running = []

    def start_sluice(name, max_body=None, large_bodies=None, inspect=True, credential=None):
        s = sluice(args.sluice or tool(args, "sluice"), tmp, name, o.port, bench_ca,
                   args.audit_fsync, max_body, large_bodies, inspect, credential)
        running.append(s)
        return s

    figures = {"nproc": os.cpu_count(), "audit_fsync": args.audit_fsync,
               "command": " ".join(sys.argv)}
    failed = False
    try:
        bench_ca, bench_key = make_ca(tmp)
        o = origin(tool(args, "sluice_bench_origin"), bench_ca, bench_key,
                   args.origin_threads)
        ctx = {"origin": o, "start_sluice": start_sluice, "bench_ca": bench_ca, "tmp": tmp}
        for name in [x for x in args.scenarios.split(",") if x]:
            figures[name] = SCENARIOS[name](args, ctx)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleanup runs to its end
        stop_children()
        for s in running:
            s.stop()
        if o is not None:
            o.stop()
        if args.keep:
            print("scratch folder kept: " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(figures, f, indent=2)
    if args.smoke:
        # Every run must complete with no errors; the upload is over max_body when the
        # default applies, so only its direct leg must succeed.
        checks = []
        for name in ("keepalive", "new-connection"):
            for leg in ("direct", "proxied"):
                checks.append((name + " " + leg, figures[name][leg]))
        for leg in ("direct", "proxied"):
            checks.append(("keepalive paced " + leg, figures["keepalive"]["paced"][leg]))
        checks.append(("upload direct", figures["upload"]["direct"]))
        checks.append(("upload proxied", figures["upload"]["proxied"]))
        for leg, runs in figures["download"]["legs"].items():
            for run in ("small", "large"):
                checks.append(("download %s %s" % (leg, run), runs[run]))
        for i in figures["idle"]:
            checks.append(("idle %d" % i["connections"], i["loadgen"]))
            if not i["ready"]:
                failed = True
                print("FAIL idle: not every connection opened")
        for label, r in checks:
            if r["errors"] or not r["ok"]:
                failed = True
                print("FAIL %s: %d ok, %d errors: %s" % (label, r["ok"], r["errors"],
                                                        r["first_error"]))
        print("smoke: " + ("FAIL" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
