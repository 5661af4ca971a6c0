"""The planner's input, as a keyword-only frozen value that round-trips through the PlanFleet command's dict."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from yeto.schemas.head_size import check_head_nodes
from yeto.schemas.recipe import SyncConfig
from yeto.services.planner.expert_memory import moe_split


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    model: str
    """alias, Hugging Face id or local path (only its size matters to the planner)."""
    weights_gb: float | None = None
    """bf16 footprint of the model in GB; None: taken from the alias table."""
    budget: float | None = None
    """$/hr for the whole run: islands (with margin) plus the head."""
    flops: float | None = None
    """effective TFLOPs to reach at least cost (budget then only caps the cost)."""
    tuning: str = "lora"
    """lora or full."""
    base_quantization: str = "none"
    """none or nf4 (QLoRA)."""
    seq_len: int = 4096
    """tokens per sequence."""
    micro_batch: int = 1
    """sequences per GPU per step."""
    clouds: tuple[str, ...] = ()
    """clouds allowed (empty: all in the catalog)."""
    regions: tuple[str, ...] = ()
    """regions allowed (empty: all)."""
    exclude_regions: tuple[str, ...] = ()
    """regions denied."""
    max_islands: int = 16
    """most islands in the fleet."""
    max_nodes: int = 8
    """most nodes per island when the model needs several."""
    spot: bool = True
    """rent spot capacity where the cloud sells it (on-demand otherwise)."""
    price_margin: float = 0.10
    """fraction added to catalog prices: spot prices move and catalogs go stale."""
    head_price: float = 0.19
    """$/hr of the on-demand head VM (4 vCPU / 16 GB, e.g. m6i.xlarge in us-east-1); a larger head the syncer needs
    is priced from schemas/head_size.py's table."""
    num_syncers: int = 1
    """syncer processes on the head (--syncers): the fragments are split over them."""
    inner_steps: int | None = None
    """H, inner steps between two pushes of a fragment (`yeto launch --sync-every`); None: the default (SyncConfig's),
    which the planner raises where no head keeps up with the fleet's rounds at it (a given H it refuses instead)."""
    codec_up: str | None = None
    """the learners' push codec (`--codec-up`, or `--codec`); None: the default (SyncConfig's q4). The head's rounds are
    sized for it (schemas/head_throughput.py: each codec its own take-in and encode rates)."""
    codec_down: str | None = None
    """the broadcast deltas' codec (`--codec-down`, or `--codec`); None: the default."""
    num_fragments: int | None = None
    """fragments of the model (`--fragments`); None: the default (SyncConfig's)."""
    head_memory_gb: int | None = None
    """RAM of the head VM (--head-memory-gb); None: the smallest head type that holds the syncer."""
    head_nodes: int = 1
    """VMs of the head (--head-nodes): 1, or 3 to 5 of the head type each (a NATS cluster, docs/CLUSTER.md)."""
    data: str | None = None
    """--data for the printed launch line."""
    time_limit_s: float = 10.0
    """CP-SAT time limit per phase; past it the plan reports its optimality gap."""
    moe: dict[str, Any] | None = None
    """config.json of a Mixtral-style MoE trained with expert parallelism (`--island-backend megatron`): each GPU of
    an island is an EP rank, sized by expert_memory.py; None: the dense memory model (FSDP over the island)."""

    def __post_init__(self) -> None:
        if self.budget is None and self.flops is None:
            raise ValueError("give --budget-per-hour ($/hr) and/or --flops (TFLOPs) so the planner knows what to optimise")
        if self.budget is not None and self.budget <= 0 or self.flops is not None and self.flops <= 0:
            raise ValueError("--budget-per-hour and --flops must be positive")
        if self.max_islands < 1 or self.max_nodes < 1 or self.price_margin < 0:
            raise ValueError("--max-islands must be at least 1 and the price margin not negative")
        if self.inner_steps is not None and self.inner_steps < 1:
            raise ValueError("--sync-every must be at least 1")
        if self.num_fragments is not None and self.num_fragments < 1:
            raise ValueError("--fragments must be at least 1")
        for flag, name in (("--codec-up", self.codec_up), ("--codec-down", self.codec_down)):
            if name is not None:
                from yeto.schemas import codecs
                try:
                    codecs.codec(name)
                except ValueError as e:
                    raise ValueError(f"{flag}: {e}") from None
        if self.num_syncers < 1 or self.head_memory_gb is not None and self.head_memory_gb < 1:
            raise ValueError("--syncers and --head-memory-gb must be at least 1")
        check_head_nodes(self.head_nodes)
        if self.moe is not None and (self.tuning, self.base_quantization) != ("full", "none"):
            raise ValueError("expert-parallel islands (--island-backend megatron) train every tensor: plan them with "
                             "--tuning full and --base-quantization none")
        if self.moe is not None:
            moe_split(self.moe)     # a config that is not a Mixtral-style MoE is refused here, naming the key

    def sync(self, inner_steps: int) -> SyncConfig:
        """The sync settings the head's rounds are sized for: the request's codecs and fragments at H `inner_steps`."""
        default = SyncConfig()
        return SyncConfig(inner_steps=inner_steps, codec_up=self.codec_up or default.codec_up,
                          codec_down=self.codec_down or default.codec_down,
                          num_fragments=self.num_fragments if self.num_fragments is not None else default.num_fragments)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanRequest:
        names = {f.name for f in fields(cls)}   # tolerant reader: fields a newer sender added are ignored
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        return cls(**values)
