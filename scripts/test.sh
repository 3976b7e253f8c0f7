#!/usr/bin/env bash
# The whole test suite: installs what is missing, checks the C style
# (.clang-format), builds twice (release, and ASan+UBSan), and runs every
# unit, fuzz-replay and end-to-end test on both; then 3 minutes of mixed
# load and faulty clients on the ASan build (bench/soak.sh), the threaded
# unit tests under ThreadSanitizer (scripts/tsan.sh) and every parser under
# libFuzzer for a bounded time (scripts/fuzz.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/format.sh" --check
"$root/scripts/build.sh" "$root/build"
"$root/scripts/build.sh" "$root/build-asan" -DHARK_SANITIZE=ON
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}
status=0
for dir in build build-asan; do
  echo "== ctest in $dir"
  (cd "$root/$dir" && ctest --output-on-failure -j2 --timeout 600) || status=1
done
echo "== soak: 3 minutes of mixed load on the ASan build (bench/soak.sh)"
DURATION=180 BUILD_DIR="$root/build-asan" "$root/bench/soak.sh" || status=1
echo "== ThreadSanitizer: the unit tests that drive threads (scripts/tsan.sh)"
"$root/scripts/tsan.sh" || status=1
echo "== fuzzing every parser for ${FUZZ_SECONDS:-30} s (scripts/fuzz.sh)"
"$root/scripts/fuzz.sh" || status=1
exit $status
