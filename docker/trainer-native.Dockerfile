# The native trainer image (TorchNeuron) the operator launches for `backend: native` jobs (trn2,
# trn3): `python -m torch.distributed.run ... -m trainium_trainer` on the `neuron` device, with
# torch.compile(backend="neuron") and DDP over the `neuron` process group.
# Build from the repository root:
#   docker build -f docker/trainer-native.Dockerfile -t trainium-trainer-native .
#
# Base: AWS publishes no container with TorchNeuron for PyTorch 2.13. Neuron 2.33.0's one
# TorchNeuron DLC is for torch-neuronx 2.14 with TorchTitan ("Install PyTorch via Deep Learning
# Container", https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/dlc.html),
# and the trainer is tested on torch 2.13 (`make install`). So this image follows AWS's manual
# setup on Ubuntu 26.04 ("Quickstart: Install and verify torch-neuronx", https://
# awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/torch/get-started/quickstart-torch-neuron.html:
# "The standalone wheels in this release support Ubuntu 26.04 only"): the Neuron apt repository for
# the runtime and collectives, then torch 2.13.0 (CPU wheel) and torch-neuronx 2.13.3.0.* from AWS's
# pip index, at the versions of docker/trainer-native-constraints.txt. Ubuntu comes from the same
# public ECR mirror AWS's DLCs start FROM. Every Neuron version is pinned: the NEFF cache is keyed on
# compiler and runtime versions, so a moving base silently invalidates every cached graph.
# Not here yet: EFA's userspace (libfabric) for multi-node collectives, which AWS's DLCs add with
# the EFA installer; until it is pinned here, use this image on one node.
FROM public.ecr.aws/docker/library/ubuntu:26.04

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ARG DEBIAN_FRONTEND=noninteractive
# Neuron 2.33.0's runtime and collectives (the release artifacts page above); apt matches any build.
ARG NEURON_RUNTIME_VERSION=2.35.30.0*
ARG NEURON_COLLECTIVES_VERSION=2.35.43.0*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    PATH=/opt/venv/bin:/opt/aws/neuron/bin:$PATH \
    LD_LIBRARY_PATH=/opt/aws/neuron/lib

# The OS packages are the pinned Ubuntu release's own; the Neuron ones are pinned above. A C++
# compiler, because torch.compile may build host-side kernels.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gnupg g++ python3 python3-venv \
    && curl -fsSL https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \
      | gpg --dearmor --yes -o /usr/share/keyrings/neuron-archive-keyring.gpg \
    && . /etc/os-release \
    && echo "deb [signed-by=/usr/share/keyrings/neuron-archive-keyring.gpg] https://apt.repos.neuron.amazonaws.com ${VERSION_CODENAME} main" \
      > /etc/apt/sources.list.d/neuron.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
      "aws-neuronx-runtime-lib=${NEURON_RUNTIME_VERSION}" \
      "aws-neuronx-collectives=${NEURON_COLLECTIVES_VERSION}" \
    && rm -rf /var/lib/apt/lists/*

# The PyTorch/Neuron stack in a virtualenv (Ubuntu's Python is externally managed): exactly
# trainer-native-constraints.txt, from AWS's pip index, PyTorch's CPU index (no CUDA wheels) and PyPI.
WORKDIR /src
COPY docker/trainer-native-constraints.txt /tmp/trainer-native-constraints.txt
RUN python3 -m venv /opt/venv \
    && python -m pip install --no-cache-dir \
      --extra-index-url https://pip.repos.neuron.amazonaws.com \
      --extra-index-url https://download.pytorch.org/whl/cpu \
      --requirement /tmp/trainer-native-constraints.txt

# Only what the wheel is built from (hatchling packs operator/ and trainer/ and the CRD).
COPY pyproject.toml README.md ./
COPY crds/ crds/
COPY operator/ operator/
COPY trainer/ trainer/

# Only the trainer: the package itself without dependencies (the operator's kopf, kubernetes,
# torchx, boto3 stay out), then the [trainer] extra read from pyproject.toml, constrained by
# everything installed above (its pip freeze) and by trainer-native-constraints.txt, so it never
# moves torch or the Neuron stack. torch_neuronx is looked up, not imported: importing it registers
# the `neuron` device, which wants Neuron devices the build does not have.
RUN python -m pip freeze --exclude-editable | grep -v ' @ ' > /tmp/base-freeze.txt \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['trainer']))" \
      > /tmp/trainer-requirements.txt \
    && python -m pip install --no-cache-dir --no-deps . \
    && python -m pip install --no-cache-dir \
      --constraint /tmp/base-freeze.txt --constraint /tmp/trainer-native-constraints.txt \
      --requirement /tmp/trainer-requirements.txt \
    && python -c "import importlib.util as u, trainium_trainer.native, transformers; assert u.find_spec('torch_neuronx')" \
    && rm /tmp/base-freeze.txt /tmp/trainer-requirements.txt /tmp/trainer-native-constraints.txt

# Root, like AWS's DLCs: the Neuron device files and EFA's locked memory (RLIMIT_MEMLOCK) are
# root-only on stock EKS nodes. No ENTRYPOINT: the operator passes the full torchrun argv.
WORKDIR /workspace
