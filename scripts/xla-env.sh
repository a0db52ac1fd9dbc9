#!/usr/bin/env bash
# Create .venv-xla (torch 2.9.0 + torch-xla 2.9.0 + the trainer's deps) for `make test-xla`.
# torch-xla's wheel does not pin torch but is ABI-bound to 2.9.0; pip pulls ~4 GB of CUDA wheels.
# Idempotent: a venv that already imports the pinned versions is left alone.
set -euo pipefail

VENV="${XLA_VENV:-.venv-xla}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION="2.9.0"
TRAINER_DEPS=(transformers h5py numpy tensorboard tqdm pytest)

check() {
  "$VENV/bin/python" - "$TORCH_VERSION" <<'PY' 2>/dev/null
import sys
import h5py, numpy, pytest, tensorboard, torch, torch_xla, tqdm, transformers  # noqa: F401
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert torch_xla.__version__.split("+")[0] == sys.argv[1], torch_xla.__version__
PY
}

if [ -x "$VENV/bin/python" ] && check; then
  echo "xla-env: $VENV ready (torch/torch-xla $TORCH_VERSION)"
  exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet \
  "torch==$TORCH_VERSION" "torch-xla==$TORCH_VERSION" "${TRAINER_DEPS[@]}"
check
echo "xla-env: $VENV built (torch/torch-xla $TORCH_VERSION)"
