"""The one table of Trainium instance types: chips, NeuronCores, EFA, memory, LNC, backends, price.

The CRD's enum and its nprocPerNode, backend and lnc rules repeat these facts (CEL cannot import
Python); drift tests pin them to this table. Every number comes from AWS's pages, cited per family
below; where AWS publishes none, the field says so (None) instead of a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainium_trainer.contract import BACKEND_NATIVE as NATIVE
from trainium_trainer.contract import BACKEND_XLA as XLA

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: The Neuron runtime's LNC setting: "The NEURON_LOGICAL_NC_CONFIG runtime environment variable
#: controls how many physical NeuronCores are grouped to make up a logical NeuronCore" (AWS,
#: "Logical NeuronCore configuration", about-neuron/arch/neuron-features/
#: logical-neuroncore-config). The compiler must use the same LNC: the precompile stage gets it too.
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"


@dataclass(frozen=True)
class Family:
    """What one Trainium generation supports: LNC values and training backends, with defaults."""

    name: str
    chip: str
    core: str
    #: Physical NeuronCores per chip.
    cores_per_chip: int
    #: Device (HBM) memory per chip, GiB.
    chip_memory_gib: int
    lncs: tuple[int, ...]
    default_lnc: int
    backends: tuple[str, ...]
    default_backend: str


# Trainium: "each Trainium include 2 x NeuronCore-v2", "32 GiB of device memory" (AWS Neuron,
# "Trainium Architecture", about-neuron/arch/neuron-hardware/trainium); "On trn1, only lnc=1 is
# supported" (AWS, compiler error code NCC_EARG001). TorchNeuron runs on Trn2 and Trn3 only.
TRN1 = Family("trn1", "Trainium", "NeuronCore-v2", 2, 32, (1,), 1, (XLA,), XLA)
# Trainium2: "Every Trainium2 chip contains eight NeuronCore-V3 cores", 96 GiB HBM (AWS Neuron,
# "Trainium2 Architecture"); "LNC can only be set to 1 or 2 ... On Trn2, each chip has 8 physical
# NeuronCores. With LNC=2 (default), these are grouped into 4 Logical NeuronCores ... LNC applies
# only to Trn2 and Trn3 instances" (AWS Neuron, "Logical NeuronCore configuration").
TRN2 = Family("trn2", "Trainium2", "NeuronCore-v3", 8, 96, (1, 2), 2, (XLA, NATIVE), NATIVE)
# Trainium3: "A Trainium3 device contains eight NeuronCore-v4 cores", "144 GiB of device memory";
# "Similar to Trainium2, AWS Neuron adds support for Logical NeuronCore Configuration" (AWS
# Neuron, "Trainium3 Architecture"). AWS publishes no separate Trn3 default LNC: Trainium2's (2).
TRN3 = Family("trn3", "Trainium3", "NeuronCore-v4", 8, 144, (1, 2), 2, (XLA, NATIVE), NATIVE)


@dataclass(frozen=True)
class InstanceType:
    """Accelerator, network and memory facts of one EC2 Trainium instance type."""

    name: str
    family: Family
    #: Trainium chips (Neuron devices), what the device plugin's aws.amazon.com/neuron counts.
    neuron_devices: int
    #: EFA interfaces the pods request (vpc.amazonaws.com/efa); None: AWS publishes no count, the
    #: pods request none (README, "Which backend").
    efa_interfaces: int | None
    host_memory_gib: int
    #: Default on-demand price (USD per instance-hour) for cost estimates; None: no default, the
    #: cost shows as unknown until the chart's `prices` sets one (trainium_operator.domain.cost).
    usd_per_hour: float | None = None

    @property
    def physical_cores(self) -> int:
        """Physical NeuronCores of the instance."""
        return self.neuron_devices * self.family.cores_per_chip

    @property
    def device_memory_gib(self) -> int:
        """Device (HBM) memory of the instance, GiB."""
        return self.neuron_devices * self.family.chip_memory_gib

    def logical_cores(self, lnc: int | None = None) -> int:
        """NeuronCores the runtime exposes at this LNC (the family's default when None)."""
        return self.physical_cores // (lnc or self.family.default_lnc)

    @property
    def neuron_cores(self) -> int:
        """NeuronCores at the family's default LNC: one training process each by default."""
        return self.logical_cores()


def _type(name: str, family: Family, devices: int, efa: int | None, host_gib: int,
          usd: float | None = None) -> InstanceType:  # fmt: skip
    return InstanceType(name, family, devices, efa, host_gib, usd)


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        # AWS Neuron, "Amazon EC2 Trn1/Trn1n Architecture": 1/16/16 chips, 32/512/512 GiB host
        # memory; "trn1.32xlarge has 8 EFA devices, trn1n.32xlarge has 16 EFA devices" (AWS,
        # "How to prepare trn1.32xlarge for multi-node execution"); trn1.2xlarge has no EFA.
        _type("trn1.2xlarge", TRN1, 1, 0, 32, 1.34),
        _type("trn1.32xlarge", TRN1, 16, 8, 512, 21.50),
        _type("trn1n.32xlarge", TRN1, 16, 16, 512, 24.78),
        # AWS Neuron, "Amazon EC2 Trn2 Architecture": trn2.48xlarge and trn2u.48xlarge (four of
        # which make a Trn2 UltraServer) have 16 Trainium2 chips, 2,048 GiB host and 1,536 GiB
        # device memory, 3,200 Gbps of EFA. 16 EFA interfaces: AWS's EKS node-group template for
        # trn2.48xlarge and trn2u.48xlarge (aws-neuron/aws-neuron-eks-samples, dp_bert_hf_pretrain/
        # cfn/eks_trn2_ng_stack_al2023.yaml, named by "Using Neuron with Amazon EKS") attaches an
        # EFA interface on network cards 0-15. AWS's pages give no price.
        _type("trn2.48xlarge", TRN2, 16, 16, 2048),
        _type("trn2u.48xlarge", TRN2, 16, 16, 2048),
        # AWS Neuron, "Amazon EC2 Trn3 Architecture": a Trn3 Gen1 UltraServer is "four servers
        # with 16 Trainium3 devices per server", 8,192 GiB host memory and 12,800 Gbps EFA per
        # UltraServer (2,048 GiB and 3,200 Gbps per server). The type name of that server is
        # AWS's Neuron driver's (aws-neuron-driver v4 platform map: trn3.48xlarge); AWS publishes
        # no EFA interface count or price for it.
        _type("trn3.48xlarge", TRN3, 16, None, 2048),
    )
}


#: Types whose nodes EKS labels with topology.k8s.aws/network-node-layer-1..3 (spec.scheduling.
#: placement Required needs them): EC2 describes instance topology, three network nodes each,
#: for "trn1.2xlarge | trn1.32xlarge | trn1n.32xlarge | trn2.48xlarge | trn2u.48xlarge" (AWS,
#: "Prerequisites for Amazon EC2 topology", ec2-instance-topology-prerequisites), and EKS sets
#: the labels from it ("Place distributed AI/ML workloads with network topology labels",
#: ml-workload-topology). trn3.48xlarge is not listed. The CRD's placement rule repeats this.
NETWORK_TOPOLOGY_TYPES = frozenset(
    {"trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"}
)


def instance_type(name: str) -> InstanceType:
    """Look up an instance type, with an error naming the supported ones."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(INSTANCE_TYPES)
        raise ValueError(f"unknown instance type {name!r} (supported: {known})") from None
