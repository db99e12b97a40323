"""Splits are disjoint by instruction text: no held-out question is ever trained on."""

from __future__ import annotations

from collections import defaultdict

import pytest

from knowlyr.taskset import Suite, Task, get_suite, list_suites, sample, split_of
from knowlyr.taskset.suite import split_text

SUITES = ["coding", "conversation", "engineering", "advisory", "discussion"]


def test_every_builtin_suite_is_checked():
    assert set(SUITES) <= set(list_suites())


@pytest.mark.parametrize("name", SUITES)
def test_no_instruction_is_in_both_splits(name):
    suite = get_suite(name)
    tasks = [suite.task(i) for i in range(len(suite))]
    splits: dict[str, set[str]] = defaultdict(set)
    for t in tasks:
        splits[" ".join(t.instruction.split())].add(t.split)
    both = [text for text, s in splits.items() if len(s) > 1]
    assert not both, f"{len(both)} instructions of {name} are in train and heldout: {both[:3]}"
    # the split a task carries is the one select() and split_of() give
    held = set(suite.select(split="heldout"))
    assert {t.task_id for t in tasks if t.split == "heldout"} == held
    assert all(split_of(t.task_id) == t.split for t in tasks[:: max(1, len(tasks) // 200)])
    # sizes stay about the held-out fraction, and every family keeps both splits when it has
    # more than one distinct question
    assert 0.15 < len(held) / len(suite) < 0.25
    for fam in suite.families:
        fam_tasks = [t for t in tasks if t.family == fam]
        n_held = sum(t.split == "heldout" for t in fam_tasks)
        if len({split_text(t.instruction) for t in fam_tasks}) > 1:
            assert 0 < n_held < len(fam_tasks), (fam, n_held)
            assert 0.1 < n_held / len(fam_tasks) < 0.3, (fam, n_held, len(fam_tasks))


def test_return_policy_questions_are_held_out_whole():
    """The leak of issue #17: 1,534 train return_policy tasks asked a held-out question."""
    held = sample("conversation", 200, seed=0, split="heldout", family="return_policy")
    train = sample("conversation", 200, seed=0, split="train", family="return_policy")
    assert not {t.instruction for t in held} & {t.instruction for t in train}


class _Repeats(Suite):
    """Ten tasks in two families; some instructions repeat (with other whitespace)."""

    name = "repeats"
    families = ("a", "b")
    TEXTS = ("q1", "q1 ", "q 2", "q  2", "q\n2", "q3", "q4", "q5", "r1", "r1")

    def _ids(self) -> list[str]:
        return [f"repeats-{'a' if i < 8 else 'b'}-{i}" for i in range(len(self.TEXTS))]

    def _build(self, index: int) -> Task:
        tid = self.ids[index]
        return Task(
            task_id=tid, suite=self.name, family=tid.split("-")[1], instruction=self.TEXTS[index]
        )


@pytest.mark.parametrize("fraction", [0.0, 0.2, 0.5, 1.0])
def test_same_text_same_split_at_any_fraction(fraction):
    suite = _Repeats()
    got = {tid: suite.split_of(tid, heldout_fraction=fraction) for tid in suite.ids}
    by_text: dict[str, set[str]] = defaultdict(set)
    for i, tid in enumerate(suite.ids):
        by_text[split_text(suite.TEXTS[i])].add(got[tid])
    assert all(len(s) == 1 for s in by_text.values())
    n_held = sum(s == "heldout" for s in got.values())
    assert n_held == {0.0: 0, 1.0: 10}.get(fraction, n_held)
    if fraction == 0.5:
        assert 3 <= n_held <= 7
