#!/usr/bin/env bash
# format.sh — hark's C and C++ sources in the style of .clang-format.
#   scripts/format.sh           formats every tracked source in place
#   scripts/format.sh --check   lists the ones that differ; fails if any do
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp')
if [[ ${1:-} != --check ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" 2>/dev/null; then
    echo "format: $f differs from .clang-format (scripts/format.sh fixes it)"
    bad=1
  fi
done
exit $bad
