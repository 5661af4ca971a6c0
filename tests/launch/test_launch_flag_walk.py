"""Every `yeto launch` flag reaches what acts on it: the learner the local backend would start (its argv and recipe
file), the syncer's SyncConfig, the launcher's timeouts and island prices, the finalizer's limits and output, or the
planner's request; a flag the CLI itself acts on names the test that covers it. The flags are read from the parser,
so a new flag without a row in WALK fails here by name, and so does one whose value never arrives."""
from __future__ import annotations

import ast
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.run_view import fold

pytestmark = pytest.mark.timeout(120)
TESTS = Path(__file__).resolve().parents[1]
CHANGED = object()      # want: any value but the one reached without the flag (--epochs: steps counted from the data)


@dataclass(frozen=True)
class Reach:
    where: str                  # learner | syncer | launcher | finalizer | planner | cli
    argv: tuple[str, ...] = ()  # the flag with a value that is not its default
    field: str = ""             # what is read there (learner: TrainRecipe's field, or argv.<dest> of its command line)
    want: Any = None
    test: str = ""              # cli: "path/under/tests.py::test_function" that covers what the flag does


def learner(*argv, field, want=None): return Reach("learner", argv, field, argv[-1] if want is None else want)
def syncer(*argv, field, want): return Reach("syncer", argv, field, want)
def launcher(*argv, field, want): return Reach("launcher", argv, field, want)
def finalizer(*argv, field, want): return Reach("finalizer", argv, field, want)
def planner(*argv, field, want): return Reach("planner", argv, field, want)
def cli(test): return Reach("cli", test=test)


CLOUD_HEAD = "cloud/test_cloud_head.py::"
WALK: dict[str, Reach] = {      # one row per option of `yeto launch` (its longest spelling)
    "--model": learner("--model", "MODEL", field="model", want="MODEL"), "--data": learner(field="data", want="DATA"),
    "--gpu": learner("--gpu", "local:2xcpu", field="argv.world_size", want=2),
    "--data-format": learner("--data-format", "openai", field="data_format"),
    "--on-bad-rows": learner("--on-bad-rows", "skip", field="on_bad_rows"),
    "--shard": learner("--shard", "ddp", field="shard"),
    "--activation-checkpointing": learner("--activation-checkpointing", "on", field="activation_checkpointing"),
    "--tuning": learner("--tuning", "full", field="tuning"),
    "--base-quantization": learner("--base-quantization", "nf4", field="base_quantization"),
    "--seq-len": learner("--seq-len", "96", field="seq_len", want=96),
    "--micro-batch": learner("--micro-batch", "3", field="micro_batch", want=3),
    "--max-steps": learner("--max-steps", "7", field="max_steps", want=7),
    "--lr": learner("--lr", "0.001", field="lr", want=0.001), "--lora-r": learner("--lora-r", "4", field="lora_r", want=4),
    "--warmup-steps": learner("--warmup-steps", "3", field="warmup_steps", want=3),
    "--seed": learner("--seed", "5", field="seed", want=5),
    "--lora-alpha": learner("--lora-alpha", "8", field="lora_alpha", want=8),
    "--lora-dropout": learner("--lora-dropout", "0.1", field="lora_dropout", want=0.1),
    "--target-modules": learner("--target-modules", "q_proj,v_proj", field="target_modules", want=("q_proj", "v_proj")),
    "--grad-accum": learner("--grad-accum", "2", field="grad_accum", want=2),
    "--lr-schedule": learner("--lr-schedule", "linear", field="schedule"),
    "--weight-decay": learner("--weight-decay", "0.05", field="weight_decay", want=0.05),
    "--epochs": learner("--epochs", "2", field="max_steps", want=CHANGED),
    "--eval-every": learner("--eval-every", "5", field="eval_every", want=5),
    "--eval-data": learner("--eval-data", "EVAL", field="eval_data", want="EVAL"),
    "--eval-split": learner("--eval-split", "0.1", field="heldout_fraction", want=0.1),
    "--field-map": learner("--field-map", "messages=messages", field="field_map", want={"messages": "messages"}),
    "--train-on": learner("--train-on", "all", field="train_on"),
    "--run-id": learner("--run-id", "r-walk-named", field="argv.run_id"),
    "--fragments": syncer("--fragments", "3", field="num_fragments", want=3),
    "--sync-every": syncer("--sync-every", "5", field="inner_steps", want=5),
    "--sync-every-start": syncer("--sync-ramp-steps", "30", "--sync-every-start", "6", field="inner_steps_start", want=6),
    "--sync-ramp-steps": syncer("--sync-every-start", "6", "--sync-ramp-steps", "30", field="inner_steps_ramp", want=30),
    "--outer-lr": syncer("--outer-lr", "0.5", field="outer_lr", want=0.5),
    "--outer-momentum": syncer("--outer-momentum", "0.5", field="momentum", want=0.5),
    "--merge-alpha": syncer("--merge-alpha", "0.25", field="alpha", want=0.25),
    "--merge": syncer("--merge", "avg", field="merge", want="avg"),
    "--momentum-restart": syncer("--momentum-restart", "off", field="momentum_restart", want="off"),
    "--momentum-restart-cos": syncer("--momentum-restart-cos", "-0.4", field="momentum_restart_cos", want=-0.4),
    "--global-apply": syncer("--global-apply", "rebase", field="global_apply", want="rebase"),
    "--quorum": syncer("--quorum", "2", field="quorum", want=2),
    "--codec": syncer("--codec", "topk2", field="codec_down", want="topk2"),
    "--codec-up": syncer("--codec", "topk2", "--codec-up", "topk4", field="codec_up", want="topk4"),
    "--codec-down": syncer("--codec-down", "topk4", field="codec_down", want="topk4"),
    "--feedback-decay": syncer("--feedback-decay", "0.9", field="feedback_decay", want=0.9),
    "--recover-timeout": launcher("--recover-timeout", "2m", field="recover_timeout_s", want=120.0),
    "--heartbeat-timeout": launcher("--heartbeat-timeout", "2m", field="heartbeat_timeout_s", want=120.0),
    "--local-price": launcher("--local-price", "0.5", field="price_per_hour", want=0.5),
    "--external-learners": launcher("--external-learners", "2", field="num_started", want=3),
    "--external-price": launcher("--external-learners", "1", "--external-price", "0.4", field="last_price", want=0.4),
    "--max-tokens": finalizer("--max-tokens", "5000", field="max_tokens", want=5000),
    "--max-time": finalizer("--max-time", "30m", field="max_time_s", want=1800.0),
    "--max-spend": finalizer("--max-spend", "3", field="max_spend", want=3.0),
    "--output": finalizer("--output", "/tmp/walk-out", field="output", want="/tmp/walk-out"),
    "--final-ack-timeout": finalizer("--final-ack-timeout", "2m", field="final_ack_timeout_s", want=120.0),
    "--budget-per-hour": planner("--budget", "25", field="budget", want=25.0),
    "--flops": planner("--flops", "900", field="flops", want=900.0),
    "--clouds": planner("--clouds", "aws,gcp", field="clouds", want=("aws", "gcp")),
    "--regions": planner("--regions", "us-east-1", field="regions", want=("us-east-1",)),
    "--exclude-regions": planner("--exclude-regions", "eu-west-1", field="exclude_regions", want=("eu-west-1",)),
    "--price-margin": planner("--price-margin", "0.3", field="price_margin", want=0.3),
    "--max-islands": planner("--max-islands", "3", field="max_islands", want=3),
    "--on-demand": planner("--on-demand", field="spot", want=False),
    "--spot": planner("--on-demand", "--spot", field="spot", want=True),
    "--head-price": planner("--head-price", "0.5", field="head_price", want=0.5),
    "--weights-gb": planner("--weights-gb", "3.5", field="weights_gb", want=3.5),
    "--syncers": planner("--syncers", "2", field="num_syncers", want=2),
    "--head-memory-gb": planner("--head-memory-gb", "64", field="head_memory_gb", want=64),
    "--catalog-dir": cli(CLOUD_HEAD + "test_the_planner_path_plans_here_and_reaches_the_heads_provisioning_without_a_stack"),
    "--confirm": cli(CLOUD_HEAD + "test_the_planner_path_plans_here_and_reaches_the_heads_provisioning_without_a_stack"),
    "--dry-run": cli("launch/test_launch_dry_run.py::"
                     "test_a_cloud_dry_run_shows_the_head_and_each_island_s_skypilot_task_and_calls_no_skypilot"),
    "--wait": cli("cli/test_cli_trackers.py::test_wait_on_a_terminal_follows_the_bus_with_the_live_view"),
    "--env-from-host": cli(CLOUD_HEAD + "test_env_from_host_names_must_be_names_and_hf_token_goes_when_set"),
    "--head-cloud": cli(CLOUD_HEAD + "test_an_unknown_head_cloud_is_refused_before_renting"),
    "--head-region": cli(CLOUD_HEAD + "test_launch_rents_the_head_records_it_privately_and_waits_until_it_answers"),
    "--head-nodes": cli("cloud/test_cloud_head_cluster.py::"
                        "test_a_head_over_three_vms_loses_one_mid_run_and_merges_on_loses_nothing_and_finalizes"),
    "--resume-from": cli("lineage/test_lineage_resume.py::"
                         "test_a_run_stopped_by_max_steps_resumes_where_it_stopped_like_one_uninterrupted_run"),
    "--branch-from": cli("lineage/test_lineage_resume.py::test_a_branch_records_its_parent_and_yeto_lineage_shows_the_tree"),
    "--report-to": cli("cli/test_cli_trackers.py::test_report_to_tensorboard_writes_what_tensorboard_reads_back"),
    "--report-dir": cli("cli/test_cli_trackers.py::test_report_to_wandb_offline_and_mlflow_files"),
    "--config": cli("cli/test_cli_config.py::test_the_axolotl_example_parses_into_the_launch_settings_and_flags_override_it"),
    "--state-dir": cli("cli/test_cli_conventions.py::test_global_flags_are_accepted_before_or_after_the_command"),
    "--nats-url": cli("cli/test_cli_conventions.py::test_global_flags_are_accepted_before_or_after_the_command"),
    "--model-kind": cli("diffusion/test_diffusion_launch.py::test_both_islands_push_to_merged_rounds_and_the_run_finalizes"),
    "--island-backend": cli("megatron/test_megatron_launch.py::"
                            "test_every_megatron_island_pushes_to_merged_rounds_and_the_run_finalizes"),
    "--megatron-tp": learner("--island-backend", "megatron", "--tuning", "full", "--gpu", "local:2xcpu", "--megatron-tp",
                             "2", field="tensor_parallel", want=2),
    "--oversubscribe-cpus": cli("megatron/test_megatron_oversubscribe.py::"
                                "test_the_launcher_allows_what_the_recipe_says_and_refuses_what_it_does_not"),
    "--resolution": cli("diffusion/test_diffusion_launch.py::test_the_artifact_loads_into_the_pipeline_with_load_lora_weights"),
    "--frames": cli("diffusion/test_diffusion_launch_dit.py::"
                    "test_an_ltx_video_run_on_two_islands_trains_on_clips_finalizes_and_its_artifact_loads"),
    "--height": cli("diffusion/test_diffusion_launch_dit.py::"
                    "test_an_ltx_video_run_on_two_islands_trains_on_clips_finalizes_and_its_artifact_loads"),
    "--width": cli("diffusion/test_diffusion_launch_dit.py::"
                   "test_an_ltx_video_run_on_two_islands_trains_on_clips_finalizes_and_its_artifact_loads"),
}


def launch_options() -> dict[str, Any]:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {max(a.option_strings, key=len): a for a in sub.choices["launch"]._actions if a.option_strings and a.dest != "help"}


def test_every_launch_flag_has_a_row_saying_where_it_acts():
    options = launch_options()
    assert not (missing := sorted(set(options) - set(WALK))), (
        f"flag(s) {', '.join(missing)} of `yeto launch` have no row in {__name__}.WALK: add where each one acts "
        f"(learner, syncer, launcher, finalizer, planner), or the test that covers it (cli)")
    assert not (gone := sorted(set(WALK) - set(options))), f"rows for flags `yeto launch` no longer has: {gone}"


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    root = tmp_path_factory.mktemp("walk")
    return {"MODEL": str(write_model_dir(root / "model")), "DATA": str(write_chat_jsonl(root / "chat.jsonl", 40)),
            "EVAL": str(write_chat_jsonl(root / "eval.jsonl", 8, 1)), "root": root}


def reached(reach: Reach, material, argv: tuple[str, ...]) -> Any:
    """What the acting process reads, from one launch built with `argv` (placeholders are the material's paths)."""
    from yeto.cli.shape import request_from_args
    from yeto.learners.lm_recipe import TrainRecipe
    from yeto.learners.shell import recipe_text
    from yeto.schemas.launch_recipe import LaunchRecipe
    from yeto.schemas.learner_contract import LearnerArgs
    from yeto.services.finalizer.budget import Limits
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.local import LocalBackend, torch_learner
    from yeto.services.launcher.logic import launch, setting
    from yeto.services.syncer import runs

    argv = tuple(material.get(a, a) for a in argv)
    base = ["launch", "--model", material["MODEL"], "--data", material["DATA"], "--seq-len", "64"]
    if reach.where == "planner":       # no --gpu: the planner picks the fleet from this request (a budget it needs)
        return getattr(request_from_args(build_parser().parse_args([*base, "--budget", "40", *argv])), reach.field)
    gpu = argv[argv.index("--gpu") + 1] if "--gpu" in argv else "local:1xcpu"
    args = build_parser().parse_args([*base, "--gpu", gpu, *argv])
    fleet = checks.fleet_entries(checks.parse_fleet(gpu), spot=args.spot, prices=[0.0], local_price=args.local_price)
    cmd = build_launch(args, args.run_id or "r-walk", fleet)
    msgs = [p.msg for p in launch(cmd)]
    launched, starts = msgs[0], [m for m in msgs if m.type == "StartIsland"]
    start = starts[0]
    if reach.where == "syncer":
        return getattr(SyncConfig.from_dict(runs.evolve(runs.SyncerState(), launched).runs[cmd.run_id].sync), reach.field)
    if reach.where == "launcher":
        return getattr(SimpleNamespace(recover_timeout_s=setting(start.recipe, "recover_timeout_s"),
                                       heartbeat_timeout_s=setting(start.recipe, "heartbeat_timeout_s"),
                                       price_per_hour=start.price_per_hour, num_started=len(starts),
                                       last_price=starts[-1].price_per_hour), reach.field)
    if reach.where == "finalizer":     # the recipe of the run's shared view, as the finalizer folds it
        recipe = fold(None, launched).recipe
        return getattr(SimpleNamespace(**vars(Limits.from_recipe(recipe)), output=LaunchRecipe.upcast(recipe).output,
                                       final_ack_timeout_s=LaunchRecipe.upcast(recipe).timeouts.final_ack_timeout_s),
                       reach.field)
    started: list[list[str]] = []      # the learner's command line, captured instead of run

    def capture(island_launch, recipe_path, rank, port):
        started.append(torch_learner(island_launch, recipe_path, rank, port))
        return ["true"]
    one = IslandLaunch(run_id=start.run_id, island=start.island, generation=start.generation, spec=start.spec,
                       recipe=start.recipe, num_islands=start.num_islands, nats_url="nats://127.0.0.1:4222")
    LocalBackend(Path(tempfile.mkdtemp(dir=material["root"])), rank_argv=capture).start(one)
    learner_args = LearnerArgs.parse(started[0][3:], prog=started[0][2])   # after `python -m yeto.learners.torch`
    if reach.field.startswith("argv."):
        return getattr(learner_args, reach.field.removeprefix("argv."))
    return getattr(TrainRecipe.from_json(recipe_text(learner_args.recipe)), reach.field)


ACTING = sorted(k for k, r in WALK.items() if r.where != "cli")


@pytest.mark.parametrize("flag", ACTING)
def test_a_flags_value_reaches_the_process_that_acts_on_it(flag, material):
    reach = WALK[flag]
    got = reached(reach, material, reach.argv)
    if reach.want is CHANGED:
        assert got != reached(reach, material, ()), f"{flag} changed nothing in the {reach.where}'s {reach.field}"
    else:
        want = material.get(reach.want, reach.want) if isinstance(reach.want, str) else reach.want
        assert got == want, f"{flag}: the {reach.where} reads {reach.field} = {got!r}, not {want!r}"


@pytest.mark.parametrize("flag", sorted(k for k, r in WALK.items() if r.where == "cli"))
def test_a_flag_the_cli_acts_on_names_a_test_that_exists(flag):
    path, name = WALK[flag].test.split("::")
    tree = ast.parse((TESTS / path).read_text())
    assert name in {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}, WALK[flag].test


PLANNED = "only shape the fleet the planner picks"


@pytest.mark.parametrize("flags, says", [(("--budget", "40"), PLANNED), (("--clouds", "aws"), PLANNED),
                                         (("--price-margin", "0.3"), PLANNED), (("--flops", "9"), PLANNED),
                                         (("--external-price", "0.5"), "bills joined learners, and there are none"),
                                         (("--head-cloud", "aws"), "only reach the run's head VM and cloud islands"),
                                         (("--env-from-host", "HOME"), "only reach the run's head VM and cloud islands"),
                                         (("--resolution", "64"), "sizes the images of a diffusion run"),
                                         (("--frames", "9"), "sizes the images of a diffusion run"),
                                         (("--seq-len", "64", "--model-kind", "diffusion"), "only reach the causal-LM learner"),
                                         (("--eval-data", "x.jsonl", "--model-kind", "diffusion"), "only reach the causal-LM"),
                                         (("--tuning", "full", "--model-kind", "diffusion"), "only reach the causal-LM"),
                                         (("--external-learners", "1", "--model-kind", "diffusion"), "not the diffusion")])
def test_a_flag_nothing_would_read_is_refused_before_anything_starts(flags, says, material):
    args = build_parser().parse_args(["launch", "--model", material["MODEL"], "--data", material["DATA"], "--gpu",
                                      "local:1xcpu", *flags])
    with pytest.raises(ValueError, match=f"{flags[0]}.* {says}"):
        build_launch(args, "r-walk", checks.fleet_entries(checks.parse_fleet("local:1xcpu"), spot=True, prices=[0.0]))
