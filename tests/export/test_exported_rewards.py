"""Exports honour the rewards they are given: from a store, the chosen rewards version (its
totals, step rewards and margins, named in the card and the lineage); from files, a rewards
file (``--rewards``) or else the rule layer computed for the export. Through the real CLI on
a real store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.cli import app
from knowlyr.export.common import normalized_step_weights
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import sample
from knowlyr.trajectory import INVALID_ACTION_TOOL

RUNS = Path(__file__).resolve().parents[1] / "recorder" / "data" / "mini_swe_agent"
LABELS = {
    "django__django-11163": True,
    "django__django-15277": True,
    "astropy__astropy-7606": False,
}

runner = CliRunner()


def _cli(*args: str, code: int = 0) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == code, r.output
    return r.output


def _rows(folder: Path) -> list[dict]:
    return pq.read_table(folder / "data.parquet").to_pylist()


def _card(folder: Path) -> dict:
    return json.loads((folder / "card.json").read_text())


def _stored(store: Store, config: str | None = None) -> dict[str, tuple[float, list[float]]]:
    rows = store.read("rewards")
    if config is not None:
        rows = rows.filter(rows["config_hash"] == config)
    return {t: (x, s) for t, x, s in rows.select("trajectory_id", "total", "per_step").iter_rows()}


@pytest.fixture(scope="module")
def swe(tmp_path_factory) -> Store:
    """The three mini-swe-agent runs, ingested with their SWE-bench labels and scored."""
    tmp = tmp_path_factory.mktemp("swe")
    logs = tmp / "logs"
    logs.mkdir()
    for f in RUNS.glob("*.traj.json"):
        shutil.copy(f, logs / f.name)
    (tmp / "labels.json").write_text(json.dumps({"resolved": LABELS}))
    url = str(tmp / "store")
    _cli("ingest", str(logs), "--store", url, "-w", "1", "--results", str(tmp / "labels.json"))
    _cli("reward", "score", "--store", url, "-o", str(tmp / "rewards.json"))
    return Store.open(url)


def test_sft_from_a_store_takes_its_rewards_and_says_which(swe, tmp_path):
    stored = _stored(swe)
    out = tmp_path / "sft"
    printed = _cli("export", "sft", "--store", swe.url, "--include-failed", "-o", str(out))
    (config,) = set(swe.read("rewards")["config_hash"])
    assert f"rewards: {swe.url} rewards@0 (config {config})" in printed
    rows = _rows(out)
    assert len(rows) == 3
    trajs = {t.id: t for t in swe.read_trajectories()}
    for row in rows:
        total, per_step = stored[row["trajectory_id"]]
        assert row["reward"] == total  # the stored total, not the outcome's 1.0 / 0.0
        valid = [
            r for s, r in zip(trajs[row["trajectory_id"]].steps, per_step, strict=True)
            if s.tool != INVALID_ACTION_TOOL
        ]  # fmt: skip
        assert row["step_weights"] == normalized_step_weights(valid, mix=0.5)
    assert {r["reward"] < 0.5 for r in rows} == {True, False}  # the labelled failure is low
    card = _card(out)
    assert card["params"]["rewards"] == {
        "source": "store", "store": swe.url, "trajectories_version": 0, "rewards_version": 0,
        "config_hashes": [config],
    }  # fmt: skip
    assert card["reward"]["mean"] == pytest.approx(sum(x for x, _ in stored.values()) / 3)

    # --min-reward filters on the stored totals
    cut = sorted(x for x, _ in stored.values())[1]
    out = tmp_path / "kept"
    printed = _cli("export", "sft", "--store", swe.url, "--include-failed",
                   "--min-reward", str(cut), "-o", str(out))  # fmt: skip
    assert {r["trajectory_id"] for r in _rows(out)} == {t for t, v in stored.items() if v[0] >= cut}
    assert "rejected 1: reward" in printed


def test_the_rewards_version_and_config_are_chosen_and_recorded(swe, tmp_path):
    store = Store.open(str(tmp_path / "copy"))
    store.add_trajectories(swe.read_trajectories())
    first = score_unscored(store).config_hashes[0]
    second = score_unscored(store, outcome_weight=0.9).config_hashes[0]  # rewards@1
    out = tmp_path / "grpo"
    printed = _cli("export", "grpo", "--store", store.url, "-o", str(out), code=1)
    assert "several reward configs" in printed and first in printed and second in printed
    assert "--reward-config" in printed
    for config, version in ((second, None), (first, None), (first, 0)):
        extra = ["--reward-config", config] if version is None else ["--rewards-version", "0"]
        _cli("export", "grpo", "--store", store.url, *extra, "-o", str(out))
        stored = _stored(store, config)
        for row in _rows(out):
            assert row["rewards"] == [stored[t][0] for t in row["trajectory_ids"]]
        info = _card(out)["params"]["rewards"]
        assert info["config_hashes"] == [config]
        assert info["rewards_version"] == (1 if version is None else 0)
    printed = _cli("export", "grpo", "--store", store.url, "--reward-config", "nope",
                   "-o", str(out), code=1)  # fmt: skip
    assert "have no reward in rewards@1 under nope" in printed and "reward score" in printed


def test_an_unscored_store_is_an_error_naming_the_command(tmp_path):
    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(collect("knowlyr/conversation", ExpertAgent, 2, seed=0))
    out = tmp_path / "out"
    printed = _cli("export", "sft", "--store", store.url, "-o", str(out), code=1)
    assert "holds no rewards" in printed and f"knowlyr reward score --store {store.url}" in printed
    assert not out.exists()
    printed = _cli("export", "sft", "--rewards", "r.json", "--store", store.url, "-o", str(out),
                   code=2)  # fmt: skip
    assert "--rewards" in printed and "INPUT files" in printed


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Store:
    """Expert and random episodes of the same tasks, scored."""
    ids = [t.task_id for t in sample("conversation", 5, seed=0, family="order_status")]
    store = Store.open(str(tmp_path_factory.mktemp("pairs") / "store"))
    store.add_trajectories(
        collect("knowlyr/conversation", ExpertAgent, len(ids), tasks=ids, seed=0)
        + collect("knowlyr/conversation", lambda: RandomAgent(seed=1), len(ids), tasks=ids, seed=1)
    )
    score_unscored(store)
    return store


def test_dpo_margins_and_grpo_step_rewards_are_the_stored_ones(pairs, tmp_path):
    stored = _stored(pairs)
    _cli("export", "dpo", "--store", pairs.url, "--min-margin", "0.05", "-o", str(tmp_path / "d"))
    rows = _rows(tmp_path / "d")
    assert rows
    for row in rows:
        chosen, rejected = stored[row["chosen_id"]][0], stored[row["rejected_id"]][0]
        assert row["margin"] == chosen - rejected
    assert _card(tmp_path / "d")["params"]["rewards"]["source"] == "store"
    _cli("export", "grpo", "--store", pairs.url, "-o", str(tmp_path / "g"))
    for row in _rows(tmp_path / "g"):
        assert row["rewards"] == [stored[t][0] for t in row["trajectory_ids"]]
        assert row["step_rewards"] == [stored[t][1] for t in row["trajectory_ids"]]


def test_files_take_a_rewards_file_or_the_rules_and_the_card_says_which(pairs, tmp_path):
    src = tmp_path / "trajs.jsonl"
    src.write_bytes(b"".join(t.to_json() + b"\n" for t in pairs.read_trajectories()))
    scored = tmp_path / "rewards.json"
    _cli("reward", "score", str(src), "-d", "conversation", "--outcome-weight", "0.9", "-w", "1",
         "-o", str(scored))  # fmt: skip
    given = {r["trajectory_id"]: r["total"] for r in json.loads(scored.read_text())["rewards"]}
    out = tmp_path / "given"
    printed = _cli("export", "sft", str(src), "--rewards", str(scored), "--include-failed",
                   "-o", str(out))  # fmt: skip
    assert f"rewards: {scored.resolve()}" in printed
    assert {r["trajectory_id"]: r["reward"] for r in _rows(out)} == given
    assert _card(out)["params"]["rewards"]["source"] == "file"

    # no --rewards: the rule layer of each trajectory's domain, the store's numbers here
    out = tmp_path / "rules"
    printed = _cli("export", "sft", str(src), "--include-failed", "-o", str(out))
    assert "rewards: the rule layer, computed now" in printed
    stored = _stored(pairs)
    assert {r["trajectory_id"]: r["reward"] for r in _rows(out)} == {
        t: v[0] for t, v in stored.items()
    }
    info = _card(out)["params"]["rewards"]
    assert info["source"] == "rules" and info["config_hashes"] == sorted(
        set(pairs.read("rewards")["config_hash"])
    )

    # a rewards file that lacks a trajectory: an error naming it and the fix
    partial = tmp_path / "partial.json"
    doc = json.loads(scored.read_text())
    doc["rewards"] = doc["rewards"][1:]
    partial.write_text(json.dumps(doc))
    printed = _cli("export", "sft", str(src), "--rewards", str(partial), "--include-failed",
                   "-o", str(tmp_path / "x"), code=1)  # fmt: skip
    assert "has no reward in the rewards file" in printed and "knowlyr reward score" in printed
