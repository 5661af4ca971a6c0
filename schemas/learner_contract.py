"""The learner contract: the command line every learner backend takes, and the one registry of backends.

A learner is a process, `python -m yeto.learners.<backend> <flags>`, started by the launcher (a local process, a
SkyPilot job's `torchrun`) or by `yeto join`; each builds its flags from `LearnerArgs.to_argv()` and every backend
reads them with `LearnerArgs.parse`. It lives in the contract layer because the launcher (a service) may not import
the learners. A new backend is one folder, learners/<name>/ (its `__main__.py` hands a `Backend` to
learners/shell.py), and one line in `BACKENDS`.
"""
from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class BackendInfo:
    """One learner backend as the launcher, `yeto join` and the docs see it."""

    name: str
    """The folder under learners/ and the module the launcher starts (`python -m yeto.learners.<name>`)."""
    model_kind: str
    """The launch recipe's model_kind it trains: "lm" (causal LM) or "diffusion"."""
    summary: str
    """One line for --help: where it runs."""
    joinable: bool = True
    """Whether `yeto join --backend` offers it (a machine outside the fleet joining a run's external slot)."""
    forkable: bool = True
    """Whether the launcher's pre-imported learner (learners/torch/zygote.py) forks its CPU ranks: a learner that
    imports torch, transformers and peft as the torch learner does, and its own modules after the fork."""

    @property
    def module(self) -> str:
        return f"yeto.learners.{self.name}"


# The first backend of a model_kind is the one the launcher starts for it.
BACKENDS: dict[str, BackendInfo] = {b.name: b for b in (
    BackendInfo("torch", "lm", "PyTorch: CUDA, Ascend or CPU; several ranks as DDP replicas or FSDP2 shards"),
    BackendInfo("mlx", "lm", "MLX: Apple silicon's GPU; MLX's CPU backend elsewhere; one rank", forkable=False),
    BackendInfo("diffusion", "diffusion", "Diffusers LoRA on a text-to-image denoiser (PyTorch); one rank",
                joinable=False),
    BackendInfo("megatron", "lm", "Megatron-Core: a Mixtral-style MoE, its experts split over the island's ranks "
                "(expert parallelism; gloo on the CPU)", joinable=False),
)}


FORKED = frozenset(b.module for b in BACKENDS.values() if b.forkable)
"""The learner modules whose CPU ranks the zygote forks (learners/torch/zygote.py; the launcher's backends/zygote.py)."""


def backend(name: str) -> BackendInfo:
    """The registered backend `name`; ValueError naming the registered ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown learner backend {name!r}: choose from {', '.join(BACKENDS)}") from None


def backend_for(model_kind: str) -> BackendInfo:
    """The backend the launcher starts for a run of this model_kind."""
    for info in BACKENDS.values():
        if info.model_kind == model_kind:
            return info
    raise ValueError(f"no learner backend trains model_kind {model_kind!r}")


def _flag(help: str, **argparse_options: Any) -> dict[str, Any]:
    return {"help": help, **argparse_options}


@dataclass(frozen=True, kw_only=True)
class LearnerArgs:
    """A learner process's command line, field for flag (`run_id` is `--run-id`)."""

    run_id: str = field(metadata=_flag("the run"))
    learner: str = field(metadata=_flag("learner (island) id"))
    recipe: str = field(metadata=_flag("recipe JSON file, or the JSON itself"))
    generation: int = field(default=0, metadata=_flag("incarnation of this learner (bumped on replacement)"))
    nats_url: str | None = field(default=None, metadata=_flag("the stack's NATS URL (not needed with --no-sync)"))
    head_rendezvous: str | None = field(default=None, metadata=_flag(
        "the run's head rendezvous (a store URI or path of head.json, no secret; read with this machine's store "
        "credentials): at the start, and whenever the bus has been away a while, the learner connects to the address "
        "it names (a cloud run's replacement head)"))
    learner_index: int = field(default=0, metadata=_flag("this island's data shard group"))
    num_learners: int = field(default=1, metadata=_flag("islands sharing the data"))
    start_step: int = field(default=0, metadata=_flag(
        "resume at this inner step, and at the matching place in this learner's data shard (a replacement continues "
        "its predecessor)"))
    rank: int | None = field(default=None, metadata=_flag("rank in the island (default $RANK or 0)"))
    world_size: int | None = field(default=None, metadata=_flag("ranks in the island (default $WORLD_SIZE or 1)"))
    local_rank: int | None = field(default=None, metadata=_flag("rank on this host (default $LOCAL_RANK)"))
    master_addr: str | None = field(default=None, metadata=_flag("rank 0's host (default $MASTER_ADDR or 127.0.0.1)"))
    master_port: int | None = field(default=None, metadata=_flag("rendezvous port (default $MASTER_PORT or 29500)"))
    device: str | None = field(default=None, metadata=_flag("force a device kind (the backend's choices)"))
    no_sync: bool = field(default=False, metadata=_flag("train locally, without NATS and without DiLoCo"))
    eval_every: int = field(default=0, metadata=_flag(
        "held-out evaluation every N steps (default: the recipe's eval_every; 0 there: at the end)"))
    log_every_s: float = field(default=2.0, metadata=_flag("minimum seconds between progress lines"))
    log_format: str | None = field(default=None, metadata=_flag(
        "progress lines: text (default) or json, one object per line for machines (default $YETO_LOG_FORMAT)",
        choices=("text", "json")))

    @staticmethod
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    def to_argv(self) -> list[str]:
        """The flags, in field order: the required ones and every one that differs from its default."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.default is not MISSING and value == f.default:
                continue
            argv += [self.flag(f.name)] if isinstance(value, bool) else [self.flag(f.name), str(value)]
        return argv

    def but(self, **changes: Any) -> LearnerArgs:
        return replace(self, **changes)

    @classmethod
    def parser(cls, prog: str, *, description: str = "", devices: tuple[str, ...] | None = None,
               ) -> argparse.ArgumentParser:
        """The argparse parser of the contract; `devices` are the backend's --device choices (None: any)."""
        p = argparse.ArgumentParser(prog=prog, description=description)
        for f in fields(cls):
            options = dict(f.metadata)
            if f.name == "device" and devices is not None:
                options["choices"] = devices
            if f.default is MISSING:
                p.add_argument(cls.flag(f.name), required=True, **options)
            elif f.type == "bool":
                p.add_argument(cls.flag(f.name), action="store_true", **options)
            else:
                kind = {"int": int, "int | None": int, "float": float}.get(str(f.type), str)
                p.add_argument(cls.flag(f.name), type=kind, default=f.default, **options)
        return p

    @classmethod
    def parse(cls, argv: list[str] | None, *, prog: str, description: str = "",
              devices: tuple[str, ...] | None = None) -> LearnerArgs:
        """Parse a learner's command line (argparse exits 2 with usage on bad flags)."""
        namespace = cls.parser(prog, description=description, devices=devices).parse_args(argv)
        return cls(**vars(namespace))
