"""The Megatron-Core learner backend: a Mixtral-style MoE with expert parallelism inside one island (docs/MEGATRON.md)."""
