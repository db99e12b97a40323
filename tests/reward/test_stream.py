"""Scoring files in batches (knowlyr.reward.stream): the bytes `reward score` wrote when it held
every trajectory at once, those of the models, batch by batch into the store."""

from __future__ import annotations

import io

import orjson
import pytest

from knowlyr.errors import ConfigError
from knowlyr.recorder import Converted, iter_records
from knowlyr.reward.calibration import CalibrationMap
from knowlyr.reward.engine import RewardEngine, TrajectoryReward, dump_rewards
from knowlyr.reward.stream import RewardsWriter, reward_dicts, score_files
from tests.reward.corpus import make_corpus
from tests.reward.helpers import FIXTURES
from tests.reward.test_columnar import _hostile, _rows


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Fixture logs, a generated corpus and a hostile JSONL with a bad line."""
    src = tmp_path_factory.mktemp("stream") / "runs.jsonl"
    trajs = make_corpus(40, seed=4) + _hostile(15, seed=3)
    src.write_bytes(b"".join(t.to_json() + b"\n" for t in trajs) + b"{oops\n")
    return [str(FIXTURES / "swe_agent"), str(FIXTURES / "openhands"), str(src)]


def _header(engine, rejected):
    return {"config": engine.config, "config_hash": engine.config_hash, "judge_usage": None,
            "rejected": rejected}  # fmt: skip


_ENGINES = {
    "default": lambda: RewardEngine("coding"),
    "step map": lambda: RewardEngine(
        "coding", calibration=CalibrationMap(x=[0, 0.5, 1], y=[0, 0.2, 1], level="step")
    ),
}


@pytest.fixture(scope="module")
def read(inputs):
    """The inputs as JSON documents and as models, each read once."""
    from knowlyr.recorder import Encoded, iter_encoded

    docs = [orjson.loads(r.json) for r in iter_encoded(inputs) if isinstance(r, Encoded)]
    models = [r.trajectory for r in iter_records(inputs) if isinstance(r, Converted)]
    return docs, models


@pytest.mark.parametrize(("engine", "batch_size", "workers"),
                         [("default", 2, 1), ("default", 10_000, 0), ("step map", 7, 1)])  # fmt: skip
def test_batches_write_the_bytes_of_one_batch_and_of_the_models(
    inputs, read, engine, batch_size, workers
):
    engine = _ENGINES[engine]()
    buf = io.BytesIO()
    res = score_files(inputs, engine, buf, batch_size=batch_size, workers=workers)
    bad = res.rejected[-1]  # the line that is not JSON (empty trajectories are rejected too)
    assert bad["path"].endswith("runs.jsonl") and bad["line"] == 56 and "JSON" in bad["reason"]
    # what the CLI wrote before it streamed: every document at once, objects from the rows
    docs, models = read
    rows = engine.score_documents(docs)
    one_batch = [TrajectoryReward.from_row(r) for r in rows.iter_rows(named=True)]
    want = dump_rewards(one_batch, **_header(engine, res.rejected))
    assert buf.getvalue() == want and res.scored == len(docs) > 50
    assert res.steps == sum(len(d["steps"]) for d in docs)
    # and the models' rewards (the judge's path), value for value
    assert buf.getvalue() == dump_rewards(engine.score(models), **_header(engine, res.rejected))


def test_memory_is_one_batch(inputs, monkeypatch):
    engine = RewardEngine("coding")
    seen = []
    score = engine.score_documents

    def spy(docs, **kw):
        seen.append(len(docs))
        return score(docs, **kw)

    monkeypatch.setattr(engine, "score_documents", spy)
    res = score_files(inputs, engine, io.BytesIO(), batch_size=9, workers=1)
    assert max(seen) == 9 and sum(seen) == res.scored


def test_empty_input_and_bad_arguments(tmp_path, monkeypatch):
    buf = io.BytesIO()
    engine = RewardEngine("coding")
    res = score_files([tmp_path / "missing.jsonl"], engine, buf)
    assert res.scored == 0 and "no such file" in res.rejected[0]["reason"]
    assert buf.getvalue() == dump_rewards([], **_header(engine, res.rejected))
    with pytest.raises(ConfigError, match="batch_size must be positive"):
        score_files([], engine, buf, batch_size=0)
    with pytest.raises(ConfigError, match="workers must be >= 0"):
        score_files([], engine, buf, workers=-1)
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # the judge is built, never called
    judged = RewardEngine("coding", layers=("rules", "judge"), judge="openai:m")
    with pytest.raises(ConfigError, match=r"use RewardEngine\.score"):
        score_files([], judged, buf)
    with pytest.raises(ConfigError, match="'rewards'"):
        RewardsWriter(buf, rewards=[])


def test_batches_go_to_the_store(inputs, read, tmp_path, monkeypatch):
    from knowlyr.reward import stream
    from knowlyr.store import Store

    monkeypatch.setattr(stream, "SAVE_ROWS", 35)  # a transaction per two batches of 20
    engine = RewardEngine("coding")
    store = Store.open(str(tmp_path / "s"))
    buf = io.BytesIO()  # two processes score the batches: the same bytes, in order
    res = score_files(inputs, engine, buf, store=store, batch_size=20, workers=2)
    batches = -(-len(read[0]) // 20)
    assert batches >= 3  # at least one transaction of two batches, and the rest
    appends = [h for h in store.history("rewards") if h["operation"] != "CREATE TABLE"]
    assert len(appends) == -(-batches // 2)
    assert buf.getvalue() == dump_rewards(
        [
            TrajectoryReward.from_row(r)
            for r in engine.score_documents(read[0]).iter_rows(named=True)
        ],
        **_header(engine, res.rejected),
    )
    want = {}  # the store keeps the first row of a trajectory id
    for r in _rows(engine.score_documents(read[0])):
        want.setdefault(r["trajectory_id"], r)
    got = _rows(store.read("rewards"))
    assert len(got) == len(want) and {r["trajectory_id"]: r for r in got} == want
    assert res.manifest is not None and res.manifest.rows == len(want)
    again = score_files(inputs, engine, io.BytesIO(), store=store, batch_size=30, workers=1)
    assert again.scored == res.scored and store.count("rewards") == len(want)  # nothing added


def test_reward_dicts_are_the_objects_dicts(read):
    rows = RewardEngine("coding").score_documents(read[0])
    want = [TrajectoryReward.from_row(r).to_dict() for r in rows.iter_rows(named=True)]
    assert orjson.dumps(reward_dicts(rows)) == orjson.dumps(want)


_SCRIPT = """
import sys
from knowlyr.reward import RewardEngine
from knowlyr.reward.stream import score_files

def main():
    with open(sys.argv[2], "wb") as f:
        score_files([sys.argv[1]], RewardEngine("coding"), f, batch_size=100,
                    workers=int(sys.argv[3]))
    print("pandas imported:", "pandas" in sys.modules)
"""


def test_worker_processes_and_a_script_without_a_main_block(tmp_path):
    import subprocess
    import sys

    from knowlyr.trajectory import Step, TaskInfo, ToolCall, Trajectory

    # long task ids: the job the workers get (engine, batch population) is ~130 KB pickled,
    # more than a pipe holds, which is what left the script waiting forever on a dead worker
    src = tmp_path / "runs.jsonl"
    trajs = [
        Trajectory(task=TaskInfo(task_id=f"{i:04d}" + "t" * 300),
                   steps=[Step(index=0, action=ToolCall(tool="bash", params={"command": "ls"}))])
        for i in range(400)
    ]  # fmt: skip
    src.write_bytes(b"".join(t.to_json() + b"\n" for t in trajs))
    want = io.BytesIO()
    score_files([src], RewardEngine("coding"), want, batch_size=100, workers=1)
    # pyarrow's pa.array imports pandas (~40 MB, ~0.2 s a process) to ask whether its input
    # is a pandas object: scoring never needs it, in this process or in a worker
    for guarded, workers in ((True, 2), (True, 1), (False, 2)):
        script = tmp_path / "score.py"
        script.write_text(
            _SCRIPT + ('if __name__ == "__main__":\n    main()\n' if guarded else "main()\n")
        )
        out = tmp_path / "rewards.json"
        p = subprocess.run([sys.executable, str(script), str(src), str(out), str(workers)],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
        if guarded:  # four batches over two spawned workers, or here: the bytes of one process
            assert p.returncode == 0, p.stderr
            assert out.read_bytes() == want.getvalue()
            assert "pandas imported: False" in p.stdout
        else:
            assert p.returncode != 0
            assert "RewardError: a scoring worker process died" in p.stderr
            assert 'call it from an `if __name__ == "__main__":` block' in p.stderr  # a worker's
