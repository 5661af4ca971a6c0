"""The PyTorch causal-LM learner (transformers + peft; DDP/FSDP2 inside an island)."""
