"""`knowlyr export sft FILE` streams validated documents: the folder it writes holds what
export_sft of the models gives, and a bad line anywhere stops it with nothing written."""

from __future__ import annotations

import json

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_sft
from knowlyr.export.rewards import store_rewards
from knowlyr.reward.store_io import score_unscored
from knowlyr.store import Store
from knowlyr.train.run import load_dataset_dir
from knowlyr.trajectory import Trajectory
from tests.export.test_documents import _nan
from tests.export.test_sft_columns import generated_corpus

runner = CliRunner()


def _jsonl(path, trajs) -> None:
    path.write_bytes(b"".join(t.to_json() + b"\n" for t in trajs))


def rewarded(models: list[Trajectory], source) -> list[Trajectory]:
    """``models`` with the step rewards of a :class:`~knowlyr.export.rewards.RewardSource`
    (what its ``documents`` does to their JSON)."""
    return [
        t.model_copy(
            update={
                "steps": [
                    s.model_copy(update={"reward": r})
                    for s, r in zip(t.steps, source.steps[t.id], strict=True)
                ]
            }
        )
        for t in models
    ]


def _rules(models: list[Trajectory]):
    from knowlyr.export.rewards import rule_rewards

    return rule_rewards(lambda: (orjson.loads(t.to_json()) for t in models))


def test_file_export_is_the_model_export(tmp_path):
    trajs = generated_corpus(5, n=50)
    src = tmp_path / "in.jsonl"
    _jsonl(src, trajs)
    out = tmp_path / "out"
    r = runner.invoke(app, ["export", "sft", str(src), "-o", str(out), "--include-failed"])
    assert r.exit_code == 0, r.output
    models = [Trajectory.from_json(line) for line in src.read_bytes().splitlines()]
    rules = _rules(models)  # no --rewards: the rule layer's, computed for the export
    want = export_sft(rewarded(models, rules), system_prompt=DEFAULT_SYSTEM_PROMPT,
                      only_success=False, rewards=rules.totals, reward_source=rules.info)  # fmt: skip
    assert json.loads((out / "card.json").read_text())["params"]["rewards"]["source"] == "rules"
    assert _nan(load_dataset_dir(out).to_list()) == _nan(want.dataset.to_list())
    assert json.loads((out / "card.json").read_text()) == json.loads(
        json.dumps(want.card.to_dict(), default=str)
    )


def test_store_input_is_the_stored_trajectories(tmp_path):
    trajs = generated_corpus(6, n=30)
    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(trajs)
    score_unscored(store)
    out = tmp_path / "out"
    r = runner.invoke(app, ["export", "sft", "--store", store.url, "-o", str(out)])
    assert r.exit_code == 0, r.output
    models = store.read_trajectories()
    source = store_rewards(store)
    want = export_sft(rewarded(models, source), system_prompt=DEFAULT_SYSTEM_PROMPT,
                      rewards=source.totals, reward_source=source.info)  # fmt: skip
    assert _nan(load_dataset_dir(out).to_list()) == _nan(want.dataset.to_list())


def test_a_bad_line_after_good_ones_names_it_and_writes_nothing(tmp_path):
    trajs = generated_corpus(7, n=20)
    src = tmp_path / "in.jsonl"
    _jsonl(src, trajs)
    good = src.read_bytes()
    bad = orjson.loads(trajs[0].to_json())
    bad["steps"][0]["observation"] = {"exit_code": "boom"}
    src.write_bytes(good + b"\n" + orjson.dumps(bad) + b"\n{not json\n")
    out = tmp_path / "out"
    r = runner.invoke(app, ["export", "sft", str(src), "-o", str(out), "--include-failed"])
    assert r.exit_code == 2
    assert f"in.jsonl:{len(trajs) + 2}: not a trajectory (steps.0.observation.exit_code" in r.output
    assert not out.exists()


def test_export_from_store_reads_documents_into_the_model_dataset(tmp_path):
    from knowlyr.export.store_io import export_from_store

    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(generated_corpus(8, n=40))
    hashes = score_unscored(store).config_hashes
    out = export_from_store(
        store, trajectories_version=None, reward_config_hashes=hashes, split=None,
        only_success=False, min_reward=0.2, record=False,
    )  # fmt: skip
    source = store_rewards(store, config_hashes=hashes)
    models = rewarded(sorted(store.read_trajectories(), key=lambda t: t.id), source)
    want = export_sft(models, system_prompt=DEFAULT_SYSTEM_PROMPT, rewards=source.totals,
                      reward_source=source.info, only_success=False, min_reward=0.2)  # fmt: skip
    assert out.n_in == 40 and out.rows == len(want) > 0
    assert _nan(out.result.dataset.to_list()) == _nan(want.dataset.to_list())
    assert out.result.card.to_dict() == want.card.to_dict()
    assert out.result.rejected == want.rejected


def _reference(kind: str, trajs: list[Trajectory], **kw) -> list:
    from tests.export.test_documents import _dpo_reference, _grpo_reference

    kw["system_prompt"] = DEFAULT_SYSTEM_PROMPT
    return _dpo_reference(trajs, **kw)[0] if kind == "dpo" else _grpo_reference(trajs, **kw)


@pytest.mark.parametrize("kind", ["dpo", "grpo"])
def test_pair_and_group_exports_of_files_and_a_store_are_the_model_exports(kind, tmp_path):
    trajs = generated_corpus(9, n=40)
    src = tmp_path / "in.jsonl"
    _jsonl(src, trajs[:25])
    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(trajs[25:])
    score_unscored(store)
    out = tmp_path / "out"
    r = runner.invoke(app, ["export", kind, str(src), "--store", store.url, "-o", str(out)])
    assert r.exit_code == 0, r.output
    models = [Trajectory.from_json(line) for line in src.read_bytes().splitlines()]
    # the files' rewards: the rule layer's (no --rewards); the store's: its rewards
    source = _rules(models).merged(store_rewards(store))
    models = rewarded(models + list(store.iter_trajectories()), source)
    extra = {"min_margin": 0.1} if kind == "dpo" else {}
    want = _reference(kind, models, rewards=source.totals, **extra)
    assert _nan(load_dataset_dir(out).to_list()) == want and want
    card = json.loads((out / "card.json").read_text())
    assert card["params"]["input_trajectories"] == 40 and card["rows"] == len(want)


@pytest.mark.parametrize("kind", ["dpo", "grpo"])
def test_a_bad_line_stops_a_pair_or_group_export_naming_it(kind, tmp_path):
    src = tmp_path / "in.jsonl"
    _jsonl(src, generated_corpus(10, n=5))
    src.write_bytes(src.read_bytes() + b'{"task": {"task_id": "t"}, "steps": [1]}\n')
    out = tmp_path / "out"
    r = runner.invoke(app, ["export", kind, str(src), "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "error: INPUT: " in r.output and "in.jsonl:6: not a trajectory (steps.0" in r.output
    assert not out.exists()


@pytest.mark.parametrize("kind", ["dpo", "grpo"])
def test_pair_and_group_exports_from_store_read_documents(kind, tmp_path):
    from knowlyr.export.store_io import export_from_store

    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(generated_corpus(11, n=40))
    hashes = score_unscored(store).config_hashes
    out = export_from_store(
        store, trajectories_version=None, reward_config_hashes=hashes, split=None, kind=kind,
        record=False,
    )  # fmt: skip
    source = store_rewards(store, config_hashes=hashes)
    models = rewarded(sorted(store.read_trajectories(), key=lambda t: t.id), source)
    want = _reference(kind, models, rewards=source.totals)
    assert out.n_in == 40 and out.rows == len(want) > 0
    assert _nan(out.result.dataset.to_list()) == want
