"""`yeto data check`: validate `--data` exactly as training will read it, before anything is rented."""
from __future__ import annotations

import json

from yeto.cli.launch.recipe import SEQ_LEN
from yeto.learners.data import FORMATS


def register(sub) -> None:
    p = sub.add_parser("data", help="inspect and validate training data")
    s = p.add_subparsers(dest="data_cmd", metavar="ACTION", required=True)
    c = s.add_parser("check", help="read every row, report formats, bad rows and token lengths",
                     description="Reads --data the way training will: rows per detected format, the first bad rows "
                                 "with file and row number (1-based line for JSON Lines, 0-based index otherwise), and "
                                 "with --model token-length statistics and rows over --seq-len. Exits 1 when bad rows "
                                 "are found under --on-bad-rows error.")
    c.add_argument("--data", required=True, help="HF dataset id (org/name[@rev]), local file/dir, or store URI")
    c.add_argument("--data-format", default="auto", choices=("auto",) + FORMATS)
    c.add_argument("--field-map", default=None, help="rename keys: messages=dialog,role=speaker,assistant_tag=agent")
    c.add_argument("--model", default=None, help="count tokens with this model's tokenizer and chat template")
    c.add_argument("--seq-len", type=int, default=SEQ_LEN, help=f"tokens per packed sequence (default {SEQ_LEN})")
    c.add_argument("--train-on", default="assistant", choices=("assistant", "all"))
    c.add_argument("--on-bad-rows", default="error", choices=("error", "skip"))
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=cmd_check)


def load_tokenizer(model: str):
    """The model's own tokenizer: aliases, local dirs, .gguf files and HF ids, resolved as training resolves them."""
    from yeto.infra.model_source import resolve
    return local_tokenizer(resolve(model))


def local_tokenizer(source):
    """A resolved model's tokenizer, read from its files where that gives transformers' tokenizer exactly (no torch
    import: seconds off every `yeto launch`, benchmarks/startup.py), else loaded through transformers. A .gguf's is
    read from the folder its first load saved (infra/gguf_tokenizer.py, benchmarks/gguf_tokenizer.py)."""
    from yeto.learners.data import read_tokenizer
    if (found := read_tokenizer(source)) is not None:
        return found
    from yeto.learners.torch.api import load_tokenizer as load
    return load(source)


def cmd_check(args) -> int:
    from yeto.learners.data import DataSpec, check_data, parse_field_map
    spec = DataSpec(source=args.data, data_format=args.data_format, field_map=parse_field_map(args.field_map),
                    on_bad_rows=args.on_bad_rows, train_on=args.train_on, seq_len=args.seq_len)
    tokenizer = load_tokenizer(args.model) if args.model else None
    report = check_data(spec, tokenizer)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render())
    return 0 if report.ok else 1
