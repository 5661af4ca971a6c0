"""The denoising objective of Diffusers' training scripts: frozen VAE latents, frozen text-encoder states (both by
family: family_io.py), noise added at a random timestep by the scheduler, and the MSE of the denoiser's prediction
against the scheduler's target (epsilon, v, or the flow-matching velocity). The held-out loss fixes timesteps and
noise, so it is comparable."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from yeto.learners import accel as accel_policy
from yeto.learners.diffusion import family_io
from yeto.learners.diffusion.components import Built

EVAL_TIMESTEPS = 8          # an even grid over the schedule: the held-out loss weighs every noise level alike
EVAL_SEED = 20_240_601      # fixed noise for the held-out loss, whatever the run's seed


def loss(built: Built, pixels: torch.Tensor, captions: list[str], generator: torch.Generator,
         timesteps: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error of the denoiser's prediction (`timesteps`: one per item, else drawn from `generator`)."""
    lat = family_io.latents(built, pixels, generator).float()
    noise = torch.randn(lat.shape, generator=generator).to(lat.device)
    num_train = built.scheduler.config.num_train_timesteps
    if timesteps is None:
        timesteps = torch.randint(0, num_train, (lat.shape[0],), generator=generator)
    t = timesteps.to(lat.device)
    if built.objective == "flow":       # rectified flow: x_t = (1 - s) x_0 + s noise, the target is noise - x_0
        s = (t.float() / num_train).view(-1, *([1] * (lat.ndim - 1)))
        noisy, target = (1 - s) * lat + s * noise, noise - lat
    else:
        noisy = built.scheduler.add_noise(lat, noise, t)
        target = noise if built.objective == "epsilon" else built.scheduler.get_velocity(lat, noise, t)
    cond = family_io.condition(built, captions)
    with accel_policy.autocast(built.accel):
        pred = family_io.predict(built, noisy.to(cond["encoder_hidden_states"].dtype), t, cond)
    return F.mse_loss(pred.float(), target.float())


@torch.no_grad()
def heldout_loss(built: Built, batches: list[tuple[torch.Tensor, list[str]]]) -> float:
    """Mean denoising loss over held-out batches at a fixed grid of timesteps with fixed noise (NaN with none)."""
    if not batches:
        return float("nan")
    num_train = built.scheduler.config.num_train_timesteps
    grid = [int(num_train * (k + 0.5) / EVAL_TIMESTEPS) for k in range(EVAL_TIMESTEPS)]
    generator, total, count = torch.Generator().manual_seed(EVAL_SEED), 0.0, 0
    was_training = built.model.training
    built.model.eval()
    for pixels, captions in batches:
        for t in grid:
            total += float(loss(built, pixels, captions, generator, torch.full((len(captions),), t))) * len(captions)
            count += len(captions)
    built.model.train(was_training)
    return total / count
