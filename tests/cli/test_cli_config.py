"""`yeto launch -c FILE` and the recipe flags: each setting reaches the TrainRecipe the learner parses, which uses it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import tiny_model, write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.launch import recipe as launch_recipe
from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser, main
from yeto.learners.lm_recipe import TrainRecipe

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "configs" / "axolotl_lora.yaml"


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    root = tmp_path_factory.mktemp("config")
    return write_model_dir(root / "model"), write_chat_jsonl(root / "chat.jsonl", 60), write_chat_jsonl(root / "eval.jsonl", 8, 1)


def launch_of(argv: list[str], gpu: str = "local:1xcpu,local:1xcpu"):
    args = build_parser().parse_args(["launch", "--gpu", gpu, *argv])
    fleet = checks.fleet_entries(checks.parse_fleet(gpu), spot=args.spot, prices=[0.0] * len(gpu.split(",")))
    return build_launch(args, "r-config", fleet)


def test_every_recipe_flag_reaches_the_train_recipe_and_the_learner_uses_it(material):
    model, data, held = material
    cmd = launch_of(["--model", str(model), "--data", str(data), "--seq-len", "64", "--max-steps", "12",
                     "--lora-r", "4", "--lora-alpha", "8", "--lora-dropout", "0.1", "--target-modules", "q_proj,v_proj",
                     "--grad-accum", "3", "--lr-schedule", "linear", "--weight-decay", "0.05", "--eval-every", "5",
                     "--eval-data", str(held), "--train-on", "all", "--field-map", "messages=messages"])
    recipe = TrainRecipe.from_dict(cmd.recipe["train"])     # what the learner parses
    assert (recipe.lora_r, recipe.lora_alpha, recipe.lora_dropout, recipe.target_modules) == (4, 8, 0.1, ("q_proj", "v_proj"))
    assert (recipe.grad_accum, recipe.schedule, recipe.weight_decay, recipe.eval_every) == (3, "linear", 0.05, 5)
    assert (recipe.eval_data, recipe.heldout_fraction, recipe.train_on) == (str(held), 0.0, "all")
    assert recipe.field_map == {"messages": "messages"} and cmd.recipe["config"]["lora_alpha"] == 8

    from yeto.learners.torch.optim import build_optimizer, lr_at
    from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
    lora = apply_tuning(tiny_model(300), recipe)
    cfg = lora.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, set(cfg.target_modules)) == (4, 8, 0.1, {"q_proj", "v_proj"})
    opt = build_optimizer(trainable_parameters(lora), recipe)
    assert opt.param_groups[0]["weight_decay"] == 0.05
    # linear: halfway through the decay the rate is halfway between lr and the floor (cosine is not, at a quarter)
    flat = recipe.replace(warmup_steps=0, max_steps=100)
    assert lr_at(50, flat) == pytest.approx((flat.lr + flat.min_lr_ratio * flat.lr) / 2)
    assert lr_at(25, flat) != pytest.approx(lr_at(25, flat.replace(schedule="cosine")))


def test_grad_accum_eval_data_and_eval_cadence_are_what_the_learner_runs(material, tmp_path):
    model, data, held = material
    from yeto.learners import shell
    from yeto.learners.torch.backend import TorchBackend
    recipe = TrainRecipe(model=str(model), data=str(data), eval_data=str(held), heldout_fraction=0.0, seq_len=32,
                         micro_batch=2, grad_accum=2, max_steps=4, warmup_steps=1, eval_every=2, lora_r=2)
    from transformers import AutoTokenizer

    from yeto.learners.torch.batches import heldout_batches
    assert heldout_batches(recipe, AutoTokenizer.from_pretrained(model))    # the eval set of its own is read
    (tmp_path / "r.json").write_text(recipe.to_json())
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        backend = TorchBackend()
        shell.run(backend, shell.parse(backend, ["--run-id", "r", "--learner", "l0", "--recipe", str(tmp_path / "r.json"),
                                                 "--no-sync", "--device", "cpu", "--log-every-s", "1000",
                                                 "--log-format", "json"]))
    import json
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    evaluated = [x["step"] for x in lines if x.get("event") == "step" and x.get("heldout") is not None]
    assert evaluated == [2, 4]                                              # the recipe's eval_every, no flag
    assert lines[-1]["event"] == "done" and lines[-1]["steps"] == 4


def test_an_evaluated_step_reaches_the_tape_at_once_with_its_eval_loss():
    from yeto.learners.torch.loop import StepResult
    from yeto.learners.transport.reports import Reports
    reports = Reports(run_id="r", learner="l0", generation=0, progress_every_s=60.0, started_at=0.0)
    step = StepResult(step=1, loss=2.0, tokens=10, seconds=0.1, lr=1e-4, synced=False)
    assert reports.progress(step, 1.0) is not None and reports.progress(step, 2.0) is None     # rate-limited
    event = reports.progress(StepResult(step=2, loss=1.9, tokens=10, seconds=0.1, lr=1e-4, synced=False, eval_loss=1.5), 3.0)
    assert event is not None and event.eval_loss == 1.5 and event.type == "LearnerProgress"
    from yeto.schemas.run_view import fold
    assert fold(None, event).learners["l0"].eval_loss == 1.5


def test_epochs_count_steps_from_the_packed_tokens(material):
    model, data, _ = material
    cmd = launch_of(["--model", str(model), "--data", str(data), "--seq-len", "32", "--micro-batch", "2", "--epochs", "2"])
    tokens, steps = cmd.recipe["data_check"]["num_tokens"], cmd.recipe["train"]["max_steps"]
    blocks = -(-int(tokens * 0.98) // 32)
    assert abs(steps - 2 * blocks / 2 / 2) <= 2 and cmd.recipe["limits"]["max_steps"] == steps
    with pytest.raises(ValueError, match="--epochs or --max-steps"):
        launch_of(["--model", str(model), "--data", str(data), "--epochs", "1", "--max-steps", "3"])


def test_the_axolotl_example_parses_into_the_launch_settings_and_flags_override_it(material, capsys):
    model, _, _ = material
    args = build_parser().parse_args(["launch", "-c", str(EXAMPLE), "--model", str(model), "--max-steps", "7"])
    launch_recipe.apply_config(args, echo=True)
    s = launch_recipe.settings(args)
    assert (s["model"], s["data"], s["max_steps"], s["epochs"]) == (str(model), "examples/data/chat_demo.jsonl", 7, None)
    assert (s["lora_r"], s["lora_alpha"], s["lora_dropout"], s["target_modules"]) == (16, 32, 0.05, "q_proj,v_proj")
    assert (s["lr"], s["grad_accum"], s["micro_batch"], s["seq_len"], s["schedule"]) == (2e-4, 2, 2, 512, "cosine")
    assert (s["warmup_steps"], s["weight_decay"], s["eval_every"], s["eval_split"]) == (10, 0.0, 10, 0.1)
    assert s["train_on"] == "assistant" and s["activation_checkpointing"] == "off" and s["tuning"] == "lora"
    shown = capsys.readouterr().out
    assert "sample_packing: ignored" in shown and "lora_alpha: 32" in shown


def test_llama_factory_keys_in_toml_and_the_config_on_the_tape(material, tmp_path):
    model, data, _ = material
    (tmp_path / "run.toml").write_text(f'model_name_or_path = "{model}"\ndataset = "{data}"\nlora_rank = 4\n'
                                       f'cutoff_len = 64\nper_device_train_batch_size = 2\nmax_steps = 5\n'
                                       f'lr_scheduler_type = "constant"\nnum_train_epochs = 3.0\n')
    cmd = launch_of(["-c", str(tmp_path / "run.toml")])
    train = cmd.recipe["train"]
    assert (train["lora_r"], train["seq_len"], train["micro_batch"], train["schedule"]) == (4, 64, 2, "constant")
    assert cmd.recipe["config"]["config"] == str(tmp_path / "run.toml") and cmd.recipe["config"]["lora_r"] == 4


@pytest.mark.parametrize("text, says", [
    ("base_model: m\nlora_alpah: 8\n", "unknown key 'lora_alpah'; did you mean lora_alpha"),
    ("base_model: m\nlearning_rat: 0.1\n", "did you mean learning_rate"),
    ("base_model: m\noptimizer: sgd\n", "inner optimizer is AdamW"),
    ("base_model: m\nlr_scheduler: polynomial\n", "is not one of cosine, linear, constant"),
    ("- a\n", "a table of settings"),
])
def test_wrong_keys_are_refused_with_a_did_you_mean(capsys, tmp_path, text, says):
    (tmp_path / "bad.yaml").write_text(text)
    code = main(["--state-dir", str(tmp_path / "s"), "launch", "-c", str(tmp_path / "bad.yaml"), "--data", "x.jsonl"])
    assert code == 2 and says in capsys.readouterr().err


AXOLOTL = """base_model: m
datasets:
  - path: chat.jsonl
    type: chat_template
chat_template: chatml
special_tokens:
  pad_token: "<|endoftext|>"
deepspeed: deepspeed_configs/zero2.json
evals_per_epoch: 4
saves_per_epoch: 1
lora_r: 16
lora_alpah: 32
warmup_ratio: 0.1
learning_rate: 2.0e-4
"""


def test_an_axolotl_config_gets_every_unusable_key_at_once_each_with_what_to_do(capsys, tmp_path):
    (tmp_path / "axolotl.yaml").write_text(AXOLOTL)
    code = main(["--state-dir", str(tmp_path / "s"), "launch", "-c", str(tmp_path / "axolotl.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "4 keys Yeto cannot use" in err
    assert "chat_template: the chat template is the tokenizer's own" in err
    assert "special_tokens: Yeto trains with the base tokenizer's own special tokens" in err
    assert "unknown key 'lora_alpah'; did you mean lora_alpha?" in err
    assert "warmup_ratio: give warmup_steps" in err
    # Keys whose intent Yeto covers its own way are accepted with a sentence, listed in the same pass.
    assert "deepspeed: ignored (inside an island Yeto runs DDP, or FSDP2 shards" in err
    assert "evals_per_epoch: ignored (give eval_steps" in err and "saves_per_epoch: ignored (the syncer snapshots" in err
    assert "template?" not in err and "seed?" not in err and "max_tokens?" not in err    # no edit-distance guesses


def test_a_chat_template_that_names_the_tokenizers_own_is_accepted(tmp_path):
    (tmp_path / "run.yaml").write_text("base_model: m\ndataset: d.jsonl\nchat_template: tokenizer_default\n")
    args = build_parser().parse_args(["launch", "-c", str(tmp_path / "run.yaml")])
    launch_recipe.apply_config(args)
    assert args.model == "m" and args.data == "d.jsonl"


def test_model_and_data_are_required_from_a_flag_or_the_file(capsys, tmp_path):
    assert main(["--state-dir", str(tmp_path / "s"), "launch", "--data", "x.jsonl"]) == 2
    assert "--model required" in capsys.readouterr().err


def test_one_seq_len_default_across_commands():
    p = build_parser()
    defaults = [p.parse_args(argv).seq_len for argv in (["launch", "--model", "m", "--data", "d"],
                                                        ["shape", "--model", "m"], ["data", "check", "--data", "d"])]
    assert defaults == [launch_recipe.SEQ_LEN] * 3 == [1024] * 3


def test_repeated_flags_and_llama_factory_all_targets_from_a_file(tmp_path):
    (tmp_path / "run.yaml").write_text("model_name_or_path: m\ndataset: d.jsonl\nlora_target: all\n"
                                       "report_to: [tensorboard]\nenv_from_host: [HF_TOKEN, WANDB_API_KEY]\n")
    args = build_parser().parse_args(["launch", "-c", str(tmp_path / "run.yaml")])
    launch_recipe.apply_config(args)
    assert args.report_to == ["tensorboard"] and args.env_from_host == ["HF_TOKEN", "WANDB_API_KEY"]
    assert args.target_modules is None and (args.model, args.data) == ("m", "d.jsonl")


def test_bad_eval_data_is_refused_before_anything_starts(material, tmp_path):
    model, data, _ = material
    (tmp_path / "eval.jsonl").write_text('{"messages": [{"role": "user"}]}\n')
    with pytest.raises(ValueError, match="--eval-data .* is not usable"):
        launch_of(["--model", str(model), "--data", str(data), "--eval-data", str(tmp_path / "eval.jsonl")])
    with pytest.raises(ValueError, match="--eval-every needs held-out data"):
        launch_of(["--model", str(model), "--data", str(data), "--eval-every", "5", "--eval-split", "0"])


def test_launch_without_a_fleet_or_a_budget_suggests_the_local_fleet(capsys, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    code = main(["--state-dir", str(tmp_path / "s"), "launch", "--model", "smollm2-135m", "--data", str(data)])
    err = capsys.readouterr().err
    assert code == 2 and "--budget-per-hour" in err and "--gpu local:1xcpu,local:1xcpu" in err
