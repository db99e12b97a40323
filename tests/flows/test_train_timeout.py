"""Training has a timeout: a train task run past ``train.timeout_s`` ends TimedOut, its flow
fails with it, and no half-written checkpoint folder is left behind."""

from __future__ import annotations

import pytest

from flows.train import TrainFlowParams, train
from knowlyr.agents import ExpertAgent
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store, TableRef
from knowlyr.taskset import sample
from knowlyr.train.checkpoints import checkpoint_root
from tasks.export import ExportParams, export_dataset
from tasks.train import TrainParams
from tests.flows.helpers import task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_training_past_its_timeout_fails_timed_out_and_leaves_no_folder(store_url):
    store = Store.open(store_url)
    ids = [
        t.task_id for t in sample("conversation", 8, seed=0, split="train", family="order_status")
    ]
    store.add_trajectories(collect("knowlyr/conversation", ExpertAgent, 8, tasks=ids, seed=0))
    v = store.version("trajectories")
    ref = TableRef(
        store=store_url, table="trajectories", version=v, rows=store.count("trajectories")
    )
    scored = score_unscored(store)  # an export reads the store's rewards
    dataset = export_dataset.fn(ref, [scored], ExportParams())
    assert dataset.rows == 8

    # far more epochs than 2 seconds allow on any machine; a few induction steps first (the
    # init is its own task, outside the training's timeout)
    params = TrainParams(
        epochs=10_000, restarts=1, target_eval_loss=None, validation_fraction=0, timeout_s=2,
        induction_steps=20,
    )  # fmt: skip
    state = train(TrainFlowParams(dataset=dataset, train=params), return_state=True)

    assert state.is_failed(), state
    states = task_states(state.state_details.flow_run_id)
    trained = [s for name, s in states.items() if name.startswith("train-sft")]
    assert trained == ["TimedOut"], states
    folders = list(checkpoint_root(store).iterdir())
    assert [f.name for f in folders] == [f"{dataset.name}-init-tiny-2x128-ind20-s0"]  # the init
    assert (folders[0] / "config.json").is_file()  # ... which is a saved model
    assert states[f"init-tiny-s0-for-{dataset.name}"] == "Completed"
