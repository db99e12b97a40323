from __future__ import annotations

import datasets
import pytest

from knowlyr.errors import ExportError
from knowlyr.export import (
    export_benchmark,
    export_dpo,
    export_sft,
    infer_tool_schemas,
    split_by_task,
)
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory


def _traj(task: str, *, success=True, score=1.0, n=2, out_len=20) -> Trajectory:
    steps = [
        Step(
            index=k,
            thought=f"t{k}",
            action=ToolCall(tool="bash", params={"command": f"ls {k}", "timeout": 5}),
            observation=Observation(output="x" * out_len, exit_code=0),
        )
        for k in range(n)
    ]
    return Trajectory(
        task=TaskInfo(task_id=task, instruction=f"do {task}"),
        steps=steps,
        outcome=Outcome(success=success, score=score),
    )


def test_sft_rows_are_trl_conversations_with_a_tools_column_and_never_truncated(tmp_path):
    long = _traj("a", out_len=100_000)
    res = export_sft(
        [long, _traj("b", success=False), _traj("c", score=0.2), _traj("d", n=0)], min_reward=0.5
    )
    ds = res.dataset
    assert ds.num_rows == 1 and ds["task_id"] == ["a"]
    assert dict(res.rejected) == {
        _traj("b", success=False).id: "not successful",
        _traj("c", score=0.2).id: "reward 0.2 < min_reward 0.5",
        _traj("d", n=0).id: "no steps",
    }
    assert res.card.rejected == {"not successful": 1, "reward": 1, "no steps": 1}
    msgs = ds[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert len(msgs[3]["content"]) == 100_000  # never truncated
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == {"command": "ls 0", "timeout": 5}
    tools = ds[0]["tools"]
    assert isinstance(tools[0], dict) and tools[0]["function"]["name"] == "bash"
    assert tools[0]["function"]["parameters"]["properties"] == {
        "command": {"type": "string"},
        "timeout": {"type": "integer"},
    }
    path = res.save(tmp_path / "sft")
    again = datasets.load_from_disk(str(path / "dataset"))
    assert again[0]["messages"] == msgs
    assert datasets.Dataset.from_parquet(str(path / "data.parquet"))[0]["tools"] == tools
    assert "| rows | 1 |" in (path / "README.md").read_text()


def test_only_success_can_be_turned_off_and_explicit_tools_are_kept():
    tools = [
        {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {}}}
    ]
    res = export_sft(
        [_traj("a"), _traj("b", success=False)], only_success=False, tools=tools, system_prompt=None
    )
    assert res.dataset.num_rows == 2 and res.dataset[0]["tools"] == tools
    assert res.dataset[0]["messages"][0]["role"] == "user"


def test_splits_keep_every_row_of_a_task_together():
    trajs = [_traj(f"task-{i % 40}", n=1) for i in range(200)]
    res = export_sft(trajs, max_steps_per_row=1)
    splits = split_by_task(res, heldout_fraction=0.3)
    train, test = set(splits["train"]["task_id"]), set(splits["test"]["task_id"])
    assert train and test and not train & test and len(train | test) == 40
    assert res.card.splits == {"train": splits["train"].num_rows, "test": splits["test"].num_rows}


def test_dpo_pairs_need_the_same_task_and_known_trajectories():
    a_ok, a_bad, b_ok = _traj("a"), _traj("a", success=False, score=0.0, n=1), _traj("b")
    res = export_dpo(
        [a_ok, a_bad, b_ok],
        pairs=[
            {"chosen_id": a_ok.id, "rejected_id": a_bad.id},
            {"chosen_id": a_ok.id, "rejected_id": b_ok.id},
            {"chosen_id": a_ok.id, "rejected_id": "missing"},
        ],
    )
    assert res.dataset.num_rows == 1
    assert [why for _, why in res.rejected] == [
        "chosen and rejected are different tasks",
        "trajectory missing not given",
    ]
    row = res.dataset[0]
    assert row["margin"] == 1.0 and len(row["chosen"]) == 3 and len(row["rejected"]) == 1
    with pytest.raises(ExportError, match="chosen_id"):
        export_dpo([a_ok], pairs=[{"chosen": 1}])


def test_dpo_pairing_skips_attempts_that_are_only_invalid_actions():
    """An attempt whose every reply failed to parse trains nothing: it is left out before the
    pairs are made, so the success pairs with an attempt that has a valid step."""
    from knowlyr.trajectory import INVALID_ACTION_TOOL

    ok = _traj("a")
    bad = ToolCall(tool=INVALID_ACTION_TOOL, params={"raw": "{", "error": "no tool call"})
    garbage = Trajectory(
        task=ok.task,
        steps=[Step(index=k, action=bad, observation=Observation(output="?")) for k in range(2)],
        outcome=Outcome(success=False, score=0.0),
    )
    wrong = _traj("a", success=False, score=0.3, n=1)
    res = export_dpo([ok, garbage, wrong])
    assert res.dataset["rejected_id"] == [wrong.id]
    assert res.rejected == [(garbage.id, "a trajectory has no valid steps")]
    assert res.card.rejected == {"a trajectory has no valid steps": 1}


def test_benchmark_keeps_heldout_tasks_and_reference_outcomes():
    from knowlyr.taskset import get_suite

    suite = get_suite("conversation")
    tasks = [suite.get(t) for t in suite.select(family="order_status")[:30]]
    res = export_benchmark(tasks, only_heldout=True)
    assert 0 < res.dataset.num_rows < 30 and set(res.dataset["split"]) == {"heldout"}
    assert all(r.startswith("What is the status") for r in res.dataset["instruction"])
    assert res.dataset[0]["reference_answer"]


def test_inferred_schemas_mark_always_present_params_required():
    t = Trajectory(
        task=TaskInfo(task_id="x"),
        steps=[
            Step(index=0, action=ToolCall(tool="q", params={"a": "1", "b": 2})),
            Step(index=1, action=ToolCall(tool="q", params={"a": "2"})),
        ],
    )
    (schema,) = infer_tool_schemas([t])
    assert schema["function"]["parameters"]["required"] == ["a"]
