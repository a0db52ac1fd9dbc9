#!/usr/bin/env bash
# Create .venv-xla (torch 2.9.0 + torch-xla 2.9.0 + the trainer's deps) for `make test-xla`.
# torch-xla's wheel does not pin torch but is ABI-bound to 2.9.0; pip pulls ~4 GB of CUDA wheels.
# The trainer's other deps come from pyproject's [trainer] extra (one source for their ranges).
# Idempotent: a venv that already satisfies the pinned versions and the extra is left alone.
set -euo pipefail

VENV="${XLA_VENV:-.venv-xla}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION="2.9.0"

# The [trainer] requirements except torch (torch-xla fixes it), one per line.
mapfile -t TRAINER_DEPS < <("$PYTHON" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["trainer"]
print("\n".join(r for r in extra if not r.replace(" ", "").startswith("torch>")))
PY
)

check() {
  "$VENV/bin/python" - "$TORCH_VERSION" "${TRAINER_DEPS[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
import h5py, numpy, pytest, tensorboard, torch, torch_xla, transformers  # noqa: F401
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert torch_xla.__version__.split("+")[0] == sys.argv[1], torch_xla.__version__
for line in sys.argv[2:]:
    req = Requirement(line)
    assert req.specifier.contains(version(req.name), prereleases=True), (line, version(req.name))
PY
}

if [ -x "$VENV/bin/python" ] && check; then
  echo "xla-env: $VENV ready (torch/torch-xla $TORCH_VERSION)"
  exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet \
  "torch==$TORCH_VERSION" "torch-xla==$TORCH_VERSION" "${TRAINER_DEPS[@]}" pytest packaging
check
echo "xla-env: $VENV built (torch/torch-xla $TORCH_VERSION)"
