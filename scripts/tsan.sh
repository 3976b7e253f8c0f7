#!/usr/bin/env bash
# Builds hark with ThreadSanitizer (build-tsan) and runs the unit tests
# that drive threads: the schedulers, queues, the worker pool, speech
# sessions and the pocketsphinx pool. A data race fails the run.
# test_ps_stream runs too, unless TSAN_FAST=1 (it takes minutes here).
# The end-to-end tests are not run under TSan: their Python clients time
# out against a harkd ten times slower, and the sanitizer's report would
# go to harkd's log, which the ASan build already checks for leaks and
# memory errors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TSAN_BUILD:-$root/build-tsan}
"$root/scripts/build.sh" "$dir" -DHARK_TSAN=ON >/dev/null
# cmocka runs each test behind signal handlers, which TSan would report.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:report_signal_unsafe=0}
exclude="^$"
[[ ${TSAN_FAST:-0} == 1 ]] && exclude="ps_stream"
cd "$dir" && ctest --output-on-failure -j2 --timeout 900 -R '^unit/' -E "$exclude"
