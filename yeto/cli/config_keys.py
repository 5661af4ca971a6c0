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
}
