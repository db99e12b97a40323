"""The document path (``iter_encoded``: OpenHands records become JSON documents and table rows
without models) writes exactly what the model path (``iter_records`` + ``trajectory_row``)
does, on the fixtures and on a generated hostile corpus: same JSONL bytes, ids, rejected
records; and an ingest (streamed into the store) stores the rows and rejections that adding
the models would."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from knowlyr.recorder import Converted, Encoded, Rejected, iter_encoded, iter_records
from knowlyr.recorder import pool as pool_mod
from knowlyr.store import Store
from knowlyr.store.ingest import ingest
from knowlyr.store.tables import trajectory_row

TESTS = Path(__file__).resolve().parents[1]
OH = TESTS / "data" / "fixtures" / "openhands"
ODD = [None, True, -1, 2**70, 1.5, "", "ü" * 50, [], {}, [[]], {"a": [None]}]


def _mutate(rng: random.Random, doc: object, n: int) -> object:
    """``doc`` with ``n`` values anywhere in it replaced by values of another type."""
    for _ in range(n):
        parent, key, node = None, None, doc
        for _depth in range(rng.randint(1, 5)):
            if isinstance(node, dict) and node:
                k = rng.choice(list(node))
            elif isinstance(node, list) and node:
                k = rng.randrange(len(node))
            else:
                break
            parent, key, node = node, k, node[k]
        if parent is not None:
            parent[key] = copy.deepcopy(rng.choice(ODD))
    return doc


def _lines(events: list) -> bytes:
    return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~120 OpenHands logs: the fixtures, and variants with unicode, huge outputs, missing and
    mistyped fields, duplicates (same content twice), truncated files and bad lines."""
    rng = random.Random(23)
    root = tmp_path_factory.mktemp("hostile")
    base = [json.loads((OH / n).read_bytes()) for n in ("basic.json", "basic_interactions.json")]
    rows = (OH / "resolver_output.jsonl").read_bytes()
    (root / "rows.jsonl").write_bytes(rows)
    n = 0

    def put(data: bytes, suffix: str = ".jsonl") -> None:
        nonlocal n
        n += 1
        (root / f"log-{n:04d}{suffix}").write_bytes(data)

    for events in base:
        put(json.dumps(events).encode(), ".json")
        put(_lines(events))
        put(_lines(events))  # a duplicate: the same trajectory twice
        ev = copy.deepcopy(events)
        for e in ev:
            if "content" in e:
                e["content"] = '🦀 ünïcode \u2028 \\ " \x00 ' + "x" * 200_000  # huge output
            if isinstance(e.get("args"), dict) and "thought" in e["args"]:
                e["args"]["thought"] = "思考 " * 10
        put(_lines(ev))
        for _ in range(25):
            put(_lines(_mutate(rng, copy.deepcopy(events), rng.randint(1, 6))))
        for _ in range(8):  # a field dropped from every event of one kind
            ev = copy.deepcopy(events)
            key = rng.choice(["args", "extras", "content", "cause", "id", "timestamp", "source"])
            for e in ev:
                e.pop(key, None)
            put(_lines(ev))
        for _ in range(6):  # truncated files and lines that are not events
            data = _lines(events)
            put(data[: rng.randrange(1, len(data))])
            put(data.replace(b"\n", b"\n{not json\n", 1) + b'"a string"\n[1, 2]\n')
    for _ in range(10):  # output rows: mutated, truncated
        lines = rows.splitlines()
        out = [json.dumps(_mutate(rng, json.loads(x), 3)).encode() for x in lines]
        put(b"\n".join(out) + b"\n" + lines[0][:100] + b"\n")
    return root


def _compare(plain: list, enc: list) -> tuple[int, int]:
    assert len(plain) == len(enc)
    ok = bad = 0
    for p, e in zip(plain, enc, strict=True):
        if isinstance(p, Rejected):
            assert isinstance(e, Rejected), p
            assert (e.path, e.line, e.reason, e.raw) == (p.path, p.line, p.reason, p.raw)
            bad += 1
        else:
            assert isinstance(p, Converted) and isinstance(e, Encoded), e
            assert e.row == trajectory_row(p.trajectory)  # the JSON bytes and the id too
            assert (e.line, e.redactions) == (p.trajectory.source.line, p.redactions)
            ok += 1
    return ok, bad


@pytest.mark.parametrize("workers", [1, 2])
def test_documents_are_what_the_models_write(corpus: Path, workers, monkeypatch) -> None:
    monkeypatch.setattr(pool_mod, "_MIN_FILES", 1)  # the pool for workers=2, however small
    plain = list(iter_records([corpus], format="openhands", workers=1))
    plain += list(iter_records([corpus / "rows.jsonl"], workers=1))
    enc = list(iter_encoded([corpus], format="openhands", workers=workers))
    enc += list(iter_encoded([corpus / "rows.jsonl"], workers=workers))
    ok, bad = _compare(plain, enc)
    assert ok > 60 and bad > 20  # both kinds were exercised
    ids = [e.id for e in enc if isinstance(e, Encoded)]
    assert len(set(ids)) < len(ids)  # duplicates among them


def test_an_ingest_stores_what_adding_the_models_would(corpus: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "ingested")
    res = ingest(store, [corpus], format="openhands", workers=1)
    plain = list(iter_records([corpus], format="openhands", workers=1))
    models = [r.trajectory for r in plain if isinstance(r, Converted)]
    other = Store.open(tmp_path / "models")
    m = other.add_trajectories(models)
    assert (res.new, res.duplicates) == (m.new, m.duplicates)
    a = store.read("trajectories").drop("created_at").sort("id")
    b = other.read("trajectories").drop("created_at").sort("id")
    assert a.equals(b)
    rejected = store.read("rejected")
    want = sorted(
        (
            (r.path, r.line, r.reason, store.blobs.put(r.raw))
            for r in plain
            if isinstance(r, Rejected)
        ),
        key=str,
    )
    got = sorted(
        zip(
            rejected["path"],
            rejected["line"],
            rejected["reason"],
            rejected["raw_blob"],
            strict=True,
        ),
        key=str,
    )
    assert got == want
