#!/usr/bin/env bash
# Installs the peer the neural recognition bench compares hark with:
# sherpa-onnx (k2-fsa) from npm, by package name and pinned version —
# sherpa-onnx-node (the JavaScript API) and sherpa-onnx-linux-x64 (its
# native addon with sherpa-onnx and ONNX Runtime inside) — cached outside
# git. Only bench/sherpa_vs_hark.sh uses it; no test depends on it.
# Idempotent; says clearly and exits 1 when the package is missing or of
# another version.
#
#   tools/sherpa/build.sh [CACHE_DIR]     (default /var/cache/hark/sherpa)
#
# CACHE_DIR/node/node_modules/ then holds both packages; `node -e
# "require('sherpa-onnx-node')"` works with NODE_PATH set to it.
# Nothing runs at install time but npm's unpacking (--ignore-scripts).
set -euo pipefail
dir=${1:-/var/cache/hark/sherpa}
SHERPA=1.13.8

say() { echo "sherpa: $*" >&2; }

if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
  sudo mkdir -p "$dir"
  sudo chown "$(id -u):$(id -g)" "$dir"
fi
umask 022
mkdir -p "$dir/node"
cd "$dir/node"

have() {
  node -e "const p=require('$1/package.json'); if (p.version !== '$SHERPA') {
    console.error(p.name + ' ' + p.version); process.exit(2) }" 2>/dev/null
}
if ! have sherpa-onnx-node || ! have sherpa-onnx-linux-x64; then
  say "npm install sherpa-onnx-node@$SHERPA sherpa-onnx-linux-x64@$SHERPA into $dir/node"
  [ -f package.json ] || echo '{"name":"hark-sherpa-bench","private":true}' >package.json
  if ! npm install --silent --no-audit --no-fund --ignore-scripts \
    "sherpa-onnx-node@$SHERPA" "sherpa-onnx-linux-x64@$SHERPA" >&2; then
    say "npm could not install sherpa-onnx-node@$SHERPA (no npm registry?)"
    exit 1
  fi
fi
for p in sherpa-onnx-node sherpa-onnx-linux-x64; do
  v=$(node -p "require('$p/package.json').version" 2>/dev/null || echo missing)
  if [ "$v" != "$SHERPA" ]; then
    say "$p in $dir/node is $v, not $SHERPA: remove $dir/node and run this again"
    exit 1
  fi
done
if ! node -e "const s=require('sherpa-onnx-node'); if (!s.OnlineRecognizer) process.exit(3)" >&2; then
  say "sherpa-onnx-node@$SHERPA is installed but does not load (its native addon?)"
  exit 1
fi
say "sherpa-onnx-node $SHERPA ready in $dir/node/node_modules"
echo "$dir/node/node_modules"
