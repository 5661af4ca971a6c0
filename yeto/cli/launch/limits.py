"""What `yeto launch` refuses before anything starts: numbers that are not finite and positive, fleets over the caps."""
from __future__ import annotations

import math
import os
from typing import Any

from yeto.cli.launch.checks import duration_s
from yeto.infra.accelerators import npu_devices
from yeto.schemas.capacity import Capacity, cpu_processes, over_capacity
from yeto.schemas.recipe_bounds import CAPS, check_bounds


def _finite(flag: str, value: float | int | None, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{flag} {value}: must be a finite number {'>= 0' if zero_ok else '> 0'}")


def check_numbers(args) -> None:
    """--lr, prices and limits are finite and positive (a NaN limit compares false with everything: no limit at all)."""
    for flag in ("lr", "max_spend", "max_tokens", "max_steps", "lora_r", "seq_len", "micro_batch"):
        _finite(f"--{flag.replace('_', '-')}", getattr(args, flag, None))
    for flag in ("local_price", "head_price", "warmup_steps"):
        _finite(f"--{flag.replace('_', '-')}", getattr(args, flag, None), zero_ok=True)
    for flag in ("outer_lr", "outer_momentum", "merge_alpha"):
        _finite(f"--{flag.replace('_', '-')}", getattr(args, flag, None), zero_ok=True)
    duration_s(getattr(args, "max_time", None), "--max-time")
    duration_s(getattr(args, "recover_timeout", None), "--recover-timeout")
    duration_s(getattr(args, "heartbeat_timeout", None), "--heartbeat-timeout")
    duration_s(getattr(args, "final_ack_timeout", None), "--final-ack-timeout")
    if getattr(args, "max_islands", 1) < 1:
        raise ValueError(f"--max-islands {args.max_islands}: must be at least 1")
    check_bounds({key: getattr(args, key, None) for key in CAPS})     # the recipe's caps, before anything starts


def _cuda_devices() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch or no driver: no CUDA devices
        return 0


def check_fleet_size(fleet: list[dict[str, Any]], args) -> None:
    """Islands capped by --max-islands, nodes and GPUs per node by the schema's caps, local islands by this machine."""
    cuda = any(e.get("cloud") == "local" and e.get("gpu") == "cuda" for e in fleet)
    npu = any(e.get("cloud") == "local" and e.get("gpu") == "npu" for e in fleet)
    cap = Capacity(cpus=os.cpu_count() or 1, gpus=_cuda_devices() if cuda else 0, max_islands=args.max_islands,
                   npus=npu_devices() if npu else 0, oversubscribe=bool(getattr(args, "oversubscribe_cpus", False)))
    if why := over_capacity(fleet, cap):
        raise ValueError(f"--gpu {args.gpu or '(the planned fleet)'}: {why}")
    if cap.oversubscribe:
        oversubscription_note(cpu_processes(fleet), cap.cpus)


def oversubscription_note(processes: int, cpus: int) -> None:
    """--oversubscribe-cpus where the fleet needs it: a warning that says what it costs; where it does not, refused."""
    import sys

    if processes <= cpus:
        raise ValueError(f"--oversubscribe-cpus: the local islands run {processes} CPU learner process(es) and this "
                         f"machine has {cpus} CPUs, no more than one a CPU: drop it")
    print(f"yeto: warning: --oversubscribe-cpus: {processes} CPU learner processes share {cpus} CPUs; each step is "
          "slower (they take turns on the cores), the training is the same", file=sys.stderr)


LIMITS = ("max_spend", "max_steps", "max_tokens", "max_time")


def ask_for_limit(args, fleet: list[dict[str, Any]], *, ask=input, interactive: bool | None = None) -> None:
    """A cloud run with no limit bills until `yeto down`: on a terminal, ask for --max-spend (empty: go on without);
    elsewhere say so on stderr. Sets args.max_spend from the answer (the recipe is built after this)."""
    import sys

    if all(e.get("cloud") == "local" for e in fleet) or any(getattr(args, f, None) for f in LIMITS):
        return
    interactive = sys.stdin.isatty() if interactive is None else interactive
    warning = ("this cloud run has no limit (--max-spend, --max-steps, --max-tokens, --max-time): it bills, "
               "islands and head, until `yeto down`")
    if not interactive:
        print(f"yeto: warning: {warning}", file=sys.stderr)
        return
    answer = ask(f"{warning}.\n  --max-spend in USD (empty: no limit): ").strip().lstrip("$")
    if answer:
        try:
            args.max_spend = float(answer)
        except ValueError:
            raise ValueError(f"--max-spend {answer!r}: not a number of dollars") from None
        _finite("--max-spend", args.max_spend)
