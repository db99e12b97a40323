"""SFT, DPO and GRPO exports of the three real mini-swe-agent runs (tests/recorder/data), as a
user makes them: ``knowlyr export ... FILE -o DIR``, then ``datasets.load_dataset(DIR)`` and the
``trl`` command line.

The runs are labelled with their SWE-bench verdicts (README of the data folder). A pair or a
group needs two trajectories of a task, so each run also comes cut after half its steps, as a
failed attempt of the same task. django-15277 holds a reply with three bash blocks, which the
agent answered with its format error: an invalid action that must be in no row.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import Converted, iter_bytes
from knowlyr.recorder.adapters.mini_swe_agent import BASH_TOOL
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

RUNS = Path(__file__).parents[1] / "recorder" / "data" / "mini_swe_agent"
RESOLVED = {
    "django__django-11163": True,
    "django__django-15277": True,
    "astropy__astropy-7606": False,
}
FORMAT_ERROR = "Please always provide EXACTLY ONE action"
runner = CliRunner()


def _runs() -> list[Trajectory]:
    out = []
    for path in sorted(RUNS.glob("*.traj.json")):
        (r,) = list(iter_bytes(path.read_bytes(), path=str(path), redact=False))
        assert isinstance(r, Converted), r
        t = r.trajectory
        t.outcome.success = t.outcome.resolved = RESOLVED[t.task.task_id]
        cut = t.model_copy(deep=True)
        cut.steps = cut.steps[: len(cut.steps) // 2]
        cut.outcome.success = False
        out += [t, cut.rehash()]
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Any]:
    """The runs as JSONL, and the SFT, DPO and GRPO folders the CLI writes of them (GRPO is
    given the file twice, as a user exporting overlapping files would)."""
    tmp = tmp_path_factory.mktemp("msa")
    trajs = _runs()
    src = tmp / "runs.jsonl"
    src.write_bytes(b"".join(t.to_json() + b"\n" for t in trajs))
    out: dict[str, Any] = {"trajectories": trajs, "tmp": tmp}
    for kind, extra in (("sft", ["--include-failed"]), ("dpo", []), ("grpo", [str(src)])):
        folder = tmp / kind
        r = runner.invoke(app, ["export", kind, str(src), *extra, "-o", str(folder)])
        assert r.exit_code == 0, r.output
        out[kind] = folder
    scored = tmp / "rewards.json"
    r = runner.invoke(
        app, ["reward", "score", str(src), "-d", "coding", "-w", "1", "-o", str(scored)]
    )
    assert r.exit_code == 0, r.output
    out["rules"] = {
        x["trajectory_id"]: x["total"] for x in json.loads(scored.read_text())["rewards"]
    }
    return out


def _load(folder: Path):
    import datasets

    ds = datasets.load_dataset(str(folder))  # the README's configs: the parquet file
    assert list(ds) == ["train"]
    return ds["train"]


def _card(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "card.json").read_text())


def _conversations(kind: str, row: dict[str, Any]) -> list[list[dict[str, Any]]]:
    if kind == "sft":
        return [row["messages"]]
    if kind == "dpo":
        return [row["prompt"] + row["chosen"], row["prompt"] + row["rejected"]]
    return [row["prompt"]]


def test_the_runs_hold_one_invalid_action():
    trajs = _runs()
    bad = [
        (t.task.task_id, s.index) for t in trajs for s in t.steps if s.tool == INVALID_ACTION_TOOL
    ]
    assert bad == [("django__django-15277", 6), ("django__django-15277", 6)]  # run and its cut
    assert FORMAT_ERROR in trajs[4].steps[6].observation.output


@pytest.mark.parametrize("kind", ["sft", "dpo", "grpo"])
def test_no_row_calls_or_declares_an_invalid_action(exported, kind):
    rows = _load(exported[kind])
    assert len(rows) == {"sft": 6, "dpo": 2, "grpo": 3}[kind]
    for row in rows:
        assert INVALID_ACTION_TOOL not in json.dumps(row["tools"])
        for msgs in _conversations(kind, row):
            calls = [c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []]
            assert set(calls) <= {"bash"}
            text = json.dumps(msgs)
            assert FORMAT_ERROR not in text and "found 3 bash blocks" not in text
    card = _card(exported[kind])
    # the run with the invalid action, and its cut copy: both in every export
    assert card["invalid_actions"] == {"steps": 2, "trajectories": 2}
    assert "invalid actions left out: steps | 2" in (exported[kind] / "README.md").read_text()


def test_an_invalid_action_is_cut_with_its_answer_and_the_rest_is_kept(exported):
    trajs = {t.id: t for t in exported["trajectories"]}
    for row in _load(exported["sft"]):
        t = trajs[row["trajectory_id"]]
        valid = [s for s in t.steps if s.tool != INVALID_ACTION_TOOL]
        calls = [m for m in row["messages"] if m["role"] == "assistant"]
        assert [c["tool_calls"][0]["function"]["arguments"] for c in calls] == [
            s.action.params for s in valid
        ]
        assert row["n_steps"] == len(valid) == len(row["step_weights"])
        # no --rewards: the rule layer's total, what `knowlyr reward score` gives
        assert row["reward"] == exported["rules"][t.id]
    assert _card(exported["sft"])["params"]["rewards"]["source"] == "rules"


@pytest.mark.parametrize("kind", ["sft", "dpo", "grpo"])
def test_tools_are_the_agents_and_the_system_prompt_its_own(exported, kind):
    own = {t.task.task_id: t.metadata["system_prompt"] for t in exported["trajectories"]}
    assert len(set(own.values())) == 1 and "bash" in next(iter(own.values()))
    for row in _load(exported[kind]):
        assert row["tools"] == [BASH_TOOL]
        schema = row["tools"][0]["function"]
        assert schema["parameters"]["properties"]["command"]["type"] == "string"
        assert schema["parameters"]["required"] == ["command"]
        for msgs in _conversations(kind, row):
            assert msgs[0] == {"role": "system", "content": own[row["task_id"]]}


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_tool_call_ids_pair_up(exported, kind):
    n_calls = 0
    for row in _load(exported[kind]):
        for msgs in _conversations(kind, row):
            ids = [c["id"] for m in msgs for c in m.get("tool_calls") or []]
            assert len(ids) == len(set(ids)) and all(ids)
            answered = []
            for prev, m in itertools.pairwise(msgs):
                if m["role"] == "tool":  # answers the call right before it
                    assert m["tool_call_id"] == prev["tool_calls"][0]["id"]
                    assert m["name"] == prev["tool_calls"][0]["function"]["name"]
                    answered.append(m["tool_call_id"])
            assert answered == ids[:-1]  # every call but the last (nothing is learned from it)
            n_calls += len(ids)
    assert n_calls > 50


def test_grpo_groups_hold_each_trajectory_once(exported):
    rows = _load(exported["grpo"])
    card = _card(exported["grpo"])
    assert card["rejected"] == {"duplicate trajectory": 6}  # the file was given twice
    assert card["params"]["input_trajectories"] == 12 and card["trajectories"] == 6
    for row in rows:
        assert len(row["trajectory_ids"]) == len(set(row["trajectory_ids"])) == 2
        assert row["success"] == [RESOLVED[row["task_id"]], False]
        assert sorted(row["advantages"]) == pytest.approx(sorted(-a for a in row["advantages"]))


@pytest.mark.parametrize("kind", ["sft", "dpo", "grpo"])
def test_the_folder_loads_from_disk_too(exported, kind):
    import datasets

    folder = exported[kind]
    assert "load_from_disk" in (folder / "README.md").read_text()
    on_disk = datasets.load_from_disk(str(folder / "dataset"))
    assert on_disk.to_list() == _load(folder).to_list()


def _tiny_model(exported: dict[str, Any]) -> Path:
    """A tiny Qwen2 whose tokenizer learned the exported texts, saved as the CLI loads it."""
    from knowlyr.train.models import build_tiny_model

    path = exported["tmp"] / "model"
    if not path.exists():
        texts = [json.dumps(r["messages"]) for r in _load(exported["sft"])]
        model, tok = build_tiny_model(
            texts, hidden_size=32, num_layers=1, num_heads=2, max_positions=4096
        )
        model.save_pretrained(path)
        tok.save_pretrained(path)
    return path


@pytest.mark.slow  # two processes that import torch and trl: ~1 CPU-minute for both kinds
@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_the_trl_command_line_trains_two_steps_on_the_folder(exported, kind):
    out = exported["tmp"] / f"trl-{kind}"
    args = [
        *("--model_name_or_path", str(_tiny_model(exported))),
        *("--dataset_name", str(exported[kind]), "--output_dir", str(out)),
        *("--max_steps", "2", "--per_device_train_batch_size", "1", "--max_length", "3072"),
        *("--bf16", "false", "--use_cpu", "true", "--report_to", "none"),
        *("--save_strategy", "no", "--logging_steps", "1"),
    ]
    trl = Path(sys.executable).with_name("trl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env |= {"TRL_EXPERIMENTAL_SILENCE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [str(trl), kind, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'train_loss'" in done.stdout + done.stderr
    assert (out / "model.safetensors").is_file()


def test_exports_in_folders_of_one_name_each_load_their_own_rows(exported, tmp_path):
    # datasets caches a folder's rows under its name and its config's: each export's config
    # is its own, so the second export does not load the first one's rows
    src = exported["tmp"] / "runs.jsonl"
    for sub, extra, n in (("a", ["--include-failed"], 6), ("b", [], 2), ("c", [], 2)):
        folder = tmp_path / sub / "sft"
        r = runner.invoke(app, ["export", "sft", str(src), *extra, "-o", str(folder)])
        assert r.exit_code == 0, r.output
        assert len(_load(folder)) == n
    configs = {(tmp_path / x / "sft" / "README.md").read_text().split("\n")[2] for x in "abc"}
    assert len(configs) == 2  # b and c hold the same rows
