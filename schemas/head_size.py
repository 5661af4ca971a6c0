"""The head VM a run needs: the smallest on-demand CPU type whose RAM holds the syncer (schemas/syncer_memory.py) with a
margin, plus the rest of the head (OS, nats-server, the tape writer, the other services). The planner plans it,
`yeto shape` shows it and `yeto launch` rents it, or refuses before renting anything when no type is large enough."""
from __future__ import annotations

import math
from dataclasses import dataclass

from yeto.schemas.recipe import SyncConfig
from yeto.schemas.syncer_memory import SyncerMemory, syncer_memory

LORA_FRACTION = 0.02      # LoRA adapters on every linear layer hold ~0.5-2.5% of a model's parameters at ranks 16-64
REST_GB = 4.0             # the head besides the syncer: OS, nats-server and its JetStream cache, tape writer, services
MARGIN = 0.25             # on top of the syncer's model (its max relative error measured is under 0.1: benchmarks/memory.py)


REST_VCPUS = 2            # the head's vCPUs besides the syncer's kernel threads: nats-server, tape writer, services


@dataclass(frozen=True)
class HeadVM:
    name: str             # a type SkyPilot rents with `memory=<gb>+` (AWS names, on-demand us-east-1 prices)
    memory_gb: int
    price_per_hour: float
    vcpus: int = 0        # 0: not known (a --head-memory-gb head): not checked against the rounds' cores


HEAD_VMS = (HeadVM("m6i.xlarge", 16, 0.192, 4), HeadVM("m6i.2xlarge", 32, 0.384, 8), HeadVM("r6i.2xlarge", 64, 0.504, 8),
            HeadVM("r6i.4xlarge", 128, 1.008, 16), HeadVM("r6i.8xlarge", 256, 2.016, 32),
            HeadVM("r6i.16xlarge", 512, 4.032, 64))


@dataclass(frozen=True)
class HeadChoice:
    vm: HeadVM
    need_gb: float        # RAM the head needs: the syncer with its margin, and the rest
    syncer: SyncerMemory

    def price(self, given: float) -> float:
        """$/hr for spend: --head-price (`given`) prices the smallest head; a larger one costs at least its type's."""
        return given if self.vm.memory_gb <= HEAD_VMS[0].memory_gb else max(given, self.vm.price_per_hour)

    def describe(self) -> str:
        return (f"head {self.vm.name} ({self.vm.memory_gb} GB, ${self.vm.price_per_hour:.3f}/hr): needs {self.need_gb:.1f} GB, "
                f"the syncer {self.syncer.describe()} + {MARGIN:.0%} + {REST_GB:g} GB for the rest")


class HeadTooSmall(ValueError):
    """No head type holds the syncer; the message says the numbers and what to do."""


def trainable_of(weights_gb: float, tuning: str) -> int:
    """Trainable values of a model of `weights_gb` bf16 GB: all of them in full tuning, ~2% with LoRA."""
    return int(weights_gb * 1e9 / 2 * (1.0 if tuning == "full" else LORA_FRACTION))


def choose_head(trainable: int, *, num_learners: int, sync: SyncConfig | None = None, num_syncers: int = 1,
                memory_gb: int | None = None, cores: int = 0) -> HeadChoice:
    """The smallest head type holding the syncer and, past REST_VCPUS, the `cores` kernel threads its rounds need
    (schemas/head_throughput.size_head), or a head of `memory_gb` (--head-memory-gb: any VM with that much RAM, priced
    per GB as the largest type); HeadTooSmall with the numbers when the syncer does not fit in RAM. A round that
    needs more cores than the largest type has takes the largest: the plan says so (the rounds' sentence)."""
    syncer = syncer_memory(trainable, num_learners=num_learners, config=sync or SyncConfig(), num_syncers=num_syncers)
    need = syncer.head * (1 + MARGIN) / 1e9 + REST_GB
    largest = HEAD_VMS[-1]
    vms = HEAD_VMS if memory_gb is None else (HeadVM(f"{memory_gb} GB+", memory_gb,
                                                      round(largest.price_per_hour * memory_gb / largest.memory_gb, 3)),)
    holding = [vm for vm in vms if vm.memory_gb >= need]
    for vm in holding:
        if not vm.vcpus or vm.vcpus >= cores + REST_VCPUS:
            return HeadChoice(vm, need, syncer)
    if holding:
        return HeadChoice(holding[-1], need, syncer)
    raise HeadTooSmall(
        f"the syncer of {trainable / 1e6:,.0f}M trainable values with {num_learners} learners needs "
        f"{syncer.describe()}; with a {MARGIN:.0%} margin and {REST_GB:g} GB for the rest the head needs "
        f"{math.ceil(need)} GB, more than the {vms[-1].memory_gb} GB of {vms[-1].name}. Name a larger head "
        f"(--head-memory-gb {2 ** math.ceil(math.log2(need))}), train fewer values (--tuning lora, a smaller --lora-r) "
        f"or use fewer islands; --syncers N splits the syncer over N processes "
        f"({math.ceil(syncer.process * (1 + MARGIN) / 1e9)} GB each now) on the same head, not its total")


MAX_HEAD_NODES = 5       # JetStream keeps at most 5 copies of a stream


def check_head_nodes(num_nodes: int) -> None:
    """`--head-nodes`: 1 (one VM; mirror mode covers its loss with a window) or 3 to 5 VMs (a NATS cluster, streams on
    every node: one VM's loss loses nothing); ValueError with the reason otherwise."""
    if num_nodes == 2:
        raise ValueError("--head-nodes 2: a head over several VMs outlives the loss of one only with a Raft majority "
                         "left, which needs 3 nodes; use 3 (or 1)")
    if not 1 <= num_nodes <= MAX_HEAD_NODES:
        raise ValueError(f"--head-nodes {num_nodes}: use 1, or 3 to {MAX_HEAD_NODES} (JetStream keeps at most "
                         f"{MAX_HEAD_NODES} copies of a stream, so more nodes would hold no more of it)")


def head_nodes_line(num_nodes: int, price_per_hour: float) -> str:
    """What a head of `num_nodes` VMs buys and costs (yeto launch --dry-run and the launch's plan print it)."""
    if num_nodes == 1:
        return (f"head: 1 VM at ${price_per_hour:.2f}/hr; its loss stops the run until `yeto recover` rents another "
                f"from the mirror (with --output), losing what it acknowledged after the last mirror (10 s at most, "
                f"docs/CLOUD.md section 10); --head-nodes 3 for none")
    extra = (num_nodes - 1) * price_per_hour
    return (f"head: {num_nodes} VMs at ${price_per_hour:.2f}/hr each, ${num_nodes * price_per_hour:.2f}/hr "
            f"(+${extra:.2f}/hr for the other {num_nodes - 1}); losing any one loses no acknowledged event, and "
            f"rounds merge on (a standby syncer takes over the lost VM's shard within seconds: docs/CLUSTER.md)")
