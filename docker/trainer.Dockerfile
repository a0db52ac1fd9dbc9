# The trainer image the operator launches: `python -m torch.distributed.run ... -m trainium_trainer`.
# Build from the repository root: docker build -f docker/trainer.Dockerfile -t trainium-trainer .
#
# Base: AWS's Neuron PyTorch training DLC, pinned to one SDK release. It brings what AWS's
# tutorial image installed by hand, at versions AWS tested together: torch-neuronx (torch 2.8 +
# torch-xla 2.8), neuronx-cc, the Neuron runtime and collectives, EFA/libfabric and Python 3.11.
# Never `latest`: the Neuron compile cache is keyed on compiler versions, so an unpinned base
# silently invalidates every cached graph.
FROM public.ecr.aws/neuron/pytorch-training-neuronx:2.8.0-neuronx-py311-sdk2.26.1-ubuntu22.04

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1

# Only what the wheel is built from (hatchling packs operator/ and trainer/ and the CRD).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crds/ crds/
COPY operator/ operator/
COPY trainer/ trainer/
COPY docker/trainer-constraints.txt /tmp/trainer-constraints.txt

# Only the trainer: the package itself without dependencies (the operator's kopf, kubernetes,
# torchx, boto3 stay out), then the [trainer] extra read from pyproject.toml, constrained by
# everything the DLC has installed (its own pip freeze) and by trainer-constraints.txt. A
# requirement the DLC cannot meet fails the build instead of upgrading numpy, protobuf or torch.
RUN python -m pip freeze --exclude-editable | grep -v ' @ ' > /tmp/dlc-freeze.txt \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['trainer']))" \
      > /tmp/trainer-requirements.txt \
    && python -m pip install --no-cache-dir --no-deps . \
    && python -m pip install --no-cache-dir \
      --constraint /tmp/dlc-freeze.txt --constraint /tmp/trainer-constraints.txt \
      --requirement /tmp/trainer-requirements.txt \
    && python -c "import trainium_trainer.device, torch_xla, transformers" \
    && rm /tmp/dlc-freeze.txt /tmp/trainer-requirements.txt /tmp/trainer-constraints.txt

# Root, like AWS's DLCs: the Neuron device files and EFA's locked memory (RLIMIT_MEMLOCK) are
# root-only on stock EKS nodes. No ENTRYPOINT: the operator passes the full torchrun argv.
WORKDIR /workspace
