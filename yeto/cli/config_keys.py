"""The key names of other trainers' config files that `yeto launch -c` reads (docs/CONFIG.md), as pure tables."""
from __future__ import annotations

from typing import Any

# axolotl / LLaMA-Factory keys that map one to one onto a launch setting (docs/CONFIG.md has the table).
ALIASES = {
    "base_model": "model", "model_name_or_path": "model", "dataset": "data", "eval_dataset": "eval_data",
    "lora_rank": "lora_r", "lora_target_modules": "target_modules", "lora_target": "target_modules",
    "learning_rate": "lr", "num_epochs": "epochs", "num_train_epochs": "epochs", "micro_batch_size": "micro_batch",
    "per_device_train_batch_size": "micro_batch", "gradient_accumulation_steps": "grad_accum",
    "sequence_len": "seq_len", "cutoff_len": "seq_len", "lr_scheduler": "schedule", "lr_scheduler_type": "schedule",
    "lr_schedule": "schedule", "output_dir": "output", "val_set_size": "eval_split", "val_size": "eval_split",
    "eval_steps": "eval_every", "finetuning_type": "tuning", "adapter": "tuning",
}
# Settings whose values are named otherwise there: {their value: ours}.
VALUES: dict[str, dict[Any, str]] = {
    "schedule": {"cosine": "cosine", "linear": "linear", "constant": "constant", "constant_with_warmup": "constant"},
    "tuning": {"lora": "lora", "qlora": "lora", "full": "full"},
}
# Keys whose value becomes another setting's: (setting, {their value: ours}).
FLAGS: dict[str, tuple[str, dict[Any, str]]] = {
    "train_on_inputs": ("train_on", {False: "assistant", True: "all"}),
    "gradient_checkpointing": ("activation_checkpointing", {True: "on", False: "off"}),
    "load_in_4bit": ("base_quantization", {True: "nf4", False: "none"}),
}
# Their keys that ask for what Yeto always does, or set nothing here: accepted, and said so.
NOTED = {
    "sample_packing": "Yeto always packs sequences", "pad_to_sequence_len": "packed blocks are always seq_len long",
    "lora_target_linear": "LoRA targets are picked by architecture unless target_modules is given",
    "load_in_8bit": "8-bit bases are not supported; nf4 (load_in_4bit) is", "optimizer": "Yeto's inner optimizer is AdamW",
    "bf16": "the dtype follows the hardware (bf16 on accelerators)", "tf32": "set by the hardware policy",
    "flash_attention": "attention is picked by the model's loader", "logging_steps": "progress is on the tape",
    "dataset_prepared_path": "data is read as training reads it", "strict": "unknown keys are always refused",
    "stage": "Yeto does supervised fine-tuning (sft)", "do_train": "a launch trains", "template": "the chat template "
    "is the tokenizer's", "lora_model_dir": "use --resume-from or --branch-from",
    "hub_model_id": "use --output hf://org/repo", "overwrite_output_dir": "a run writes its own artifact",
    **{f"wandb_{k}": "pass --report-to wandb" for k in ("project", "entity", "watch", "name", "log_model")},
    # Distributed and checkpointing setups: Yeto decides these itself.
    **dict.fromkeys(("deepspeed", "fsdp", "fsdp_config", "fsdp_version", "ddp_find_unused_parameters"),
                    "inside an island Yeto runs DDP, or FSDP2 shards (--shard fsdp, or auto when one replica does not "
                    "fit); islands sync with DiLoCo. DeepSpeed and FSDP configs are not read"),
    **dict.fromkeys(("saves_per_epoch", "save_steps", "save_strategy", "save_total_limit", "save_safetensors"),
                    "the syncer snapshots the run as it trains and the artifact is written once, at the end (resume a "
                    "stopped run with --resume-from)"),
    "evals_per_epoch": "give eval_steps (--eval-every) for a held-out evaluation every N steps",
    **dict.fromkeys(("xformers_attention", "sdp_attention", "flash_attn_cross_entropy", "flash_attn_rms_norm"),
                    "attention kernels are picked by the model's loader"),
    "group_by_length": "packed blocks are all seq_len long", "torch_compile": "the learner does not compile",
    **dict.fromkeys(("eval_table_size", "eval_max_new_tokens", "eval_sample_packing"),
                    "Yeto's evaluation is the held-out loss"),
    "early_stopping_patience": "a run stops on --max-steps, --max-tokens, --max-time or --max-spend",
    "local_rank": "ranks come from the --gpu entry's count",
}
# Their keys that change what would be trained, which Yeto cannot honour: refused, each with what to do instead.
INSTEAD = {
    "special_tokens": "Yeto trains with the base tokenizer's own special tokens; add tokens to the tokenizer of a local "
                      "copy of the base (tokenizer_config.json) and pass that directory as the model",
    "tokens": "Yeto does not add tokens; add them to the tokenizer of a local copy of the base and pass that directory",
    "chat_template": "the chat template is the tokenizer's own (tokenizer_config.json); drop the key, or put the template "
                     "in a local copy of the base (`chat_template: tokenizer_default` is accepted)",
    "warmup_ratio": "give warmup_steps (--warmup-steps) instead of a ratio",
    "max_grad_norm": "Yeto clips the gradient norm at 1.0; drop the key",
    "resume_from_checkpoint": "resume a Yeto run with --resume-from RUN (or start from it with --branch-from RUN)",
    "lora_modules_to_save": "Yeto trains LoRA adapters only (or every weight with tuning full)",
    "unfrozen_parameters": "Yeto trains LoRA adapters, or every weight with tuning full; no partial freezing",
    "rl": "Yeto does supervised fine-tuning", "dpo_beta": "Yeto does supervised fine-tuning",
}
