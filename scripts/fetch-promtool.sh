#!/usr/bin/env bash
# Fetch promtool (for `promtool test rules` and `promtool check rules`) into a git-ignored tools
# folder, from Debian's prometheus package: `apt-get download` + `dpkg -x`, so nothing is
# installed system-wide and nothing needs root at run time. Only when the package index is empty
# (a fresh machine) and we are root does it run `apt-get update` first.
# Idempotent: does nothing when $DEST/promtool already runs.
set -euo pipefail
DEST=${1:-.tools/bin}
if [[ -x "$DEST/promtool" ]] && "$DEST/promtool" --version >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$DEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
download() { (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); }
if ! download; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "fetch-promtool.sh: 'apt-get download prometheus' failed; run 'sudo apt-get update'" >&2
    exit 1
  fi
  apt-get update -qq >/dev/null
  download
fi
dpkg -x "$tmp"/prometheus_*.deb "$tmp/root"
install -m 0755 "$tmp/root/usr/bin/promtool" "$DEST/promtool.part"
mv "$DEST/promtool.part" "$DEST/promtool"  # never a half-written binary after an interruption
"$DEST/promtool" --version | head -1
