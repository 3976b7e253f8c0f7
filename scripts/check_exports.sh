#!/bin/bash
# check_exports.sh HARKD API_LIST — harkd exports exactly the functions
# include/hark declares (API_LIST: the build's harkd.api, semicolon-
# separated): the version script holds, and every declared function exists.
set -eu
harkd=$1 api=$2
exported=$(nm -D --defined-only "$harkd" | awk '{print $3}' | sed 's/@.*//' | grep '^hark_' | sort)
declared=$(tr ';' '\n' < "$api" | grep . | sort)
if [ "$exported" != "$declared" ]; then
  echo "harkd's exported hark_ symbols differ from include/hark's API:" >&2
  diff <(echo "$declared") <(echo "$exported") >&2 || true
  exit 1
fi
# (Copies of a shared library's data, NAME@VERSION, are the linker's, not ours.)
# (malloc_conf: jemalloc's options, which the release build sets; src/harkd.c.)
others=$(nm -D --defined-only "$harkd" | awk '$2 ~ /[TD]/ && $3 !~ /@/ {print $3}' |
  grep -v -e '^hark_' -e '^malloc_conf$' || true)
if [ -n "$others" ]; then
  echo "harkd exports code that is not hark's API:" >&2
  echo "$others" >&2
  exit 1
fi
echo "harkd exports the $(echo "$declared" | wc -l) functions of include/hark, nothing else"
