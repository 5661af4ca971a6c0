"""The Diffusers learner backend: LoRA on a diffusion denoiser, synced through the shared DiLoCo step boundary."""
