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
        ],
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.output[out.output.rindex('{\n  "model"') :])
    assert report["model"].endswith("final") and report["train_loss"] > 0
    marker = json.loads((tmp_path / "run" / "final" / "knowlyr_model.json").read_text())
    assert marker["tools"][0]["function"]["name"] == "query_stats"
    bad_input = runner.invoke(
        app, ["export", "sft", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x")]
    )
    assert bad_input.exit_code != 0 and "does not exist" in bad_input.output
