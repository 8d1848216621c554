#!/usr/bin/env python3
"""What keeps a process's freed heap pages resident: walks glibc's heaps (the main arena's
[heap] and every thread arena's 64 MiB-aligned heap) chunk by chunk, reads which pages are
resident from /proc/PID/pagemap, and prints, per arena, the in-use chunks by size and by the
first symbol of the binary found in their first four words (a vtable, or a function pointer
such as Asio's epoll_reactor::descriptor_state::do_complete), and which chunks alone keep a
resident page. A page that holds an in-use chunk cannot be given back by malloc_trim.

Usage (root, or ptrace rights over PID; stop the process so the heap holds still):
  kill -STOP PID; bench/load/heap_pages.py PID path/to/sluice > pages.txt; kill -CONT PID

Layout assumed (glibc 2.36, x86-64): chunk = prev_size, size|flags (PREV_INUSE = 1), user
data; a chunk is in use when the next chunk's PREV_INUSE bit is set (tcache and fastbin
chunks count as in use); a thread heap starts with heap_info (32 bytes), the first heap of
an arena with its malloc_state after it (glibc malloc/arena.c, malloc/malloc.c).
Reading the heap maps the zero page into untouched pages, so pagemap is read first.
"""
import bisect, collections, os, re, struct, subprocess, sys
pid = int(sys.argv[1]); binary = os.path.realpath(sys.argv[2])
maps = []
for l in open("/proc/%d/maps" % pid):
    f = l.split()
    a, b = (int(x, 16) for x in f[0].split("-"))
    maps.append((a, b, f[1], int(f[2], 16), f[5] if len(f) > 5 else ""))
# symbols of the binary (PIE): base = start of its offset-0 mapping
syms = []
base = min(a for a, b, p, off, n in maps if n == binary and off == 0)
out = subprocess.run(["nm", "-C", "--defined-only", binary], capture_output=True, text=True).stdout
for l in out.splitlines():
    p = l.split(" ", 2)
    if len(p) == 3 and p[1] in "tTdDrRbBvVwW":
        syms.append((base + int(p[0], 16), p[2]))
syms.sort(); saddr = [s[0] for s in syms]
def sym(v):
    i = bisect.bisect_right(saddr, v) - 1
    if i < 0 or v - syms[i][0] > 4096: return None
    return syms[i][1]
mem = open("/proc/%d/mem" % pid, "rb"); pm = open("/proc/%d/pagemap" % pid, "rb")
def read(a, n): mem.seek(a); return mem.read(n)
def present(a, n):
    pm.seek((a >> 12) * 8); d = pm.read((n >> 12) * 8)
    return [(struct.unpack_from("<Q", d, i * 8)[0] >> 63) & 1 for i in range(n >> 12)]
def walk(start, end, label):
    pres = present(start, end - start); data = read(start, end - start)
    page_chunks = collections.defaultdict(list)
    c = 0; inuse_bytes = free_bytes = nchunks = 0
    chunks = []
    while c + 16 <= len(data):
        size = struct.unpack_from("<Q", data, c + 8)[0] & ~7
        if size == 0 or c + size > len(data): break
        chunks.append((c, size)); c += size
    stats = collections.Counter(); pinned_by = collections.Counter(); examples = {}
    for i, (c, size) in enumerate(chunks):
        nxt = chunks[i + 1][0] if i + 1 < len(chunks) else None
        inuse = nxt is not None and (struct.unpack_from("<Q", data, nxt + 8)[0] & 1)
        if not inuse:
            free_bytes += size; continue
        inuse_bytes += size
        s = None
        for k in range(4):
            if c + 24 + 8 * k > len(data) or 8 * k + 16 > size: break
            w = struct.unpack_from("<Q", data, c + 16 + 8 * k)[0]
            s = sym(w)
            if s: s = "w%d %s" % (k, s); break
        key = (size, s or "-")
        stats[key] += 1
        # pages touched by the user part of the chunk (header included: glibc writes it)
        for p in range(c >> 12, (c + size - 1 >> 12) + 1):
            page_chunks[p].append(key)
    res = sum(pres); pinned = 0; only = collections.Counter(); kinds = collections.Counter()
    for p, on in enumerate(pres):
        if not on: continue
        ks = page_chunks.get(p)
        if not ks: continue
        pinned += 1
        big = max(ks, key=lambda k: k[0])
        kinds[big] += 1
        if len(ks) == 1: only[ks[0]] += 1
    print("%s: %.1f MiB mapped, %.1f MiB resident, %d chunks, in use %.1f MiB, free %.1f MiB; "
          "%d resident pages hold an in-use chunk (%.1f MiB), %d none" % (
        label, len(data) / 2**20, res * 4096 / 2**20, len(chunks), inuse_bytes / 2**20,
        free_bytes / 2**20, pinned, pinned * 4 / 1024, res - pinned))
    print("  in-use chunks by (size, first-word symbol), top 25:")
    for (sz, s), n in stats.most_common(25):
        print("   %6d x %6d B  %s" % (n, sz, s[:110]))
    print("  resident pages whose only in-use chunk is (size, symbol), top 15:")
    for (sz, s), n in only.most_common(15):
        print("   %6d pages  %6d B  %s" % (n, sz, s[:110]))
for a, b, perm, off, name in maps:
    if name == "[heap]":
        walk(a, b, "main arena [heap]")
# thread arena heaps: anonymous rw mappings aligned to 64 MiB (HEAP_MAX_SIZE) with heap_info
for a, b, perm, off, name in maps:
    if name == "" and perm.startswith("rw") and a % (64 << 20) == 0:
        hdr = read(a, 32)
        ar, prev, size, mps = struct.unpack("<QQQQ", hdr)
        if size == 0 or size > (64 << 20): continue
        # first heap of an arena: malloc_state follows heap_info; find first chunk by scanning
        start = a + 32 + (2200 if ar == a + 32 else 0)
        # align to 16 bytes: chunk header begins so that user pointer is 16-aligned
        start = (start + 15) & ~15
        # search forward for a plausible chunk: size field at +8 with PREV_INUSE set
        for cand in range(start, start + 4096, 16):
            v = struct.unpack("<Q", read(cand + 8, 8))[0]
            if v & 1 and 32 <= (v & ~7) < (64 << 20):
                start = cand; break
        walk(start, a + size, "arena heap at %#x (arena %#x)" % (a, ar))
