"""What `yeto launch` checks before anything is rented, and the LaunchRun payload (fleet + recipe) it builds."""
from __future__ import annotations

import re
from typing import Any

from yeto.schemas.gpuspec import IslandSpec, parse_gpu

_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
SYNC_FLAGS = {"fragments": "num_fragments", "sync_every": "inner_steps", "sync_every_start": "inner_steps_start",
              "sync_ramp_steps": "inner_steps_ramp", "outer_lr": "outer_lr",
              "outer_momentum": "momentum", "merge_alpha": "alpha", "merge": "merge",
              "momentum_restart": "momentum_restart", "momentum_restart_cos": "momentum_restart_cos",
              "global_apply": "global_apply", "codec_up": "codec_up", "codec_down": "codec_down",
              "feedback_decay": "feedback_decay",
              "quorum": "quorum"}


def duration_s(text: str | None, flag: str) -> float | None:
    """`90`, `90s`, `30m`, `2h`, `1d` -> seconds (more than zero)."""
    if text is None:
        return None
    m = _DURATION.match(text.strip())
    seconds = float(m["n"]) * _UNITS[m["unit"]] if m else 0.0
    if not 0 < seconds < 10**9:
        raise ValueError(f"{flag} {text!r}: write a duration above zero like 90s, 30m, 2h or 1d")
    return seconds


def fleet_entries(islands: list[IslandSpec], *, spot: bool, prices: list[float | None],
                  local_price: float = 0.0) -> list[dict[str, Any]]:
    """The fleet of LaunchRun; a local island costs `local_price` $/hr (0 by default: your own machine)."""
    return [{**i.to_dict(), "spot": spot and i.cloud != "local", "price_per_hour": local_price if i.cloud == "local" else p}
            for i, p in zip(islands, prices)]


def known_weights_gb(model: str) -> float | None:
    """The model's bf16 size when the alias table or local safetensors tell it (no network)."""
    from yeto.infra.model_source import resolve_model
    try:
        return resolve_model(model).weights_gb
    except ValueError:
        return None


def check_memory_fit(islands: list[IslandSpec], *, weights_gb: float | None, tuning: str, base_quantization: str,
                     seq_len: int, micro_batch: int, activation_checkpointing: str = "auto", shard: str = "auto") -> None:
    """Refuse a cloud island whose GPUs cannot hold the model (when its size is known), or cannot run NF4."""
    if base_quantization == "nf4":
        from yeto.cli.launch.nf4 import check_nf4
        check_nf4(islands)
    if weights_gb is None or all(i.cloud == "local" for i in islands):    # local islands are not checked (below)
        return
    from yeto.services.planner.api import GPUS, Workload, fits

    w = Workload(weights_gb=weights_gb, tuning=tuning, base_quantization=base_quantization, seq_len=seq_len,
                 micro_batch=micro_batch, activation_checkpointing=activation_checkpointing, shard=shard)
    for i in islands:
        if i.cloud == "local" or i.gpu not in GPUS:
            continue
        ok, need = fits(w, i.num_gpus, GPUS[i.gpu].memory_gb)
        if not ok:
            raise ValueError(f"--gpu entry {i.cloud}:{i.count}x{i.gpu.lower()}: the model needs {need.total_gb:.1f} GB per GPU "
                             f"on {i.num_gpus} GPUs, more than a {i.gpu} holds ({GPUS[i.gpu].memory_gb:.0f} GB); "
                             f"add GPUs or nodes, use --base-quantization nf4, or a smaller --seq-len")


def check_data(args, source) -> dict[str, Any]:
    """Read every row as training will; refuse bad data with the report. Returns what the manifest records."""
    from yeto.cli.launch.recipe import data_options
    from yeto.learners.data import DataSpec
    from yeto.learners.data import check_data as run_check

    tokenizer = None
    if source.is_local:   # token statistics when the tokenizer is at hand (no download before renting)
        from yeto.cli.data import local_tokenizer
        tokenizer = local_tokenizer(source)
    spec = DataSpec(source=args.data, data_format=args.data_format, seq_len=args.seq_len,
                    on_bad_rows=args.on_bad_rows, **data_options(args))
    report = run_check(spec, tokenizer)
    if not report.ok:
        raise ValueError(f"--data {args.data} is not usable:\n{report.render()}")
    t = report.tokens
    return {"source": args.data, "revision": report.revision, "fingerprint": report.fingerprint,
            "num_rows": report.num_rows, "num_bad": report.num_bad, "data_format": args.data_format,
            "on_bad_rows": args.on_bad_rows, "formats": dict(report.formats),
            "num_tokens": t.num_tokens if t else None, "num_over_seq_len": t.num_over_seq_len if t else None,
            "masking": t.masking if t else None, "skipped": [f"{b.where}: {b.reason}" for b in report.bad_rows]}


def data_events(launch) -> list:
    """The data check on the run's tape: DataChecked, and BadRowsSkipped under --on-bad-rows skip."""
    from yeto.schemas.data import BadRowsSkipped, DataChecked
    from yeto.schemas.launch_recipe import LaunchRecipe

    c = LaunchRecipe.upcast(launch.recipe).data_check
    events = [launch.caused(DataChecked, c.source, data=c.source, revision=c.revision, fingerprint=c.fingerprint,
                            data_format=c.data_format, num_rows=c.num_rows, num_bad=c.num_bad, formats=c.formats,
                            num_tokens=c.num_tokens, num_over_seq_len=c.num_over_seq_len, masking=c.masking,
                            source="cli")]
    if c.num_bad and c.on_bad_rows == "skip":
        events.append(launch.caused(BadRowsSkipped, c.source, num_skipped=c.num_bad, rows=c.skipped, source="cli"))
    return events


def sync_settings(args) -> dict[str, Any]:
    from yeto.schemas.recipe import SyncConfig

    given = {field: getattr(args, flag) for flag, field in SYNC_FLAGS.items() if getattr(args, flag) is not None}
    if getattr(args, "codec", None) is not None:      # --codec: both directions, unless --codec-up/-down say otherwise
        from yeto.schemas import codecs
        try:
            codecs.codec(args.codec)
        except ValueError as e:
            raise ValueError(f"--codec: {e}") from None
        given = {"codec_up": args.codec, "codec_down": args.codec, **given}
    if getattr(args, "tuning", None) == "full":
        if not given.keys() & {"momentum_restart", "momentum_restart_cos"}:
            given["momentum_restart"] = "off"   # the restart pays on LoRA; from scratch it costs steps (docs/SYNC_MATH.md)
        # RDA's merged step is the pushes' mean length, longer than their mean where they disagree: under the outer
        # momentum it cost full tuning ~1% held-out CE and ~10 steps to the target against the token-weighted mean
        # (docs/BENCHMARK_RESULTS.md, claims 4-5: avg with q4 level with torchft at its best, RDA with bf16 behind it).
        given.setdefault("merge", "avg")
    try:
        SyncConfig(**given)
    except ValueError as e:   # names the recipe's field; say which flag sets it
        flags = [f"--{flag.replace('_', '-')}" for flag, field in SYNC_FLAGS.items() if re.search(rf"\b{field}\b", str(e))]
        raise ValueError(f"{e}{' (set by ' + ', '.join(flags) + ')' if flags else ''}") from None
    return given


def train_recipe(args, sync: dict[str, Any]) -> dict[str, Any]:
    from yeto.learners.lm_recipe import TrainRecipe  # not through learners.torch: no torch import in the CLI

    fields = dict(model=args.model, data=args.data, data_format=args.data_format, tuning=args.tuning,
                  seq_len=args.seq_len, micro_batch=args.micro_batch, sync=sync, seed=args.seed, on_bad_rows=args.on_bad_rows,
                  base_quantization=args.base_quantization, shard=args.shard,
                  activation_checkpointing=args.activation_checkpointing)
    for name in ("lr", "max_steps", "lora_r", "warmup_steps"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    from yeto.cli.launch.recipe import recipe_fields
    return TrainRecipe(**fields, **recipe_fields(args)).to_dict()


def pin_sources(train: dict[str, Any], data_check: dict[str, Any]) -> dict[str, Any]:
    """The train recipe with its sources pinned for every island: the base model (Hub commit hash, or each local
    file's sha256) and the data (a Hub dataset read at the commit its check resolved, local files by sha256)."""
    from yeto.infra.source_pins import pin_data, pin_model

    data, revision = train["data"], data_check.get("revision")
    pins = {"base": pin_model(train["model"]), "data": pin_data(data, revision)}
    if revision:     # islands read the commit, never a branch that may move during the run
        data = f"{data.removeprefix('hf://datasets/').split('@')[0]}@{revision}"
    return {**train, "data": data, "pins": pins}


def parse_fleet(text: str) -> list[IslandSpec]:
    islands = parse_gpu(text)
    kinds = {i.cloud == "local" for i in islands}
    if len(kinds) > 1:
        raise ValueError("--gpu mixes local and cloud islands: cloud learners cannot reach a stack on this machine; "
                         "use local islands alone, or cloud islands with a head (`yeto stack up --head`)")
    return islands
