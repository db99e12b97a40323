"""The stage cache key and the artifact helpers, without a Prefect server."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from pathlib import Path

import pydantic
import pytest

from tasks._artifacts import (
    artifact_key,
    markdown_image,
    reward_stats,
    svg_bars,
    svg_curves,
    svg_histogram,
    svg_line,
)
from tasks._cache import canonical, stage_key


class Manifest(pydantic.BaseModel):
    table: str
    version: int


def test_key_ignores_dict_order_and_sees_models_as_their_fields():
    a = stage_key("reward", {"m": Manifest(table="trajectories", version=3), "p": {"x": 1, "y": 2}})
    b = stage_key("reward", {"p": {"y": 2, "x": 1}, "m": {"table": "trajectories", "version": 3}})
    assert a == b


@pytest.mark.parametrize(
    "other",
    [
        ("export", {"m": {"table": "trajectories", "version": 3}}),  # another stage
        ("reward", {"m": {"table": "trajectories", "version": 4}}),  # a new input version
        ("reward", {"m": {"table": "trajectories", "version": 3}, "judge": "rules"}),  # a parameter
    ],
)
def test_key_changes_with_stage_input_version_and_parameters(other):
    base = stage_key("reward", {"m": {"table": "trajectories", "version": 3}})
    assert stage_key(*other) != base


def test_key_counts_every_store_named_by_identity(tmp_path):
    import shutil

    from tasks._cache import store_urls

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    inputs = {"store_url": a, "refs": [{"store": b, "table": "trajectories"}], "n": {"store": 1}}
    assert store_urls(canonical(inputs)) == {a, b}
    key = stage_key("export", inputs)
    assert stage_key("export", inputs) == key
    shutil.rmtree(b)  # b deleted and re-created at the same path: another store
    assert stage_key("export", inputs) != key


def test_key_changes_with_task_source_and_library_version(monkeypatch):
    inputs = {"n": 1}
    base = stage_key("train", inputs, source="def f(): pass")
    assert stage_key("train", inputs, source="def f(): return 1") != base
    import knowlyr

    monkeypatch.setattr(knowlyr, "__version__", "999.0")
    assert stage_key("train", inputs, source="def f(): pass") != base


def test_live_objects_are_refused_with_the_fix_in_the_message():
    with pytest.raises(TypeError, match="store manifests"):
        canonical({"agent": object()})
    assert canonical({"p": Path("/a/b"), "s": {2, 1}}) == {"p": "/a/b", "s": [1, 2]}


@pytest.mark.parametrize(
    ("parts", "key"),
    [
        (("collect", "knowlyr/sandbox", "Counts"), "collect-knowlyr-sandbox-counts"),
        (("iterate", "Report", 3), "iterate-report-3"),
        (("--A__b--",), "a-b"),
    ],
)
def test_artifact_keys_are_lowercase_letters_digits_dashes(parts, key):
    assert artifact_key(*parts) == key


def test_artifact_key_with_nothing_usable_is_an_error():
    with pytest.raises(ValueError, match="no letters or digits"):
        artifact_key("//", "")


def test_reward_stats():
    s = reward_stats([0.0, 0.5, 1.0, 1.0])
    assert s["count"] == 4 and s["mean"] == 0.625 and s["min"] == 0.0 and s["max"] == 1.0
    assert s["median"] == 0.75
    assert reward_stats([]) == {"count": 0}


@pytest.mark.parametrize(
    "svg",
    [
        svg_histogram([0.1, 0.2, 0.2, 0.9], title="rewards <all>"),
        svg_histogram([], title="empty"),
        svg_histogram([1.0, 1.0], title="constant"),
        svg_line([1, 2, 3], [0.1, 0.5, 0.9], title="success", ymax=1.0),
        svg_line(["a"], [0.3], title="one point"),
        svg_bars(["before", "after"], [0.0, 0.95], title="held-out success"),
        svg_curves({"train loss": [(1, 2.0), (5, 0.5)], "eval loss": [(5, 0.7)]}, title="loss"),
        svg_curves({"train loss": []}, title="nothing logged"),
    ],
)
def test_plots_are_well_formed_svg_that_embeds_in_markdown(svg):
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    md = markdown_image(svg, "plot")
    assert base64.b64decode(md.split("base64,")[1].rstrip(")")).decode() == svg


def test_restart_selection_without_a_validation_split_is_refused_with_the_fix():
    from tasks.train import TrainParams

    assert TrainParams(restarts=1, target_eval_loss=None, validation_fraction=0).restarts == 1
    with pytest.raises(pydantic.ValidationError, match="set validation_fraction > 0"):
        TrainParams(validation_fraction=0)
    with pytest.raises(pydantic.ValidationError, match="restarts=1 and target_eval_loss=null"):
        TrainParams(restarts=1, validation_fraction=0)


def test_a_histogram_of_tied_values_says_so_instead_of_one_bar():
    svg = svg_histogram([1.0] * 50, title="rewards")
    assert "all 50 values are 1: nothing to tell apart" in svg
    assert 'fill="#f58518"' not in svg  # no bar
    assert 'fill="#f58518"' in svg_histogram([0.0, 1.0], title="rewards")


def test_loss_curves_have_a_legend_with_each_last_value():
    svg = svg_curves(
        {"train loss": [(1, 2.0), (2, 1.0), (3, 0.25)], "eval loss": [(3, 0.5)]}, title="loss"
    )
    assert "train loss 0.25" in svg and "eval loss 0.5" in svg
    assert svg.count("<polyline") == 1  # the one-point eval curve is a dot


@pytest.mark.usefixtures("prefect_harness")
def test_the_republish_hook_adds_no_log_lines_other_hooks_still_do():
    import logging

    from prefect import flow, task

    from tasks._artifacts import republish_cached

    def other_hook(task, task_run, state):
        pass

    @task(on_completion=[republish_cached, other_hook])
    def stage() -> int:
        return 1

    @flow
    def night() -> int:
        return stage()

    class Keep(logging.Handler):  # prefect's loggers do not propagate to caplog's root
        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    assert night() == 1  # the first run configures Prefect's logging (replacing handlers)
    keep, logger = Keep(), logging.getLogger("prefect.task_runs")
    level = logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)  # the harness may log less
    try:
        assert night() == 1
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    messages = keep.messages
    assert any("Running hook 'other_hook'" in m for m in messages), messages
    assert not any("republish_cached" in m for m in messages), messages
