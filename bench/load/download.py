"""The download scenario of the load harness (issue 23; run.py --scenarios download):
GET /bytes/N from sluice_bench_origin direct, through the intercepting sluice, and
through two tunnel-only references, tinyproxy and a sluice whose rule has
`inspect: false`. What it prints is described in run.py's docstring."""
import os
import shutil
import subprocess

from harness import (accepting, cpu_seconds, free_port, loadgen, measured, show, status_kib,
                     stop_children)


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
        if not accepting(self.proc, self.port, 10):
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
        stop_children([self.proc])
        self.stderr.close()


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
