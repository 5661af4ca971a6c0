"""The learner's own lines (stdout, and its log stream): a readable line by default, one JSON object with `json`.

`--log-format json` or `$YETO_LOG_FORMAT=json` is for machines (benchmarks/lib_wan_proc.py and tests parse it);
people read `step 40  loss 2.3456  ...`. `quiet()` silences the libraries' progress bars and deprecation notices
at the learner's start, unless $YETO_VERBOSE=1.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partialmethod

FORMATS = ("text", "json")
VERBOSE_ENV = "YETO_VERBOSE"


def log_format(flag: str | None = None) -> str:
    """The flag's format, else $YETO_LOG_FORMAT's, else text; an unknown one is refused with the choices."""
    value = (flag or os.environ.get("YETO_LOG_FORMAT") or "text").strip().lower()
    if value not in FORMATS:
        raise ValueError(f"log format {value!r}: choose from {', '.join(FORMATS)} (--log-format, $YETO_LOG_FORMAT)")
    return value


def _num(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return f"{value:.3e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"


HOW = ("backend", "device", "ranks", "shard", "tuning", "dtype", "quantization", "trainable", "parameters")


def start_text(fields: dict) -> str:
    """How the island runs, as a sentence: `start: torch on cuda, 2 ranks sharded with FSDP2, lora tuning in bfloat16,
    base not quantized, 1,081,344 of 135,596,352 parameters trainable (0.80%)`, then the backend's other fields."""
    f = dict(fields)
    how = {k: f.pop(k, None) for k in HOW}
    ranks, shard, quant = how["ranks"], how["shard"], how["quantization"]
    spread = {"FSDP2": "sharded with FSDP2", "DDP": "replicated with DDP"}.get(str(shard), "on one process")
    share = f" ({100 * how['trainable'] / how['parameters']:.2f}%)" if how["parameters"] else ""
    head = (f"start: {how['backend']} on {how['device']}, {ranks} rank{'' if ranks == 1 else 's'} {spread}, "
            f"{how['tuning']} tuning in {how['dtype']}, base {'not quantized' if quant == 'none' else quant}, "
            f"{how['trainable']:,} of {how['parameters']:,} parameters trainable{share}")
    return "  ".join([head] + [f"{k} {_num(v)}" for k, v in f.items() if v is not None])


def text_line(fields: dict) -> str:
    """`step 3  loss 3.3607  tokens 104  lr 4.500e-05  grad_norm 1.2345  0.0646 s  heldout 3.3760`; `done: ...`; the
    `start` sentence;
    other events `name: k v`."""
    fields = dict(fields)
    event = fields.pop("event", "log")
    if event == "start" and all(k in fields for k in HOW):
        return start_text(fields)
    if event == "step":
        synced = " synced" if fields.pop("synced", False) else ""
        held = fields.pop("heldout", None)
        parts = [f"step {fields.pop('step')}"] + [f"{k} {_num(v)}" for k, v in fields.items()
                                                  if k != "seconds" and v is not None]
        parts.append(f"{_num(fields.get('seconds', 0.0))} s{synced}")
        return "  ".join(parts + ([f"heldout {_num(held)}"] if held is not None else []))
    return f"{event}: " + "  ".join(f"{k} {_num(v)}" for k, v in fields.items() if v is not None)


def render(fields: dict, fmt: str) -> str:
    return json.dumps(fields) if fmt == "json" else text_line(fields)


def quiet() -> None:
    """The libraries' progress bars and deprecation notices are not the learner's news (errors still print);
    `$YETO_VERBOSE=1` keeps them, for a look at what a library does."""
    if os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for module in ("transformers", "peft", "torch", "huggingface_hub", "datasets", "accelerate"):
        for category in (FutureWarning, DeprecationWarning):     # "X is deprecated, use Y": for the library's users
            warnings.filterwarnings("ignore", category=category, module=module)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:      # transformers not installed: nothing of it to silence
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass
    try:      # bars drawn with tqdm itself (transformers' GGUF dequantizing): TQDM_DISABLE is read at tqdm's import,
        import tqdm  # which torch has done by now, so its default is changed here instead

        tqdm.tqdm.__init__ = partialmethod(tqdm.tqdm.__init__, disable=True)  # type: ignore[method-assign]
    except ImportError:
        pass


@contextmanager
def quieted(verbose: bool = False) -> Iterator[None]:
    """quiet() for the time of a command (`yeto merge`) run in a process that goes on after it (tests run the CLI
    in theirs), then every switch as it was; `verbose` leaves them alone."""
    if verbose:
        yield
        return
    import tqdm
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    env = {k: os.environ.get(k) for k in ("TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_PROGRESS_BARS")}
    init, level, bars, hub_off = (tqdm.tqdm.__init__, hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(),
                                  are_progress_bars_disabled())
    with warnings.catch_warnings():
        quiet()
        try:
            yield
        finally:
            tqdm.tqdm.__init__ = init  # type: ignore[method-assign]
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()
            if not hub_off:
                enable_progress_bars()
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
