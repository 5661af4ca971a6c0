"""Regenerate the README's model table from schemas/model_table.py (between the models markers); --check only compares."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from yeto.schemas.model_table import MODELS

BEGIN, END = "<!-- models:begin -->", "<!-- models:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def _rows(recorded: bool) -> list[str]:
    out = ["| alias | Hugging Face id | min island VRAM (GB) |" + (" recorded run |" if recorded else ""),
           "|---|---|---|" + ("---|" if recorded else "")]
    for m in MODELS:
        if bool(m.recorded_run) == recorded:
            vram = "(Hub)" if m.min_vram_gb is None else f"{m.min_vram_gb:g}"
            out.append(f"| `{m.alias}` | `{m.hf_id}` | {vram} |" + (f" {m.recorded_run} |" if recorded else ""))
    return out


def render_table() -> str:
    """The Markdown that sits between the markers: aliases with a run recorded here, then the others."""
    recorded = [m for m in MODELS if m.recorded_run]
    head = (["Tested — a Yeto run recorded in this repository (docs/BENCHMARK_RESULTS.md):", "", *_rows(True), ""]
            if recorded else ["Tested: no alias yet. No Yeto run of any of these models has been recorded in this repository; "
                              "what has run here is listed in docs/BENCHMARK_RESULTS.md (tiny models and SmolLM2-135M on CPU).",
                              ""])
    return "\n".join([*head, "Supported aliases (the loading path, not a recorded run):", "", *_rows(False)])


def splice(readme: str) -> str:
    """README text with the table between the markers replaced; ValueError if the markers are missing."""
    if BEGIN not in readme or END not in readme or readme.index(BEGIN) > readme.index(END):
        raise ValueError(f"README.md lacks the markers {BEGIN} ... {END}; add them where the model table belongs")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{render_table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md differs from the table")
    ap.add_argument("--readme", type=Path, default=README)
    args = ap.parse_args(argv)
    if not args.readme.exists():
        print(f"gen_model_table: {args.readme} does not exist", file=sys.stderr)
        return 2
    text = args.readme.read_text()
    try:
        new = splice(text)
    except ValueError as e:
        print(f"gen_model_table: {e}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print("gen_model_table: README.md model table is out of date; run python scripts/gen_model_table.py", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
