"""`yeto launch --oversubscribe-cpus`: on a small machine, local CPU islands may run up to two learner processes a
CPU (schemas/capacity.py), so the acceptance fleet of docs/MEGATRON.md (`local:2xcpu,local:2xcpu`) runs on 2 CPUs.
Without the flag the cap is one a CPU, more than two a CPU is refused even with it, and the launcher's own check
reads the flag from the launch recipe. tests/megatron/test_megatron_launch.py runs the fleet to a finalized artifact."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from yeto.cli.launch import island_backend, limits
from yeto.infra.runner.spec import Reject
from yeto.schemas.capacity import Capacity, over_capacity
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher import logic

FOUR = [{"cloud": "local", "gpu": "cpu", "count": 2}, {"cloud": "local", "gpu": "cpu", "count": 2}]


def test_without_the_flag_four_processes_on_two_cpus_are_refused_and_the_refusal_names_the_flag():
    why = over_capacity(FOUR, Capacity(cpus=2, gpus=0))
    assert why and "4 CPU learner processes and this machine has 2 CPUs" in why and "add --oversubscribe-cpus" in why


def test_with_the_flag_two_processes_a_cpu_fit_and_more_are_refused_by_the_rule():
    assert over_capacity(FOUR, Capacity(cpus=2, gpus=0, oversubscribe=True)) is None
    five = [*FOUR, {"cloud": "local", "gpu": "cpu", "count": 1}]
    why = over_capacity(five, Capacity(cpus=2, gpus=0, oversubscribe=True))
    assert why and "5 CPU learner processes" in why and "--oversubscribe-cpus allows at most 2 a CPU (4)" in why
    cuda = [{"cloud": "local", "gpu": "cuda", "count": 2}]          # CUDA devices are never oversubscribed
    assert "2 CUDA devices and this machine has 1" in over_capacity(cuda, Capacity(cpus=2, gpus=1, oversubscribe=True))


def _launch_run(recipe: dict):
    from yeto.schemas.commands import LaunchRun
    return LaunchRun(id="l-1", run_id="r-over", source="cli", fleet=FOUR, recipe=recipe)


def test_the_launcher_allows_what_the_recipe_says_and_refuses_what_it_does_not():
    args = SimpleNamespace(island_backend=None, oversubscribe_cpus=True)
    recipe = island_backend.apply(args, LaunchRecipe().wire())
    assert LaunchRecipe.upcast(recipe).oversubscribe_cpus is True      # the typed recipe carries it
    assert logic.launch(_launch_run(recipe), Capacity(cpus=2, gpus=0))
    with pytest.raises(Reject, match="4 CPU learner processes and this machine has 2 CPUs"):
        logic.launch(_launch_run(LaunchRecipe().wire()), Capacity(cpus=2, gpus=0))


def test_the_cli_warns_where_the_flag_is_needed_and_refuses_it_where_it_is_not(capsys):
    limits.oversubscription_note(4, 2)
    assert "4 CPU learner processes share 2 CPUs; each step is slower" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--oversubscribe-cpus: the local islands run 2 CPU learner process.*drop it"):
        limits.oversubscription_note(2, 2)
