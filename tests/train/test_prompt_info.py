"""What a checkpoint remembers of its dataset's prompts (``dataset_prompt_info``): the tools
only when every row declares the same ones, so an agent acting with a model trained on
several suites shows each episode its env's tools (see tests/agents/test_inference.py)."""

from __future__ import annotations

import pytest
from datasets import Dataset

from knowlyr.agents import ExpertAgent
from knowlyr.export import export_grpo, export_sft
from knowlyr.rollout import collect
from knowlyr.train.run import dataset_prompt_info, load_dataset_dir


@pytest.fixture(scope="module")
def two_suites() -> tuple[list, list]:
    conv = collect("knowlyr/conversation", ExpertAgent, 3, seed=0)
    disc = collect("knowlyr/discussion", ExpertAgent, 3, seed=0)
    return conv, disc


def test_one_tool_set_is_remembered(two_suites, tmp_path):
    conv, _ = two_suites
    ds = export_sft(conv, system_prompt="S").dataset
    info = dataset_prompt_info(ds)
    assert info == {"tools": conv[0].metadata["tools"], "system_prompt": "S"}
    export_sft(conv, system_prompt="S").save(tmp_path / "sft")  # reloaded from the folder
    assert dataset_prompt_info(load_dataset_dir(tmp_path / "sft")) == info
    grpo = export_grpo(conv, system_prompt="S").dataset
    assert dataset_prompt_info(grpo) == info


def test_rows_of_several_tool_sets_remember_none(two_suites):
    conv, disc = two_suites
    ds = export_sft(conv + disc, system_prompt="S").dataset
    assert {len(t) for t in ds["tools"]} == {4, 3}  # two suites, two tool sets
    info = dataset_prompt_info(ds)
    assert info == {"tools": None, "system_prompt": "S"}
    assert dataset_prompt_info(export_grpo(disc + conv).dataset)["tools"] is None
    # a selection of the rows is judged by its own rows, not by the table under it
    one_suite = ds.select([i for i, t in enumerate(ds["tools"]) if len(t) == 3])
    assert dataset_prompt_info(one_suite)["tools"] == disc[0].metadata["tools"]


def test_datasets_not_exported_by_knowlyr_are_compared_row_by_row():
    a = [{"type": "function", "function": {"name": "a", "parameters": {}}}]
    b = [{"type": "function", "function": {"name": "b", "parameters": {}}}]
    msgs = [{"role": "user", "content": "hi"}]
    same = Dataset.from_list([{"messages": msgs, "tools": a}] * 3)
    assert dataset_prompt_info(same) == {"tools": a, "system_prompt": None}
    mixed = Dataset.from_list([{"messages": msgs, "tools": t} for t in (a, a, b)])
    assert dataset_prompt_info(mixed)["tools"] is None
    assert dataset_prompt_info(
        [{"messages": msgs, "tools": a}, {"messages": msgs, "tools": b}]
    ) == {
        "tools": None,
        "system_prompt": None,
    }
    assert dataset_prompt_info(Dataset.from_list([])) == {}
