"""Pure: the Volcano job's networkTopology for spec.scheduling.placement (TorchX cannot set it).

EKS labels each node with its EC2 network position, `topology.k8s.aws/network-node-layer-1`
(the top of the hierarchy) to `-3` (the bottom, the network node the instance connects to; AWS,
"Place distributed AI/ML workloads with network topology labels"). Volcano places a gang by
HyperNode tiers, tier 1 the tightest. Its label discovery (vc-controller-manager, v1.16,
pkg/controllers/hypernode/discovery/label/label.go) reads a list of node labels from the top
down to `kubernetes.io/hostname` and numbers tiers from the bottom: the label just above the
hostname is tier 1. The list the chart renders (DISCOVERY_LABELS) therefore makes layer 3 tier 1,
layer 2 tier 2 and layer 1 tier 3: `volcano_tier` is that mapping, in this one place.
"""

from __future__ import annotations

from typing import Any

from trainium_operator.api.spec import PLACEMENT_REQUIRED, Placement, TrainiumJobSpec

Json = dict[str, Any]

#: EKS's network-node layers on every Trainium type (EC2 describes three network nodes for each).
LAYERS = 3
HOSTNAME_LABEL = "kubernetes.io/hostname"


def layer_label(layer: int) -> str:
    """The node label EKS sets for one network-node layer (1: top, 3: next to the instance)."""
    return f"topology.k8s.aws/network-node-layer-{layer}"


#: The label discovery's nodeLabel list, top down (the chart renders exactly this; a chart test
#: pins it): HyperNode tier t holds the nodes sharing layer LAYERS + 1 - t.
DISCOVERY_LABELS = (*(layer_label(n) for n in range(1, LAYERS + 1)), HOSTNAME_LABEL)


def volcano_tier(layer: int) -> int:
    """The HyperNode tier label discovery gives the network nodes of one EKS layer."""
    if not 1 <= layer <= LAYERS:
        raise ValueError(f"network-node layer {layer}: EKS labels layers 1-{LAYERS}")
    return LAYERS + 1 - layer


def network_topology(placement: Placement | None) -> Json | None:
    """Volcano's JobSpec.networkTopology: hard up to the layer's tier, or soft (None: unset).

    Volcano 1.16 turns a soft job into a hard one bounded by the whole cluster
    (framework/session.go, convertSoftToHardTopology): no tier bound is given for it.
    """
    if placement is None:
        return None
    if placement.mode != PLACEMENT_REQUIRED:
        return {"mode": "soft"}
    assert placement.networkNodeLayer is not None  # the CRD requires it with Required
    return {"mode": "hard", "highestTierAllowed": volcano_tier(placement.networkNodeLayer)}


def job_fields(spec: TrainiumJobSpec) -> Json:
    """What the Volcano job spec of either gang gets for the placement ({} without one)."""
    topology = network_topology(spec.scheduling.placement)
    return {} if topology is None else {"networkTopology": topology}
