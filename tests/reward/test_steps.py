"""The vectorised rule layer against the one-step-at-a-time specification.

Every fixture log and a generated corpus covering every action shape: the step table's
facets must be what :func:`action_facets` gives step by step (with the SWE-agent open file
carried along), and the four rubrics must equal :func:`reference_rules` exactly.
"""

from __future__ import annotations

import pytest

from knowlyr.core import get_profile
from knowlyr.reward.actions import action_facets
from knowlyr.reward.rules import (
    PROGRESS_COLUMNS,
    RULE_COLUMNS,
    rule_scores,
    score_rules,
    step_table,
)
from knowlyr.reward.steps import STEP_COLUMNS
from knowlyr.trajectory import Observation, Step, ToolCall
from tests.reward.corpus import make_corpus
from tests.reward.helpers import FIXTURES, call, load_fixture, traj
from tests.reward.reference import reference_rules

FIXTURE_NAMES = sorted(
    str(p.relative_to(FIXTURES))
    for p in FIXTURES.glob("*/*")
    if p.suffix in (".json", ".jsonl", ".traj") and "profile" not in p.name
)


def _rows(df) -> list[tuple]:
    return list(zip(*(df[c].to_list() for c in (*RULE_COLUMNS, "reference")), strict=True))


def _facets_step_by_step(trajectories, profile):
    prof = get_profile(profile)
    out = []
    for t in trajectories:
        open_file = None
        for s in t.steps:
            if s.action is None:
                out.append(("", None))
                continue
            f = action_facets(prof, s.action.tool, s.action.params, open_file)
            if f.target is not None and (f.category == "read" or f.tool == "write_file"):
                open_file = f.target
            out.append((f.category, f.target))
    return out


def test_fixture_list_is_complete():
    assert len(FIXTURE_NAMES) >= 7  # all real logs in tests/data/fixtures


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_logs_match_the_specification(name):
    trajs = load_fixture(name)
    df = score_rules(trajs, "coding")
    assert _rows(df) == reference_rules(trajs, "coding")
    table = step_table(trajs, "coding")
    assert list(zip(table["cat"], table["target"], strict=True)) == _facets_step_by_step(
        trajs, "coding"
    )


@pytest.mark.parametrize("seed", range(4))
def test_generated_corpus_matches_the_specification(seed):
    trajs = make_corpus(250, seed=seed)
    df = score_rules(trajs, "coding")
    expected = reference_rules(trajs, "coding")
    assert len(expected) > 2000
    assert _rows(df) == expected
    # every rubric fires somewhere, so the equality above is not vacuous
    for col in ("non_redundancy", "non_regression", "info_utilization", *PROGRESS_COLUMNS):
        assert (df[col] == 0.0).sum() > 3, col
        if col != "non_regression":
            assert (df[col] == 1.0).sum() > 3, col
    table = step_table(trajs, "coding")
    assert table.columns == list(STEP_COLUMNS)
    assert list(zip(table["cat"], table["target"], strict=True)) == _facets_step_by_step(
        trajs, "coding"
    )


def test_generic_profile_matches_the_specification():
    trajs = make_corpus(120, seed=7)
    assert _rows(score_rules(trajs, "generic")) == reference_rules(trajs, "generic")


def test_batches_split_anywhere_score_the_same():
    """Rules are per trajectory, except the batch median reference: scoring a batch equals
    scoring its step table, and the same trajectory scores the same in any batch that gives
    it the same reference."""
    trajs = make_corpus(200, seed=3)
    whole = score_rules(trajs, "coding")
    assert whole.equals(rule_scores(step_table(trajs, "coding")))
    alone = score_rules(trajs[5:6], "coding")
    part = whole.filter(whole["traj"] == 5)
    cols = ["non_redundancy", "non_regression", "info_utilization"]
    assert alone.select(cols).equals(part.select(cols))


def test_open_file_follows_each_session():
    """SWE-agent calls without a path act on the file the session opened last, so the same
    ``edit``/``scroll_down`` call has different targets (and is not a repeat) after another
    file was opened; a trajectory never inherits the open file of the one before it."""

    def edit(index: int) -> Step:
        params = {"start_line": 1, "end_line": 1, "replacement": "x = 1"}
        return Step(index=index, action=ToolCall(tool="edit", params=params),
                    observation=Observation(output="[File updated]"))  # fmt: skip

    a = traj([call("open", path="a.py"), edit(1), call("scroll_down"), call("open", path="b.py"),
              edit(4), call("scroll_down")])  # fmt: skip
    b = traj([edit(0), call("scroll_down")])
    table = step_table([a, b], "coding")
    assert table["target"].to_list() == ["a.py", "a.py", "a.py", "b.py", "b.py", "b.py", None, None]
    df = score_rules([a, b], "coding")
    assert df["non_redundancy"].to_list() == [1.0] * 8


def test_empty_batch_and_empty_trajectories():
    assert score_rules([], "coding").height == 0
    df = score_rules([traj([]), traj([call("read_file", path="a.py")])], "coding")
    assert df.select("traj", "step").rows() == [(1, 0)]


def test_chunked_batches_score_like_one_table(monkeypatch):
    """Large batches are scored in chunks (extraction of one overlapping the polars work on
    the one before): same rows as one table, batch medians over the whole batch."""
    import knowlyr.reward.rules as rules

    trajs = make_corpus(300, seed=11)
    whole = rule_scores(step_table(trajs, "coding"))
    monkeypatch.setattr(rules, "CHUNK_STEPS", 97)
    chunked = score_rules(trajs, "coding")
    assert len(rules._chunks(trajs, [len(t.steps) for t in trajs], 97)) > 20
    assert chunked.equals(whole)
    assert _rows(chunked) == reference_rules(trajs, "coding")


def test_string_subclass_values_are_the_same_call():
    """A str-enum parameter value is the same call as its plain string (as the logged JSON
    and the reference see it): the repeat is redundant and the file name still counts."""
    from enum import StrEnum

    class Path(StrEnum):
        A = "pkg/a_1.py"

    steps = [
        call("read_file", path=Path.A, output="x"),
        call("read_file", path="pkg/a_1.py", output="y"),
        call("run_tests", command="x" * 50),  # a long command: parsed call by call
        call("run_tests", command="x" * 50),
    ]
    t = traj(steps)
    df = score_rules([t], "coding")
    assert df["non_redundancy"].to_list() == [1.0, 0.0, 1.0, 0.0]
    assert _rows(df) == reference_rules([t], "coding")
