"""One config hash, one total per trajectory: ``knowlyr reward score`` (on the logs with
``--store``, or on the store's own trajectories) and the ``reward`` flow (a real Prefect run)
give the same totals for the vendored mini-swe-agent runs, with and without evaluation labels,
and a label that arrives after scoring replaces the reward it changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.reward import RewardFlowParams, reward
from knowlyr.cli import app
from knowlyr.store import Store

pytestmark = pytest.mark.usefixtures("prefect_harness")

RUNS = Path(__file__).resolve().parents[1] / "recorder" / "data" / "mini_swe_agent"
# the SWE-bench evaluation's verdicts of the three runs (see that folder's README)
LABELS = {
    "django__django-11163": True,
    "django__django-15277": True,
    "astropy__astropy-7606": False,
}

runner = CliRunner()


def _cli(*args: str) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    for f in RUNS.glob("*.traj.json"):
        shutil.copy(f, out / f.name)
    (out.parent / "labels.json").write_text(json.dumps({"resolved": LABELS}))
    return out


def _ingest(logs: Path, url: str, labelled: bool) -> Store:
    results = ["--results", str(logs.parent / "labels.json")] if labelled else []
    _cli("ingest", str(logs), "--store", url, "-w", "1", *results)
    return Store.open(url)


def _stored(store: Store) -> dict[tuple[str, str], float]:
    rows = store.read("rewards", columns=["trajectory_id", "config_hash", "total"])
    assert rows.height == rows.select("trajectory_id", "config_hash").n_unique()
    return {(t, c): x for t, c, x in rows.iter_rows()}


def _printed(path: Path) -> dict[tuple[str, str], float]:
    doc = json.loads(path.read_text())
    return {(r["trajectory_id"], r["config_hash"]): r["total"] for r in doc["rewards"]}


@pytest.mark.parametrize("labelled", [False, True], ids=["no-labels", "labels"])
def test_cli_and_flow_give_identical_totals_under_one_config_hash(logs, tmp_path, labelled):
    # the reward flow on a store that holds the runs
    by_flow = _ingest(logs, str(tmp_path / "flow"), labelled)
    report = reward(RewardFlowParams(store_url=by_flow.url))
    assert report.rewards[0].scored == 3
    flow = _stored(by_flow)
    (config,) = {c for _, c in flow}

    # `reward score LOGS --store S` (the logs, scored with the store's outcomes)
    by_files = _ingest(logs, str(tmp_path / "files"), labelled)
    out = tmp_path / "files.json"
    _cli("reward", "score", str(logs), "--store", by_files.url, "-d", "coding", "-w", "1",
         "-o", str(out))  # fmt: skip
    assert _printed(out) == _stored(by_files) == flow

    # `reward score --store S` (no paths: the store's own trajectories)
    by_store = _ingest(logs, str(tmp_path / "store"), labelled)
    out = tmp_path / "store.json"
    _cli("reward", "score", "--store", by_store.url, "-o", str(out))
    doc = json.loads(out.read_text())
    assert doc["config_hash"] == config
    assert _printed(out) == _stored(by_store) == flow

    # the logs scored into the flow's store after the flow: the same totals again
    out = tmp_path / "again.json"
    _cli("reward", "score", str(logs), "--store", by_flow.url, "-d", "coding", "-w", "1",
         "-o", str(out))  # fmt: skip
    assert _printed(out) == _stored(by_flow) == flow

    success = {r["task_id"]: r["success"] for r in doc["rewards"]}
    assert success == (LABELS if labelled else dict.fromkeys(LABELS))


def test_a_label_after_scoring_replaces_the_rewards_it_changes(logs, tmp_path):
    labelled = _ingest(logs, str(tmp_path / "labelled"), True)
    reward(RewardFlowParams(store_url=labelled.url))
    expected = _stored(labelled)

    store = _ingest(logs, str(tmp_path / "late"), False)
    reward(RewardFlowParams(store_url=store.url))
    before = _stored(store)
    assert before.keys() == expected.keys()
    failed = store.read("trajectories", filter=pl.col("task_id") == "astropy__astropy-7606")
    key = (failed["id"][0], next(iter(before))[1])
    assert before[key] > expected[key]  # scored without its label, the failure scores higher

    _cli("store", "label", str(logs.parent / "labels.json"), "--store", store.url)
    report = reward(RewardFlowParams(store_url=store.url))
    assert report.rewards[0].scored == 3  # every outcome changed: all three scored again
    assert _stored(store) == expected
    success = dict(store.read("rewards", columns=["task_id", "success"]).iter_rows())
    assert success == LABELS

    # nothing changed since: the next run scores nothing and keeps the rows
    out = tmp_path / "rescore.json"
    _cli("reward", "score", "--store", store.url, "-o", str(out))
    assert _printed(out) == expected and _stored(store) == expected
