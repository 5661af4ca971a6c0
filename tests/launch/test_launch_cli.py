"""`yeto launch` refuses what it can check before renting, with messages that say what to fix; and what it builds."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser, main
from yeto.schemas.gpuspec import parse_gpu

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch-cli")
    return write_model_dir(root / "model"), write_chat_jsonl(root / "chat.jsonl", 40)


def run(capsys, tmp_path, *argv) -> tuple[int, str]:
    code = main(["--state-dir", str(tmp_path / "state"), "launch", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("gpu, says", [
    ("aws:8xa1000", "unknown GPU 'a1000'"),
    ("moon:8xh100", "unknown cloud 'moon'"),
    ("local:1xtpu", "a local island runs on 'cpu', 'cuda' or 'npu'"),
    ("local:1xcpu,aws:8xh100", "mixes local and cloud islands"),
])
def test_bad_gpu_entries_are_refused_naming_the_entry(capsys, tmp_path, material, gpu, says):
    model, data = material
    code, err = run(capsys, tmp_path, "--gpu", gpu, "--model", str(model), "--data", str(data))
    assert code == 2 and says in err
    assert not (tmp_path / "state" / "stack.json").exists()            # nothing was started


def test_bad_data_is_refused_with_its_row_before_a_stack_starts(capsys, tmp_path, material):
    model, _ = material
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{not json\n')
    code, err = run(capsys, tmp_path, "--gpu", "local:1xcpu", "--model", str(model), "--data", str(bad))
    assert code == 2 and "bad.jsonl" in err and "line 2" in err
    assert not (tmp_path / "state" / "stack.json").exists()


@pytest.mark.parametrize("flags, says", [
    (["--model", "/no/such/model"], "no such directory"),
    (["--max-time", "soon"], "--max-time 'soon'"),
    (["--merge-alpha", "1.5"], "alpha must be in [0, 1)"),
    (["--sync-every-start", "6"], "both above 0 (a ramp) or both 0 (set by --sync-every-start, --sync-ramp-steps)"),
    (["--sync-every", "4", "--sync-every-start", "6", "--sync-ramp-steps", "9"], "must be in [0, inner_steps = 4]"),
    (["--recover-timeout", "x"], "--recover-timeout"),
    (["--heartbeat-timeout", "x"], "--heartbeat-timeout"),
    (["--momentum-restart-cos", "0.5"], "momentum_restart_cos must be in [-1, 0]"),
    (["--momentum-restart", "off", "--momentum-restart-cos", "-0.5"], "applies only with momentum_restart opposed"),
    (["--momentum-restart", "damped", "--momentum-restart-cos", "-0.5"], "ignored with off or damped"),
    (["--codec", "zip"], "--codec: unknown codec 'zip'; use one of f32, bf16, q4, topk2, topk4, topk8"),
    (["--codec-up", "zip"], "must be one of f32, bf16, q4, topk2, topk4, topk8 (set by --codec-up, --codec-down)"),
])
def test_bad_model_limits_and_sync_settings_are_refused(capsys, tmp_path, material, flags, says):
    model, data = material
    argv = ["--gpu", "local:1xcpu", "--model", str(model), "--data", str(data), *flags]
    code, err = run(capsys, tmp_path, *argv)
    assert code == 2 and says in err


def test_an_island_too_small_for_the_model_is_refused_before_renting():
    with pytest.raises(ValueError, match="needs .* GB per GPU"):
        checks.check_memory_fit(parse_gpu("aws:1xt4"), weights_gb=140.0, tuning="lora", base_quantization="none",
                                seq_len=4096, micro_batch=1)
    checks.check_memory_fit(parse_gpu("aws:8xh100"), weights_gb=16.0, tuning="lora", base_quantization="none",
                            seq_len=4096, micro_batch=1)


def test_durations_read_seconds_minutes_hours_and_days():
    assert [checks.duration_s(t, "--max-time") for t in ("90", "90s", "30m", "2h", "1d", None)] == [
        90, 90, 1800, 7200, 86400, None]


def test_the_launch_command_carries_fleet_recipe_limits_and_the_data_fingerprint(material):
    model, data = material
    args = build_parser().parse_args(["launch", "--gpu", "local:1xcpu,local:1xcpu", "--model", str(model), "--data", str(data),
                                      "--max-steps", "30", "--max-spend", "2", "--max-time", "1h", "--fragments", "2",
                                      "--sync-every", "4", "--seq-len", "64", "--output", "/tmp/x"])
    fleet = checks.fleet_entries(checks.parse_fleet(args.gpu), spot=args.spot, prices=[0.0, 0.0])
    cmd = build_launch(args, "r-test", fleet)
    assert [f["cloud"] for f in cmd.fleet] == ["local", "local"] and all(f["price_per_hour"] == 0.0 for f in cmd.fleet)
    assert cmd.recipe["limits"] == {"max_steps": 30, "max_tokens": None, "max_time_s": 3600.0, "max_spend": 2.0}
    assert cmd.recipe["train"]["max_steps"] == 30 and cmd.recipe["train"]["seq_len"] == 64
    sync = cmd.recipe["train"]["sync"]          # the typed recipe's wire form: every setting, the flags' among them
    assert (sync["num_fragments"], sync["inner_steps"]) == (2, 4) and cmd.recipe["recipe_version"] == 2
    assert len(cmd.recipe["data_check"]["fingerprint"]) == 64 and cmd.recipe["output"] == "/tmp/x"
    assert cmd.id == build_launch(args, "r-test", fleet).id                       # derived: a re-run publishes once
    (checked,) = checks.data_events(cmd)                                          # the data check goes on the tape
    assert checked.type == "DataChecked" and checked.causation_id == cmd.id and checked.run_id == "r-test"
    assert checked.fingerprint == cmd.recipe["data_check"]["fingerprint"] and checked.num_rows > 0


def test_skipped_bad_rows_are_recorded_on_the_tape(material, tmp_path):
    model, data = material
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text() + '{"messages": []}\n[1, 2]\n')
    argv = ["launch", "--gpu", "local:1xcpu", "--model", str(model), "--data", str(bad), "--max-steps", "3", "--seq-len", "64"]
    with pytest.raises(ValueError, match="is not usable"):
        build_launch(build_parser().parse_args(argv), "r-bad", [])
    cmd = build_launch(build_parser().parse_args(argv + ["--on-bad-rows", "skip"]), "r-bad", [])
    checked, skipped = checks.data_events(cmd)
    assert checked.num_bad == 2 and skipped.num_skipped == 2
    assert any("line" in row for row in skipped.rows), skipped.rows


def test_down_and_chaos_are_commands(capsys):
    parser = build_parser()
    assert parser.parse_args(["down", "r1", "--now"]).now is True
    assert parser.parse_args(["chaos", "kill", "r1", "1"]).island == 1


@pytest.mark.parametrize("flags, says", [
    (["--gpu", "local:99999999999xcpu"], "CPU learner processes and this machine has"),
    (["--gpu", "local:1xcpu", "--lr", "nan"], "--lr nan: must be a finite number > 0"),
    (["--gpu", "local:1xcpu", "--max-spend", "-1"], "--max-spend -1.0: must be a finite number > 0"),
])
def test_fleets_over_the_caps_and_numbers_that_are_not_finite_are_refused(capsys, tmp_path, material, flags, says):
    model, data = material
    code, err = run(capsys, tmp_path, "--model", str(model), "--data", str(data), *flags)
    assert code == 2 and says in err, err
    assert not (tmp_path / "state" / "stack.json").exists()


def test_full_tuning_defaults_to_the_mean_merge_and_plain_nesterov_and_lora_keeps_rda_and_the_restart():
    """`--tuning full` takes the token-weighted mean and no momentum restart unless told (both measured on full tuning:
    docs/BENCHMARK_RESULTS.md claims 4-5); LoRA keeps the recipe's RDA and restart; a flag always wins."""
    from yeto.cli.launch import checks
    from yeto.cli.main import build_parser
    from yeto.schemas.recipe import SyncConfig

    def settings(*flags):
        args = build_parser().parse_args(["launch", "--gpu", "local:1xcpu", "--model", "m", "--data", "d", *flags])
        return {**SyncConfig().to_dict(), **checks.sync_settings(args)}

    full, lora = settings("--tuning", "full"), settings("--tuning", "lora")
    assert (full["merge"], full["momentum_restart"]) == ("avg", "off")
    assert (lora["merge"], lora["momentum_restart"]) == ("rda", "opposed") == (SyncConfig.merge, SyncConfig.momentum_restart)
    told = settings("--tuning", "full", "--merge", "rda", "--momentum-restart", "opposed")
    assert (told["merge"], told["momentum_restart"]) == ("rda", "opposed")
