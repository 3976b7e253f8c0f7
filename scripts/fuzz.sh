#!/usr/bin/env bash
# Fuzzes every parser for a bounded time: builds tests/fuzz/fuzz_*.c as
# libFuzzer binaries (clang, ASan+UBSan) in build-fuzz and runs each for
# FUZZ_SECONDS (default 30) from a scratch copy of its seed corpus. A crash
# (or leak, or timeout) fails the run and its input is written into
# tests/fuzz/corpus/<target>/ as crash-*: commit it with the fix, and every
# build replays it from then on (ctest fuzz/<target>).
# Usage: scripts/fuzz.sh [TARGET...]   Env: FUZZ_SECONDS, FUZZ_BUILD.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${FUZZ_BUILD:-$root/build-fuzz}
secs=${FUZZ_SECONDS:-30}
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in "$root"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
CC=clang cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHARK_FUZZ=ON \
  -DHARK_SANITIZE=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "$root/tests/fuzz/corpus/$t/." "$work/" 2>/dev/null || true
  log=$work.log
  if "$dir/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$root/tests/fuzz/corpus/$t/crash-" "$work" >"$log" 2>&1; then
    echo "fuzz $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${secs} s, no crash"
  else
    status=1
    echo "fuzz $t: FAILED; the input is under tests/fuzz/corpus/$t/ (crash-*):"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -20
  fi
  rm -rf "$work" "$log"
done
exit $status
