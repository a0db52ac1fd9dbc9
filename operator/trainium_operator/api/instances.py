"""The one table of Trainium instance types: Neuron devices, NeuronCores, EFA interfaces, price.

The CRD's enum and its nprocPerNode rule repeat these facts (CEL cannot import Python); a drift
test pins them to this table.
"""

from __future__ import annotations

from dataclasses import dataclass

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class InstanceType:
    """Accelerator and network facts of one EC2 Trainium instance type."""

    name: str
    neuron_devices: int
    neuron_cores: int
    efa_interfaces: int
    #: Default on-demand price (USD per instance-hour) for cost estimates; None: no default, the
    #: cost shows as unknown until the chart's `prices` sets one (trainium_operator.domain.cost).
    usd_per_hour: float | None = None


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType(
            "trn1.2xlarge", neuron_devices=1, neuron_cores=2, efa_interfaces=0, usd_per_hour=1.34
        ),
        InstanceType(
            "trn1.32xlarge",
            neuron_devices=16,
            neuron_cores=32,
            efa_interfaces=8,
            usd_per_hour=21.50,
        ),
        InstanceType(
            "trn1n.32xlarge",
            neuron_devices=16,
            neuron_cores=32,
            efa_interfaces=16,
            usd_per_hour=24.78,
        ),
        # NeuronCores at the default logical NeuronCore config (LNC=2): 64 per instance.
        InstanceType("trn2.48xlarge", neuron_devices=16, neuron_cores=64, efa_interfaces=16),
    )
}


def instance_type(name: str) -> InstanceType:
    """Look up an instance type, with an error naming the supported ones."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(INSTANCE_TYPES)
        raise ValueError(f"unknown instance type {name!r} (supported: {known})") from None
