"""The batch computation of the engine's formula and the document path of the rule layer:
bit for bit what the per-step loop gives, and the same rows from JSON documents as from models."""

from __future__ import annotations

import functools
import math
import random

import orjson
import pytest

from knowlyr.reward.calibration import CalibrationMap
from knowlyr.reward.combine import segment_sums
from knowlyr.reward.engine import RewardEngine, rewards_frame
from knowlyr.reward.rules import score_documents, score_rules
from knowlyr.trajectory import AgentInfo, Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory
from tests.reward.corpus import make_corpus
from tests.reward.helpers import load_fixture
from tests.reward.reference_engine import reference_rewards


def _hostile(n: int, seed: int = 5) -> list[Trajectory]:
    """Unicode, huge outputs, NaN and missing step rewards, missing optional fields, a
    duplicated trajectory id, empty trajectories, resolved-only outcomes."""
    rng = random.Random(seed)
    out = []
    for t in range(n):
        steps = []
        for i in range(rng.choice([0, 1, 5, 30])):
            tool = rng.choice(["read_file", "bash", "edit_file", "grep", "ツール"])
            params = rng.choice([{"path": "ü/ß.py"}, {"command": "echo 🙂 $X"}, {},
                                 {"path": "a.py", "old": "x", "new": "y"}, {"n": [1, {"k": None}]}])  # fmt: skip
            output = rng.choice(["", "ok ✓", "x" * 300_000, "line\u2028sep\x00nul", "ERROR: bad"])
            obs = None if rng.random() < 0.1 else Observation(
                output=output, exit_code=rng.choice([None, 0, 1]),
                error=rng.choice([None, None, "boom"]))  # fmt: skip
            steps.append(
                Step(
                    index=i,
                    thought=rng.choice(["", "hmm, wait", "思考"]),
                    action=None if rng.random() < 0.1 else ToolCall(tool=tool, params=params),
                    message=rng.choice([None, "done ✓"]),
                    observation=obs,
                    reward=rng.choice([None, 0.5, math.nan, -1.0]),
                )
            )
        outcome = rng.choice([Outcome(), Outcome(success=True), Outcome(resolved=False),
                              Outcome(success=False, resolved=True), Outcome(truncated=True)])  # fmt: skip
        task = TaskInfo(task_id=f"τ{t % 4}", instruction=rng.choice(["", "Fix ü.py (issue 1234)"]))
        out.append(Trajectory(id=f"h{t % 9}", task=task, steps=steps, outcome=outcome,
                              agent=AgentInfo(name="ä", model=rng.choice([None, "m"]))))  # fmt: skip
    return out


@functools.cache
def _corpora() -> dict[str, list[Trajectory]]:
    fixtures = load_fixture("openhands/basic.json") + load_fixture(
        "openhands/resolver_output.jsonl"
    )
    return {
        "corpus": make_corpus(120, seed=21),
        "fixtures": fixtures,
        "hostile": _hostile(40),
        "empty": [],
    }


_ENGINES = {
    "default": lambda: RewardEngine("coding"),
    "process only": lambda: RewardEngine("coding", outcome_weight=0.0),
    "weights": lambda: RewardEngine("generic", weights={"non_redundancy": 2, "efficiency": 1}),
    "step map": lambda: RewardEngine(
        "coding", calibration=CalibrationMap(x=[0, 0.5, 1], y=[0, 0.2, 1], level="step")
    ),
    "trajectory map": lambda: RewardEngine(
        "coding", calibration=CalibrationMap(x=[0, 1], y=[0.1, 0.9], level="trajectory")
    ),
}


@pytest.mark.parametrize("engine", sorted(_ENGINES))
@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_engine_matches_the_per_step_formula_bit_for_bit(engine, corpus):
    trajs = _corpora()[corpus]
    eng = _ENGINES[engine]()
    got = eng.score(trajs)
    want = reference_rewards(eng, trajs) if trajs else []
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert {k: getattr(g, k) for k in w} == w  # == on floats: bit for bit


def _rows(frame) -> list[dict]:
    out = []
    for r in frame.drop("created_at").to_dicts():
        for k in ("per_rubric", "rationale", "judge_errors", "step_rubrics", "missing_layers"):
            r[k] = orjson.loads(r[k])
        r["per_step"] = ["nan" if x != x else x for x in r["per_step"]]
        out.append(r)
    return out


@pytest.mark.parametrize("engine", sorted(_ENGINES))
@pytest.mark.parametrize("corpus", sorted(_corpora()))
def test_documents_give_the_rows_the_models_give(engine, corpus):
    trajs = _corpora()[corpus]
    eng = _ENGINES[engine]()
    docs = [orjson.loads(t.to_json()) for t in trajs]  # None fields left out
    full = [t.model_dump() for t in trajs]  # every field, None included
    want = _rows(rewards_frame(eng.score(trajs))) if trajs else []
    assert _rows(eng.score_documents(docs)) == want
    assert _rows(eng.score_documents(full)) == want
    if trajs:
        assert score_documents(docs, eng.profile).equals(score_rules(trajs, eng.profile))


def test_documents_rows_go_to_the_store(tmp_path):
    from knowlyr.store import Store

    trajs = make_corpus(30, seed=2)
    store = Store.open(str(tmp_path / "s"))
    eng = RewardEngine("coding")
    eng.save(store, eng.score_documents([orjson.loads(t.to_json()) for t in trajs]))
    eng.save(store, eng.score(trajs))  # the same keys: nothing new
    stored = store.read("rewards").sort("trajectory_id")
    assert stored.height == 30
    want = {r.trajectory_id: r.total for r in eng.score(trajs)}
    assert dict(zip(stored["trajectory_id"], stored["total"], strict=True)) == want


def test_segment_sums_round_like_python_sum():
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 40, 200)
    values = rng.random(int(lengths.sum())) * 10.0 ** rng.integers(-8, 8, int(lengths.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    got = segment_sums(values, starts, lengths)
    want = [sum(values[s : s + n].tolist()) for s, n in zip(starts, lengths, strict=True)]
    assert got.tolist() == want


def test_store_scoring_in_batches_gives_one_batch_numbers(tmp_path, monkeypatch):
    """score_unscored reads the stored documents a few at a time; efficiency's medians still
    come from every trajectory scored, so the rows are those of the models in one batch."""
    import knowlyr.reward.store_io as store_io
    from knowlyr.store import Store

    trajs = [t.rehash() for t in make_corpus(60, seed=8) + _hostile(12, seed=9)]
    for t in trajs:
        t.task.domain = "coding"
    store = Store.open(str(tmp_path / "s"))
    store.add_trajectories(trajs)
    monkeypatch.setattr(store_io, "SCORE_BATCH", 7)
    res = store_io.score_unscored(store)
    models = store.read_trajectories()
    want = {
        r["trajectory_id"]: r for r in _rows(rewards_frame(RewardEngine("coding").score(models)))
    }
    got = {r["trajectory_id"]: r for r in _rows(store.read("rewards"))}
    assert len(got) == len(models) == len(set(t.id for t in trajs)) and got == want
    assert sorted(res.trajectory_ids) == sorted(want)
    assert sorted(r.trajectory_id for r in res.rewards) == sorted(want)
    objects = {r.trajectory_id: r for r in RewardEngine("coding").score(models)}
    assert {r.trajectory_id: r for r in res.rewards} == objects  # from_row inverts to_row


def test_score_cli_scores_documents_as_the_models_score(tmp_path):
    """`knowlyr reward score` reads the logs as JSON documents for the rule layer: the
    rewards it writes (and stores) are those of the models, and a bad line is still rejected."""
    from typer.testing import CliRunner

    from knowlyr.cli import app
    from knowlyr.recorder import Converted, iter_records
    from knowlyr.reward.engine import dump_rewards
    from knowlyr.store import Store
    from tests.reward.helpers import FIXTURES

    src = tmp_path / "runs.jsonl"
    src.write_bytes(b"".join(t.to_json() + b"\n" for t in _hostile(15, seed=3)) + b"{oops\n")
    paths = [str(FIXTURES / "swe_agent"), str(FIXTURES / "openhands"), str(src)]
    out, store = tmp_path / "rewards.json", str(tmp_path / "store")
    res = CliRunner().invoke(
        app, ["reward", "score", *paths, "-d", "coding", "-o", str(out), "-s", store]
    )
    assert res.exit_code == 0, res.output
    assert "runs.jsonl:16" in res.output  # the bad line, rejected
    models = [r.trajectory for r in iter_records(paths) if isinstance(r, Converted)]
    want = orjson.loads(dump_rewards(RewardEngine("coding").score(models)))["rewards"]
    assert _nan(orjson.loads(out.read_bytes())["rewards"]) == _nan(want)
    assert Store.open(store).count("rewards") == len({r["trajectory_id"] for r in want})


def _nan(x):
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, list):
        return [_nan(v) for v in x]
    if isinstance(x, dict):
        return {k: _nan(v) for k, v in x.items()}
    return x
