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

# Keep the DLC's Neuron builds of torch/torch-xla: pin them to what is installed, so resolving
# the [trainer] extra can never swap in a CUDA torch from PyPI (it would fail loudly instead).
RUN python -m pip freeze \
      | grep -iE '^(torch|torch-neuronx|torch-xla|torchvision|neuronx-cc|libneuronxla)==' \
      > /tmp/neuron-pins.txt \
    && python -m pip install --no-cache-dir --constraint /tmp/neuron-pins.txt '.[trainer]' \
    && python -c "import trainium_trainer.device, torch_xla" \
    && rm /tmp/neuron-pins.txt

# Root, like AWS's DLCs: the Neuron device files and EFA's locked memory (RLIMIT_MEMLOCK) are
# root-only on stock EKS nodes. No ENTRYPOINT: the operator passes the full torchrun argv.
WORKDIR /workspace
