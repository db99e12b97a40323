from __future__ import annotations

import json

from typer.testing import CliRunner

from knowlyr.cli import app


def test_export_then_train_sft_from_the_command_line(tmp_path, expert_and_random):
    good, bad = expert_and_random
    src = tmp_path / "trajs.jsonl"
    src.write_bytes(b"\n".join(t.to_json() for t in good + bad) + b"\n")
    runner = CliRunner()
    out = runner.invoke(app, ["export", "sft", str(src), "-o", str(tmp_path / "sft")])
    assert out.exit_code == 0, out.output
    assert (
        f"sft: {len(good)} rows" in out.output
        and f"rejected {len(bad)}: not successful" in out.output
    )
    out = runner.invoke(
        app,
        [
            "train",
            "sft",
            str(tmp_path / "sft"),
            "-o",
            str(tmp_path / "run"),
            "--epochs",
            "1",
            "--step-weighted",
            "--curriculum",
            "--induction-steps",
            "5",
        ],
    )
    assert out.exit_code == 0, out.output
    assert (
        "induction pretraining: 5 of up to 5 steps in" in out.output
    )  # before training, by default 1000
    report = json.loads(out.output[out.output.rindex('{\n  "model"') :])
    assert report["model"].endswith("final") and report["train_loss"] > 0
    marker = json.loads((tmp_path / "run" / "final" / "knowlyr_model.json").read_text())
    assert marker["tools"][0]["function"]["name"] == "query_stats"
    bad_input = runner.invoke(
        app, ["export", "sft", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x")]
    )
    assert bad_input.exit_code != 0 and "does not exist" in bad_input.output


def test_train_defaults_learn_for_the_model_given_and_are_printed(tmp_path, expert_and_random):
    good, _ = expert_and_random
    src = tmp_path / "trajs.jsonl"
    src.write_bytes(b"\n".join(t.to_json() for t in good) + b"\n")
    runner = CliRunner()
    assert (
        runner.invoke(app, ["export", "sft", str(src), "-o", str(tmp_path / "sft")]).exit_code == 0
    )
    for cmd, lr in (("sft", "3e-3"), ("dpo", "5e-4"), ("grpo", "1e-4")):
        help_text = " ".join(runner.invoke(app, ["train", cmd, "--help"]).output.split())
        assert f"the tiny preset's {lr} for --model tiny, TRL's for a pretrained model" in help_text

    # --model tiny: the tiny preset's learning rate (TRL's 2e-5 leaves the loss near 6)
    out = runner.invoke(
        app,
        ["train", "sft", str(tmp_path / "sft"), "-o", str(tmp_path / "tiny"), "--epochs", "10",
         "--induction-steps", "0"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "learning_rate 0.003" in out.output and "the tiny preset's" in out.output
    report = json.loads(out.output[out.output.rindex('{\n  "model"') :])
    assert report["train_loss"] < 5.0

    # a checkpoint folder (a pretrained model): TRL's default, said so
    out = runner.invoke(
        app,
        ["train", "sft", str(tmp_path / "sft"), "--model", report["model"],
         "-o", str(tmp_path / "again"), "--epochs", "1"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "induction" not in out.output  # a pretrained model copies already
    assert "learning_rate 2e-05" in out.output and "TRL's SFTConfig default" in out.output
    out = runner.invoke(
        app,
        ["train", "sft", str(tmp_path / "sft"), "--model", report["model"],
         "-o", str(tmp_path / "lr"), "--epochs", "1", "--lr", "1e-4"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "learning_rate 0.0001" in out.output and "from --lr" in out.output


def test_tiny_learning_rates_are_the_flows_and_trainers_defaults():
    import inspect

    from knowlyr.train import checkpoints
    from knowlyr.train._defaults import TINY_LEARNING_RATES
    from tasks.train import TrainParams

    assert TINY_LEARNING_RATES["sft"] == TrainParams().learning_rate
    for method in ("sft", "dpo", "grpo"):
        fn = getattr(checkpoints, f"train_{method}_checkpoint")
        default = inspect.signature(fn).parameters["learning_rate"].default
        assert TINY_LEARNING_RATES[method] == default, method
