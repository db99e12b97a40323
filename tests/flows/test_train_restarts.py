"""Restarts of a tiny model: later seeds start from the first seed's init when its induction
pretraining learned to copy, and build their own when it did not."""

from __future__ import annotations

import pytest

import flows.train
from flows.train import TrainFlowParams, copies, train
from knowlyr.agents import ExpertAgent
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store, TableRef
from knowlyr.taskset import sample
from tasks.export import ExportParams, export_dataset
from tasks.train import Checkpoint, TrainParams
from tests.flows.helpers import task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def dataset(store_url):
    store = Store.open(store_url)
    ids = [
        t.task_id for t in sample("conversation", 20, seed=0, split="train", family="order_status")
    ]
    store.add_trajectories(collect("knowlyr/conversation", ExpertAgent, 20, tasks=ids, seed=0))
    ref = TableRef(
        store=store_url,
        table="trajectories",
        version=store.version("trajectories"),
        rows=store.count("trajectories"),
    )
    return export_dataset.fn(ref, [score_unscored(store)], ExportParams())


def _restarts(dataset) -> tuple[Checkpoint, dict[str, str]]:
    # a target no candidate of a fraction of an epoch reaches: both seeds are trained
    params = TrainParams(epochs=0.2, restarts=2, target_eval_loss=1e-9, induction_steps=10)
    state = train(TrainFlowParams(dataset=dataset, train=params), return_state=True)
    assert state.is_completed(), state
    return state.result(), task_states(state.state_details.flow_run_id)


def test_restarts_share_an_init_that_learned_to_copy(dataset, monkeypatch):
    # 10 induction steps copy ~1%: count that as learned, to see the sharing itself
    monkeypatch.setattr(flows.train, "SHARED_INIT_COPY_ACCURACY", 0.0)
    _, states = _restarts(dataset)
    inits = sorted(n for n in states if n.startswith("init-"))
    assert inits == [f"init-tiny-s0-for-{dataset.name}"], states
    assert sorted(n for n in states if n.startswith("train-sft")) == [
        "train-sft-tiny-0.2ep-s0",
        "train-sft-tiny-0.2ep-s1",
    ]


def test_an_init_that_did_not_learn_to_copy_is_rebuilt_for_each_restart(dataset):
    _, states = _restarts(dataset)  # 10 steps are far from the copy circuit
    inits = sorted(n for n in states if n.startswith("init-"))
    assert inits == [f"init-tiny-s{s}-for-{dataset.name}" for s in range(2)], states


def test_copies_reads_the_induction_metrics():
    def ckpt(**metrics: float) -> Checkpoint:
        return Checkpoint(name="init", path="/x", blob="b", store="/s", metrics=metrics)

    assert copies(ckpt(induction_copy_accuracy=0.98))
    assert not copies(ckpt(induction_copy_accuracy=0.05))
    assert not copies(ckpt())  # no induction pretraining (a pretrained base, or 0 steps)
