"""Trajectory JSON lines become table rows without models (knowlyr.store._documents): the row,
``data`` bytes and id are what the model path gives, and a bad line fails with the model's own
error, on the fixtures and on generated hostile lines; add_staged streams them that way."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from knowlyr.recorder import Converted, iter_records
from knowlyr.store import Store
from knowlyr.store._documents import document_row_of, validate_line
from knowlyr.store.staging import StagedBlob, add_staged
from knowlyr.store.tables import trajectory_row
from knowlyr.trajectory import Trajectory

FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"


@pytest.fixture(scope="module")
def fixture_docs() -> list[dict]:
    docs = [
        orjson.loads(r.trajectory.to_json())
        for r in iter_records([FIX, FIX.parent.parent / "recorder" / "data"], workers=1)
        if isinstance(r, Converted)
    ]
    assert len(docs) >= 8
    return docs


def _error(e: ValidationError) -> tuple:
    return (str(e),)


def _model_path(line: bytes) -> tuple:
    try:
        return trajectory_row(Trajectory.model_validate_json(line))
    except ValidationError as e:
        return _error(e)


def _document_path(line: bytes) -> tuple:
    try:
        return document_row_of(validate_line(line)).row
    except ValidationError as e:
        return _error(e)


def _hostile(docs: list[dict], seed: int = 7) -> list[bytes]:
    """Lines a trajectory file may hold: valid ones in odd shapes and broken ones."""
    rng = random.Random(seed)
    base = docs[0]
    out: list[bytes] = [b"", b"[]", b"1", b'"x"', b"null", b"{}", b'{"task": {}}']
    out.append(orjson.dumps(base)[:-40])  # truncated
    variants = []

    def edit(fn) -> None:
        d = copy.deepcopy(base)
        fn(d)
        variants.append(d)

    edit(lambda d: d.update(id=""))  # the id is computed
    edit(lambda d: d.update(id="not-the-content-hash"))  # a given id is kept
    edit(lambda d: d.pop("id"))
    edit(lambda d: d.pop("steps"))
    edit(lambda d: d.pop("agent"))
    edit(lambda d: d["task"].update(instruction='🦀 ünïcode \u2028 \\ "quoted" \x00 nul'))
    edit(lambda d: d["task"].update(task_id=12345))  # wrong type
    edit(lambda d: d["task"].update(extra_field={"kept": [1, 2]}))  # TaskInfo allows extras
    edit(lambda d: d.update(unknown=1))  # Trajectory forbids them
    edit(lambda d: d["steps"][0].update(index="3"))  # lax coercion
    edit(lambda d: d["steps"][0].update(index=2.0))
    edit(lambda d: d["steps"][0].update(index=2.5))
    edit(lambda d: d["steps"][0].update(index=True))
    edit(lambda d: d["steps"][0].update(thought=None))
    edit(lambda d: d["steps"][0].update(timestamp="2025-01-28T10:00:00+02:00"))
    edit(lambda d: d["steps"][0].update(timestamp=1738000000))
    edit(lambda d: d["steps"][0].update(timestamp="yesterday"))
    edit(lambda d: d["steps"][0].update(token_ids=[1, 2, "3"], logprobs=[-0.5, 0]))
    edit(lambda d: d["steps"][0].update(action={"tool": "bash", "params": "ls"}))
    edit(lambda d: d["steps"][0].update(action={"params": {}}))
    edit(lambda d: d["steps"][0].update(observation={"output": "x" * 300_000, "exit_code": "1"}))
    edit(lambda d: d["steps"][0].update(observation={"output": 5}))
    edit(lambda d: d["steps"][0].update(usage={"prompt_tokens": 2**70}))
    edit(lambda d: d["steps"][0].update(metadata={"nested": [{"a": None}] * 3, "n": None}))
    edit(lambda d: d["outcome"].update(success="true", score="0.5", tests_passed=None))
    edit(lambda d: d["outcome"].update(success="maybe"))
    edit(lambda d: d.update(schema_version=2))
    edit(lambda d: d["source"].update(line=-1, path="ü/ß.json"))
    out += [json.dumps(d).encode() for d in variants]  # (orjson cannot write 2**70)
    out.append(orjson.dumps(base).replace(b'"schema_version"', b'"schema_version":"0","x"', 1))
    out.append(b'{"id": "a", "id": "b", ' + orjson.dumps(base)[1:])  # duplicate keys
    for d in docs:  # every fixture, compact and with None fields written out
        out.append(orjson.dumps(d))
        out.append(Trajectory.model_validate(d).model_dump_json().encode())
    for _ in range(20):  # random fields of random fixtures dropped or nulled
        d = copy.deepcopy(rng.choice(docs))
        target = rng.choice([d, d["task"], d["outcome"], *(d["steps"] or [d])])
        if target:
            k = rng.choice(sorted(target))
            if rng.random() < 0.5:
                target.pop(k)
            else:
                target[k] = None
        out.append(orjson.dumps(d))
    return out


def test_every_line_gives_the_model_paths_row_or_error(fixture_docs) -> None:
    lines = _hostile(fixture_docs)
    ok = bad = 0
    for line in lines:
        want, got = _model_path(line), _document_path(line)
        assert got == want, line[:200]
        if len(want) > 1:
            ok += 1
        else:
            bad += 1
    assert ok > 40 and bad > 10  # both paths were exercised


def test_add_staged_stores_what_the_models_would(tmp_path, fixture_docs) -> None:
    lines = _hostile(fixture_docs)
    store = Store.open(tmp_path / "s")
    blob = store.put_blob(b"\n".join(x for x in lines if x) + b"\n")
    res = add_staged(store, [StagedBlob(blob, "collect:test")])
    # the model path, by hand: what add_staged did before it streamed documents
    models, reasons = [], []
    for n, line in enumerate((x for x in lines if x), 1):
        try:
            t = Trajectory.model_validate_json(line)
        except ValidationError as e:
            reasons.append((n, f"invalid trajectory: {str(e).splitlines()[0][:300]}"))
            continue
        t.source.blob, t.source.line = blob, n
        t.source.path = t.source.path or "collect:test"
        models.append(t)
    assert [(r["line"], r["reason"]) for r in res.rejected] == reasons
    assert res.read == len(models)
    other = Store.open(tmp_path / "models")
    m = other.add_trajectories(models)
    assert (res.trajectories.new, res.trajectories.duplicates) == (m.new, m.duplicates)
    a = store.read("trajectories").drop("created_at").sort("id")
    b = other.read("trajectories").drop("created_at").sort("id")
    assert a.equals(b)
