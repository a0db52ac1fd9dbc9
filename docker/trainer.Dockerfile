# The trainer image the operator launches: `python -m torch.distributed.run ... -m trainium_trainer`.
# Build from the repository root: docker build -f docker/trainer.Dockerfile -t trainium-trainer .
# The PyTorch/XLA image (`backend: xla`: trn1, and trn2/trn3 jobs that ask for xla); the native
# image for trn2/trn3 is docker/trainer-native.Dockerfile.
#
# Base: AWS's Neuron PyTorch training DLC, pinned to one SDK release. It brings what AWS's
# tutorial image installed by hand, at versions AWS tested together: torch-neuronx (torch 2.9 +
# torch-xla 2.9), neuronx-cc, the Neuron runtime and collectives, EFA/libfabric and Python 3.12 on
# Ubuntu 24.04. SDK 2.29.1 is the newest release that trains on PyTorch/XLA: "Starting with Neuron
# Release 2.30.0, PyTorch/XLA is no longer supported for training workloads on Trainium"
# (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/announcements/neuron2.x/
# announce-no-support-pytorch-xla-training.html). It carries 2.27's fix that calls
# PJRT_Client_Destroy, so a process that exits (our SIGTERM restarts) releases the Neuron Runtime's
# resources instead of leaking them ("832 object(s) leaked, improper teardown"; Neuron 2.27.0
# PyTorch release notes). Tag from AWS's list of DLCs (github.com/aws-neuron/deep-learning-containers
# README, pytorch-training-neuronx). Never `latest`: the Neuron compile cache is keyed on compiler
# versions, so an unpinned base silently invalidates every cached graph.
FROM public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04

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
# First, offline, that the base has the PyTorch/Neuron stack trainer-constraints.txt names (pip
# finds nothing to install with --no-index, so a base that differs fails here and changes nothing).
RUN python -m pip install --no-cache-dir --no-index --no-deps \
      --constraint /tmp/trainer-constraints.txt torch torch-xla torch-neuronx neuronx-cc libneuronxla \
    && python -m pip freeze --exclude-editable | grep -v ' @ ' > /tmp/dlc-freeze.txt \
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
