#!/usr/bin/env bash
# Builds every fuzz/<target>_fuzz.cpp as a libFuzzer binary (GCC coverage + libFuzzer
# runtime, ASan + UBSan) and runs each for a bounded time on its seed corpus.
# Usage: deploy/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON -DSLUICE_TESTS=OFF -DSLUICE_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2
for bin in build-fuzz/fuzz/*_fuzz; do
  name=$(basename "$bin" _fuzz)
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
    "$bin" -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=0 "$work" \
    2>&1 | tail -n 3
  rm -rf "$work"
done
