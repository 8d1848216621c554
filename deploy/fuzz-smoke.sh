#!/usr/bin/env bash
# Builds every fuzz/<target>_fuzz.cpp as a libFuzzer binary (GCC trace-pc edge coverage
# fed to libFuzzer's driver through fuzz/gcc_coverage_shim.cpp, ASan + UBSan) and runs each
# for a bounded time on a copy of its seed corpus.
# Usage: deploy/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20; JOBS=n sets build jobs)
# Exits non-zero if the build fails or any target crashes, aborts, leaks, times out, runs
# out of memory or reports no coverage; the failing target's log tail is printed and its
# crash input is kept under build-fuzz/fuzz-smoke/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON -DSLUICE_TESTS=OFF -DSLUICE_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only the fuzz binaries and what they link, not "all" (see fuzz/CMakeLists.txt).
cmake --build build-fuzz -j"${JOBS:-2}" --target sluice_fuzzers

out=build-fuzz/fuzz-smoke
rm -rf "$out"
mkdir -p "$out"
failed=()
for bin in build-fuzz/fuzz/*_fuzz; do
  name=$(basename "$bin" _fuzz)
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  log="$out/$name.log"
  echo "fuzz: $name for ${secs}s"
  rc=0
  # The outer timeout only catches a wedged process; libFuzzer's own -timeout reports a
  # slow input as a failure.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    timeout --kill-after=10 $((secs * 3 + 120)) \
    "$bin" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=0 \
    -artifact_prefix="$out/$name-" "$work" >"$log" 2>&1 || rc=$?
  rm -rf "$work"
  grep -E 'INFO: Loaded [0-9]+ modules|INITED|DONE' "$log" | sed 's/^/  /' || true
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: $name exited with status $rc (full log: $log)"
    tail -n 60 "$log" | sed 's/^/  | /'
    failed+=("$name")
  elif ! grep -qE 'INITED cov: [1-9]' "$log"; then
    echo "FAIL: $name reported no coverage (full log: $log)"
    tail -n 20 "$log" | sed 's/^/  | /'
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz smoke FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz smoke passed (${secs}s per target)"
