"""``iterate`` with small parameters: every stage runs, a re-run is fully cached, and a changed
parameter recomputes exactly the stages downstream of it; and two nights of the loop: the
warm-up night promotes the first champion, the next night collects with it (sampling several
attempts per task), trains on from it on its own rollouts only, and is judged against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.iterate import IterateParams, iterate
from knowlyr.store import Store
from tasks.export import load_dataset
from tests.flows.helpers import artifact_keys, artifacts, flow_run_name, task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")

UPSTREAM_OF_TRAIN = ("sample-", "collect-", "dedup-", "reward-", "export-", "init-")
DOWNSTREAM_OF_TRAIN = ("train-", "select-", "evaluate-candidate-", "compare-", "promote-")


def _run(params: IterateParams):
    state = iterate(params, return_state=True)
    assert state.is_completed(), state
    return state.result(), task_states(state.state_details.flow_run_id), state


def _stage(name: str, prefixes: tuple[str, ...]) -> bool:
    return name.startswith(prefixes)


def test_iterate_runs_every_stage_caches_reruns_and_recomputes_downstream(store_url):
    # Nothing is promoted (min_improvement 100%), so every re-run is again the warm-up night.
    params = IterateParams.small(store_url=store_url)
    params.evaluate.min_improvement = 1.0
    report, states, state = _run(params)
    assert report.warmup and not report.decision.promoted
    assert flow_run_name(state) == "iterate-warmup-48x-expert-seed0"  # what ran, not the mix's 24

    # Every stage ran once, named after what it did.
    names = sorted(states)
    for prefix in ("sample-conversation-train-48", "collect-knowlyr/conversation-expert-24ep-s0",
                   "dedup-collect", "reward-trajectories@0", "export-sft-trajectories@0", "init-tiny",
                   "train-sft-tiny-1.0ep-s0", "train-sft-tiny-1.0ep-s1", "select-checkpoint-by-eval_loss",
                   "sample-conversation-heldout-6", "evaluate-untrained",
                   "evaluate-candidate", "compare-candidate-vs-untrained", "promote-"):  # fmt: skip
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    assert set(states.values()) == {"Completed"}

    # The store holds every stage's output version, and the decision with its lineage.
    store = Store.open(report.store_url)
    assert store.count("trajectories") == 48 == report.collect.trajectories.new
    assert store.count("rewards") == 48
    assert (
        report.dataset.rows == 48 and store.version("datasets") == report.dataset.datasets.version
    )
    assert (
        store.has_blob(report.candidate.blob)
        and Path(report.candidate.path, "config.json").is_file()
    )
    decision = store.read("promotions").row(0, named=True)
    assert decision["checkpoint"] == report.candidate.blob
    assert decision["promoted"] == report.decision.promoted
    assert {r.stage for r in store.runs()} >= {"collect", "export", "train", "promote"}
    assert store.lineage(report.candidate.blob).trajectory_ids
    # The dataset read back from the store keeps each tool call's own arguments (no keys merged
    # across messages, which would teach the model `"text": null`).
    data = load_dataset(report.dataset)
    args = [tc["function"]["arguments"] for row in data for m in row["messages"]
            for tc in m.get("tool_calls") or []]  # fmt: skip
    assert len(args) == 2 * 48 and all(None not in a.values() for a in args)

    # What the UI shows.
    keys = artifact_keys(state.state_details.flow_run_id)
    assert {"collect-counts", "reward-stats", "export-counts", "train-progress-sft-s0", "train-progress-sft-s1", "train-candidates",
            "evaluation", "iteration-report"} <= keys  # fmt: skip
    report_md = Path(report.report_dir, "report.md").read_text()
    assert (
        "Held-out evaluation" in report_md
        and f"trajectories@{report.collect.trajectories.version}" in report_md
    )
    assert Path(report.report_dir, "rewards.svg").is_file()
    # the losses by their names, the curve drawn; the restarts' table leads with the choice
    assert "## Training" in report_md and "last logged step" in report_md
    assert "mean over the run (TRL's train_loss)" in report_md and "final loss" not in report_md
    assert Path(report.report_dir, "loss.svg").is_file() and report.candidate.curve["train loss"]
    assert {"train-loss-sft-s0", "train-loss-sft-s1"} <= keys
    run_keys = [a.key for a in artifacts(state.state_details.flow_run_id)]
    assert run_keys.count("train-loss-sft-s0") == 1  # redrawn in place, one card per restart
    [table] = [a for a in artifacts(state.state_details.flow_run_id) if a.key == "train-candidates"]
    header = list(json.loads(table.data)[0])
    assert header[:3] == ["restart", "kept", "eval_loss"] and header[-1] == "checkpoint"

    # Unchanged inputs: every stage is a cache hit and returns the same manifests.
    again, states2, state2 = _run(params)
    assert set(states2.values()) == {"Cached"}, states2
    # ... and every stage publishes its tables again, saying which run computed them
    first = state.state_details.flow_run_id
    cached = {a.key: a.description for a in artifacts(state2.state_details.flow_run_id)}
    for key in (
        "collect-counts",
        "reward-stats",
        "export-counts",
        "train-candidates",
        "evaluation",
    ):
        assert cached[key].startswith("Cached from run ") and str(first)[:8] in cached[key], key
    again_md = Path(again.report_dir, "report.md").read_text()
    assert "come from the cache: run " in again_md and str(first)[:8] in again_md
    assert "come from the cache" not in report_md
    assert again.candidate == report.candidate and again.dataset == report.dataset
    assert store.count("promotions") == 1

    # A (warm-up) training parameter changed: only training and what depends on it recompute.
    warmup = params.warmup.model_copy(
        update={"train": params.warmup.train.model_copy(update={"learning_rate": 1e-3})}
    )
    changed, states3, _ = _run(params.model_copy(update={"warmup": warmup}))
    for name, st in states3.items():
        expected = "Completed" if _stage(name, DOWNSTREAM_OF_TRAIN) else "Cached"
        assert st == expected, (name, st, states3)
    assert any(_stage(n, UPSTREAM_OF_TRAIN) for n in states3)
    assert changed.candidate.blob != report.candidate.blob
    assert changed.candidate.path != report.candidate.path  # the first checkpoint is intact
    assert changed.dataset == report.dataset
    assert store.count("promotions") == 2


@pytest.mark.slow
def test_two_nights_the_second_collects_with_the_champion_and_trains_on_from_it(store_url):
    from flows.collect import CollectParams, TaskSource
    from knowlyr.train.promotion import PromotionDecision, record_promotion
    from tasks.export import ExportParams
    from tasks.train import TrainParams

    source = TaskSource(env_id="knowlyr/conversation", suite="conversation", family="order_status")
    # A partly right warm-up: some sampled attempts succeed and some fail, which is what
    # preference pairs are made of (3 of night 1's 16 attempts succeeded, 2026-11-29; with 10
    # epochs none did, with 30 epochs 14 and one pair)
    warm = TrainParams(epochs=20, restarts=1, target_eval_loss=None, induction_steps=0)
    params = IterateParams.small(
        store_url=store_url,
        warmup=IterateParams.small().warmup.model_copy(update={"episodes": 300, "train": warm}),
        collect=CollectParams(mix=[source], agent="champion", episodes=16, attempts=4,
                              temperature=1.0, shards=1, max_steps=3),
        export=ExportParams(suite="conversation", family="order_status"),
        train=TrainParams(method="dpo", epochs=1, restarts=1, target_eval_loss=None,
                          validation_fraction=0),
    )  # fmt: skip
    night0, _, _ = _run(params)
    assert night0.warmup
    # Promotion on evidence is tested above; whether this warm-up is significantly better than
    # the untrained model on 6 tasks is not the point here, so it is made the champion by hand.
    store = Store.open(store_url)
    champion = night0.candidate
    record_promotion(
        store,
        PromotionDecision(True, "test: promoted by hand", 0.0, 0.0, 1.0),
        checkpoint=champion.blob,
        checkpoint_json=champion.model_dump_json(),
        baseline="untrained",
        evaluations_version=10_000,  # a key of its own (the decision above has version 0)
    )

    night1, states, _ = _run(params.model_copy(update={"seed": 1}))
    assert not night1.warmup
    # collected by the champion: 4 tasks x 4 sampled attempts, recorded as a checkpoint agent
    rows = store.read("trajectories")
    mine = rows.filter(rows["agent"].str.starts_with("checkpoint:"))
    assert night1.collect.episodes == 16 and len(night1.collect.samples[0].task_ids) == 4
    assert 0 < mine.height <= 16 and set(rows["agent"]) == {"expert", *mine["agent"]}
    assert any(n.startswith("collect-knowlyr/conversation-checkpoint:") for n in states), states
    # sampled attempts at one task differ (temperature 1.0): several trajectories per task
    assert mine.group_by("task_id").len()["len"].max() > 1
    # DPO pairs from the attempts at one task, of the champion's own rollouts only
    assert night1.dataset.kind == "dpo" and night1.dataset.name.endswith("-by-checkpoint")
    data = load_dataset(night1.dataset)
    assert len(data) > 0 and set(data["task_id"]) <= set(mine["task_id"])
    # trained on from the champion, judged against it (evaluated once: it is also the init)
    assert night1.init.blob == champion.blob and night1.candidate.blob != champion.blob
    assert night1.comparison.baseline == "champion"
    assert {r["agent"] for r in night1.comparison.leaderboard} == {"candidate", "champion"}
    decisions = store.read("promotions").sort("created_at")
    assert decisions.height == 3 and decisions["checkpoint"][-1] == night1.candidate.blob


def test_a_night_with_nothing_to_learn_keeps_the_champion_and_says_why(store_url):
    """A champion none of whose attempts succeed gives an empty export: the run completes,
    trains nothing, reports why and leaves the champion in place."""
    from knowlyr.train.promotion import PromotionDecision, record_promotion

    # seeds no other flow test uses: the harness's task cache is shared by a worker's tests,
    # and a task sample drawn by another test would be a cache hit here (or this one there)
    params = IterateParams.small(store_url=store_url, seed=41)
    params.warmup.train = params.warmup.train.model_copy(update={"epochs": 0.05, "restarts": 1,
                                                                "target_eval_loss": None})  # fmt: skip
    night0, _, _ = _run(params)
    store = Store.open(store_url)
    # the barely trained warm-up policy succeeds at nothing; it is made the champion by hand
    record_promotion(
        store,
        PromotionDecision(True, "test: promoted by hand", 0.0, 0.0, 1.0),
        checkpoint=night0.candidate.blob,
        checkpoint_json=night0.candidate.model_dump_json(),
        baseline="untrained",
        evaluations_version=10_000,
    )
    promotions = store.count("promotions")
    night1, states, state1 = _run(params.model_copy(update={"seed": 42}))
    assert not night1.warmup and night1.collect.successes == 0 and night1.dataset.rows == 0
    assert flow_run_name(state1) == "iterate-night-24x2-sft-seed42"
    assert night1.candidate is None and night1.decision is None
    assert night1.outcome.startswith("nothing to learn from tonight") and "stays" in night1.outcome
    assert not any(n.startswith(("train-", "evaluate-", "promote-")) for n in states), states
    assert store.count("promotions") == promotions
    report_md = Path(night1.report_dir, "report.md").read_text()
    assert "**Decision: no training tonight** — nothing to learn from tonight" in report_md
