"""The training recipe's flags of `yeto launch` (LoRA, optimizer, schedule, epochs, eval, data mapping), and what they set."""
from __future__ import annotations

import argparse
import math
from typing import Any

from yeto.cli.launch.config import track

SEQ_LEN = 1024
"""The one --seq-len default of every command (launch, shape, data check): tokens per packed sequence."""
SCHEDULES = ("cosine", "linear", "constant")
_ACTIONS: dict[str, argparse.Action] = {}     # the launch parser's settings by dest: what a config file may set


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The recipe flags, `-c/--config`, and a record of which flags were typed (a config file fills the rest)."""
    a = p.add_argument
    a("-c", "--config", help="YAML or TOML file of launch settings (docs/CONFIG.md); flags override it")
    a("--lora-alpha", type=int, help="LoRA scaling numerator (update scaled by alpha / r; default 32)")
    a("--lora-dropout", type=float, help="dropout on the LoRA branch (default 0)")
    a("--target-modules", help="comma-separated module names LoRA wraps (default: picked by architecture)")
    a("--grad-accum", type=int, help="micro-batches accumulated per optimizer step (default 1)")
    a("--lr-schedule", dest="schedule", choices=SCHEDULES, help="after warmup (default cosine, to 0.1 x lr)")
    a("--weight-decay", type=float, help="AdamW decoupled weight decay (default 0.01)")
    a("--epochs", type=float, help="passes over the data, instead of --max-steps (steps from the packed token count)")
    a("--eval-every", type=int, help="held-out loss every N inner steps, on the tape (default: at the end only)")
    a("--eval-data", help="held-out data of its own (default: an --eval-split of --data)")
    a("--eval-split", type=float, help="fraction of --data rows held out for eval (default 0.02; 0 with --eval-data)")
    a("--field-map", help="rename data keys, as in `yeto data check`: messages=dialog,role=speaker")
    a("--train-on", choices=("assistant", "all"), help="tokens that carry loss (default assistant)")
    for action in p._actions:
        if action.dest in ("model", "data"):
            action.required = False      # a config file may name them; apply_config checks they are set
        if action.option_strings:
            track(action)
            _ACTIONS[action.dest] = action
    _ACTIONS.pop("help", None)


def apply_config(args, *, echo: bool = False) -> None:
    """Fill what no flag set from `--config` (once), check model and data are named, print the settings if asked."""
    from yeto.cli.launch import config as launch_config
    if getattr(args, "config_applied", False):
        return
    notes = launch_config.apply(args, _ACTIONS)
    args.config_applied = True
    typed: set[str] = getattr(args, "explicit", set())
    for flag, other in (("max_steps", "epochs"), ("epochs", "max_steps")):
        if flag in typed and other not in typed:
            setattr(args, other, None)   # a typed length beats the file's other one (num_epochs vs --max-steps)
    if args.max_steps is not None and args.epochs is not None and not {"max_steps", "epochs"} & typed:
        args.epochs = None               # both in the file: max_steps wins, as in transformers, axolotl, LLaMA-Factory
    missing = [f"--{d}" for d in ("model", "data") if not getattr(args, d, None)]
    if missing:
        raise ValueError(f"{' and '.join(missing)} required (a flag, or model / data in the --config file)")
    if echo and args.config:
        shown = {k: v for k, v in settings(args).items() if v not in (None, False, [], "")}
        print(f"config {args.config} (flags override it):\n" + "".join(f"  note: {n}\n" for n in notes)
              + "".join(f"  {k}: {v}\n" for k, v in shown.items()), end="")


def settings(args) -> dict[str, Any]:
    """Every launch setting as resolved (flags over the config file), as LaunchRun.recipe["config"] stores it."""
    from yeto.cli.launch.config import settings as resolved
    return {**resolved(args, _ACTIONS), "config": getattr(args, "config", None)}


def data_options(args) -> dict[str, Any]:
    """How the data is read, for the launch's data check (DataSpec)."""
    from yeto.learners.data import parse_field_map
    return {"field_map": parse_field_map(args.field_map), "train_on": args.train_on or "assistant"}


def recipe_fields(args) -> dict[str, Any]:
    """The TrainRecipe fields these flags set (unset flags keep the recipe's defaults)."""
    from yeto.learners.data import parse_field_map

    given = {name: getattr(args, name) for name in ("lora_alpha", "lora_dropout", "grad_accum", "schedule",
                                                    "weight_decay", "eval_every", "eval_data", "train_on")}
    fields = {k: v for k, v in given.items() if v is not None}
    if args.target_modules:
        fields["target_modules"] = tuple(m.strip() for m in args.target_modules.split(",") if m.strip())
    if args.field_map:
        fields["field_map"] = parse_field_map(args.field_map)
    if args.eval_split is not None:
        if not 0 <= args.eval_split < 1:
            raise ValueError(f"--eval-split {args.eval_split}: a fraction of the rows, at least 0 and below 1")
        fields["heldout_fraction"] = args.eval_split
    elif args.eval_data:
        fields["heldout_fraction"] = 0.0     # the eval set is its own: every row of --data trains
    if args.eval_every is not None and not args.eval_data and fields.get("heldout_fraction", 1) == 0:
        raise ValueError("--eval-every needs held-out data: give --eval-data, or an --eval-split above 0")
    if args.eval_data:
        _check_eval_data(args)
    return fields


def _check_eval_data(args) -> None:
    """--eval-data read as the learners will (every row), before anything starts."""
    from yeto.learners.data import DataSpec, check_data
    spec = DataSpec(source=args.eval_data, data_format=args.data_format, seq_len=args.seq_len, **data_options(args))
    report = check_data(spec, None)
    if not report.ok or not report.num_rows:
        raise ValueError(f"--eval-data {args.eval_data} is not usable:\n{report.render()}")


def apply_epochs(args, data_check: dict[str, Any], fleet: list[dict[str, Any]]) -> None:
    """--epochs -> --max-steps: each learner's rank trains its shard of the packed blocks `epochs` times."""
    if args.epochs is None:
        return
    if args.max_steps is not None:
        raise ValueError("give --epochs or --max-steps, not both")
    if args.epochs <= 0:
        raise ValueError(f"--epochs {args.epochs}: give a number of passes above zero")
    tokens = data_check.get("num_tokens")
    if not tokens:
        raise ValueError("--epochs counts steps from the data's tokens, which needs the model's tokenizer on this "
                         "machine (a local model or alias); give --max-steps instead")
    held = args.eval_split if args.eval_split is not None else (0.0 if args.eval_data else 0.02)
    blocks = math.ceil(tokens * (1 - held) / args.seq_len)            # packing fills every block
    ranks = max(1, sum(int(f.get("count", 1)) * int(f.get("nodes", 1)) for f in fleet))
    per_step = (args.micro_batch or 1) * (args.grad_accum or 1)
    args.max_steps = max(1, math.ceil(args.epochs * blocks / ranks / per_step))
