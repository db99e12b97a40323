"""The recorder builds models without pydantic validation (knowlyr.recorder.base builders, and
the plain-data form workers send back); what it builds must be exactly what validation gives:
equal objects, the same JSON, the same content hash, on every real log and a generated corpus.
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import orjson
import pytest

from knowlyr.recorder import Converted, iter_records
from knowlyr.recorder import pool as pool_mod
from knowlyr.recorder.transfer import pack_trajectory, unpack_trajectory
from knowlyr.trajectory import Trajectory

DATA = Path(__file__).parent / "data"
BENCH = Path(__file__).resolve().parents[2] / "bench" / "recorder_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("recorder_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _assert_as_validated(t: Trajectory) -> None:
    dumped = t.model_dump_json()
    for v in (
        Trajectory.model_validate(t.model_dump()),
        Trajectory.model_validate_json(dumped),
        Trajectory.model_validate(orjson.loads(t.to_json())),
    ):
        assert v == t
        assert v.model_dump_json() == dumped
        assert v.to_json() == t.to_json()
        assert v.content_hash() == t.content_hash() == t.id
        for fast, slow in zip(t.steps, v.steps, strict=True):
            assert type(fast.timestamp) is type(slow.timestamp)
            assert (fast.action, fast.observation, fast.usage) == (
                slow.action,
                slow.observation,
                slow.usage,
            )
    # what a worker process sends back rebuilds to the same object
    back = unpack_trajectory(pickle.loads(pickle.dumps(pack_trajectory(t))))
    assert back == t and back.model_dump_json() == dumped
    assert back.model_dump(exclude_unset=True) == t.model_dump(exclude_unset=True)
    v = Trajectory.model_validate_json(t.model_dump_json(exclude_defaults=True))
    back = unpack_trajectory(pickle.loads(pickle.dumps(pack_trajectory(v))))
    assert back.model_dump(exclude_unset=True) == v.model_dump(exclude_unset=True)


def _log_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".traj")
    )


def test_every_fixture_builds_as_validation_would(fixtures_dir: Path) -> None:
    files = _log_files(fixtures_dir) + _log_files(DATA)
    n = 0
    for r in iter_records(files):
        if isinstance(r, Converted):
            _assert_as_validated(r.trajectory)
            n += 1
    assert n >= 15  # every shared fixture log and every sample format converted


@pytest.mark.parametrize("workers", [1, 2])
def test_generated_corpus_builds_as_validation_would(
    tmp_path: Path, workers: int, monkeypatch
) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)  # 41 files: through the pool all the same
    bench = _bench()
    for i in range(40):
        (tmp_path / f"log_{i:03d}.json").write_bytes(orjson.dumps(bench.openhands_log(i)))
    with open(tmp_path / "output.jsonl", "wb") as f:
        for i in range(40):
            f.write(orjson.dumps(bench.output_row(i)) + b"\n")
    results = list(iter_records([tmp_path], workers=workers))
    assert len(results) == 80 and all(isinstance(r, Converted) for r in results)
    for r in results:
        _assert_as_validated(r.trajectory)
        assert len(r.trajectory.steps) == 20


def test_built_models_share_one_fields_set_that_nothing_changes(fixtures_dir: Path) -> None:
    # a set per model was a third of a converted trajectory's memory; a shared one must behave
    # as a set per model would: full, and unchanged by anything done to another model
    files = _log_files(fixtures_dir) + _log_files(DATA)
    trajs = [r.trajectory for r in iter_records(files) if isinstance(r, Converted)]
    steps = [s for t in trajs for s in t.steps]
    a, b = steps[0], steps[-1]
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.model_fields_set == set(type(a).model_fields)
    before = b.model_dump(exclude_unset=True)
    a.duration_s = 1.5  # a field: its name is in the set already
    c = a.model_copy(update={"metadata": {"k": 1}})
    assert b.model_fields_set == set(type(b).model_fields)
    assert b.model_dump(exclude_unset=True) == before and c.metadata == {"k": 1}
    # extra="allow": an assignment adds a new name to that model's set, never to another's
    t1, t2 = trajs[0].task, trajs[1].task
    assert t1.__pydantic_fields_set__ is t2.__pydantic_fields_set__
    t1.run_label = "mine"
    assert "run_label" in t1.model_fields_set and "run_label" not in t2.model_fields_set
    assert "run_label" not in t2.model_dump(exclude_unset=True)
