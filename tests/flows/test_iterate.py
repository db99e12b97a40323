"""``iterate`` with small parameters: every stage runs, a re-run is fully cached, and a changed
parameter recomputes exactly the stages downstream of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.iterate import IterateParams, iterate
from knowlyr.store import Store
from tasks.export import load_dataset
from tests.flows.helpers import artifact_keys, task_states

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
    params = IterateParams.small(store_url=store_url)
    report, states, state = _run(params)

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
    assert {"collect-counts", "reward-stats", "export-counts", "train-progress", "train-candidates",
            "evaluation", "iteration-report"} <= keys  # fmt: skip
    report_md = Path(report.report_dir, "report.md").read_text()
    assert (
        "Held-out evaluation" in report_md
        and f"trajectories@{report.collect.trajectories.version}" in report_md
    )
    assert Path(report.report_dir, "rewards.svg").is_file()

    # Unchanged inputs: every stage is a cache hit and returns the same manifests.
    again, states2, _ = _run(params)
    assert set(states2.values()) == {"Cached"}, states2
    assert again.candidate == report.candidate and again.dataset == report.dataset
    assert store.count("promotions") == 1

    # A training parameter changed: only training and what depends on it recompute.
    changed, states3, _ = _run(
        params.model_copy(update={"train": params.train.model_copy(update={"learning_rate": 1e-3})})
    )
    for name, st in states3.items():
        expected = "Completed" if _stage(name, DOWNSTREAM_OF_TRAIN) else "Cached"
        assert st == expected, (name, st, states3)
    assert any(_stage(n, UPSTREAM_OF_TRAIN) for n in states3)
    assert changed.candidate.blob != report.candidate.blob
    assert changed.candidate.path != report.candidate.path  # the first checkpoint is intact
    assert changed.dataset == report.dataset
    assert store.count("promotions") == 2
