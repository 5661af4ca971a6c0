"""Yeto: fine-tune language and diffusion models across cheap, scattered GPUs (asynchronous Decoupled DiLoCo)."""

__version__ = "0.1.0"
