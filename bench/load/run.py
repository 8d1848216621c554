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
library only; harness.py holds what the scenarios share (processes, the loadgen wrapper,
/proc readings) and download.py the download scenario. Usage:
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
import sys
import tempfile
import time

from download import scenario_download
from harness import loadgen, make_ca, measured, origin, show, sluice, spawn, stop_children, tool


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
    ap.add_argument("--limits", action="store_true",
                    help="policy limits that never refuse: their bookkeeping is measured")
    ap.add_argument("--control-store", help="control_store.redis.url: limits and the kill "
                    "switch shared through this Redis (issue 22)")
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
    if args.tinyproxy and not os.access(args.tinyproxy, os.X_OK):
        ap.error("--tinyproxy: %s is not an executable file" % args.tinyproxy)
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
                   args.audit_fsync, max_body, large_bodies, inspect, credential,
                   args.limits, args.control_store)
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
