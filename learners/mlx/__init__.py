"""The MLX learner backend: LoRA on a causal LM with Apple's MLX (Metal on Apple silicon, its CPU backend elsewhere)."""
