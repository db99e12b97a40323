"""One ``knowlyr ingest`` of ~1,100 corrupted logs (made here, seeded): it exits 0, every file
is read or skipped, ``read == converted + rejected``, and every rejected file is named in the
``rejected`` table with its reason. ``knowlyr record convert`` of the same directory names every
file in its outputs."""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import re
import time
from collections import Counter
from pathlib import Path

import orjson
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import shown_path
from knowlyr.store import Store

TESTS = Path(__file__).resolve().parents[1]
SEEDS = sorted(
    p
    for d in (TESTS / "data" / "fixtures", TESTS / "recorder" / "data")
    for p in d.rglob("*")
    if p.is_file() and p.suffix in (".json", ".jsonl", ".traj")
)
WEIRD_VALUES = [None, True, -1, 0, 2**70, 1e308, "", "x" * 300, [], {}, [[[]]], {"a": {"b": []}}]


def _mutate_types(rng: random.Random, doc: object, n: int) -> object:
    """``doc`` with ``n`` values (anywhere in it) replaced by values of another type."""
    for _ in range(n):
        parent, key, node = None, None, doc
        for _depth in range(rng.randint(1, 6)):
            if isinstance(node, dict) and node:
                k = rng.choice(list(node))
            elif isinstance(node, list) and node:
                k = rng.randrange(len(node))
            else:
                break
            parent, key, node = node, k, node[k]
            if rng.random() < 0.4:
                break
        if parent is not None:
            parent[key] = copy.deepcopy(rng.choice(WEIRD_VALUES))
    return doc


def _corpus(root: Path, seed: int = 17) -> tuple[list[str], list[str]]:
    """Write the corpus; returns (files a walk reads, files it skips), as paths."""
    rng = random.Random(seed)
    root.mkdir()
    seeds = {p.name: p.read_bytes() for p in SEEDS}
    plain = {k: v for k, v in seeds.items() if not k.endswith(".jsonl")}
    lines = {k: v for k, v in seeds.items() if k.endswith(".jsonl")}
    read: list[str] = []
    skipped: list[str] = []
    n = Counter()

    def put(kind: str, data: bytes, suffix: str = ".json", *, name: bytes | None = None) -> None:
        n[kind] += 1
        d = root / kind
        d.mkdir(exist_ok=True)
        if name is None:
            path = str(d / f"{kind}-{n[kind]:04d}{suffix}")
        else:
            path = os.fsdecode(os.path.join(os.fsencode(d), name + suffix.encode()))
        with open(path, "wb") as f:
            f.write(data)
        (read if suffix.lower().endswith((".json", ".jsonl", ".traj", ".gz")) else skipped).append(
            path
        )

    def any_seed(pool: dict[str, bytes] = seeds) -> tuple[str, bytes]:
        k = rng.choice(sorted(pool))
        return k, pool[k]

    for _ in range(230):  # truncated JSON
        k, b = any_seed()
        put("truncated", b[: rng.randrange(1, len(b))], Path(k).suffix)
    for _ in range(150):  # flipped bytes (often invalid UTF-8)
        k, b = any_seed()
        buf = bytearray(b)
        for _ in range(rng.randint(1, 20)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        put("flipped", bytes(buf), Path(k).suffix)
    for _ in range(80):  # invalid UTF-8 inside otherwise whole logs
        k, b = any_seed()
        at = rng.randrange(len(b))
        put("bad-utf8", b[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + b[at:])
    for _ in range(80):  # garbage bytes
        put("garbage", rng.randbytes(rng.randint(1, 4096)), rng.choice([".json", ".jsonl"]))
    for _ in range(10):
        put("empty", b"", rng.choice([".json", ".jsonl", ".traj"]))
        put("empty", b" \n\t\n", rng.choice([".json", ".jsonl"]))
    for _ in range(200):  # wrong types
        k, b = any_seed(plain)
        doc = _mutate_types(rng, json.loads(b), rng.randint(1, 8))
        put("types", json.dumps(doc).encode(), Path(k).suffix)
    for _ in range(25):  # NaN / Infinity (not JSON)
        k, b = any_seed(plain)
        doc = _mutate_types(rng, json.loads(b), 2)
        text = json.dumps(doc).replace("null", rng.choice(["NaN", "Infinity", "-Infinity"]), 1)
        put("nan", text.encode())
    for _ in range(25):  # duplicate keys
        k, b = any_seed(plain)
        text = b.decode()
        i = text.index("{") + 1
        dup = rng.choice(['"id": 1, "id": "x", ', '"steps": [], "steps": {}, ', '"a": 1, "a": 2, '])
        put("dupkeys", (text[:i] + dup + text[i:]).encode(), Path(k).suffix)
    for _ in range(60):  # JSONL with bad lines
        k, b = any_seed(lines)
        out = []
        for ln in b.splitlines():
            r = rng.random()
            out.append(
                ln[: len(ln) // 2]
                if r < 0.2
                else b"{not json"
                if r < 0.3
                else b'"just a string"'
                if r < 0.35
                else b"[" * 5000
                if r < 0.37
                else ln
            )
        put("badlines", b"\n".join(out) + b"\n", ".jsonl")
    for _ in range(40):  # truncated gzip
        k, b = any_seed()
        z = gzip.compress(b)
        put("gz-cut", z[: rng.randrange(10, len(z) - 8)], Path(k).suffix + ".gz")
    for _ in range(20):  # .gz that is not gzip
        put("gz-fake", rng.choice([b"plain text", rng.randbytes(64), b"\x1f\x8bxx"]), ".json.gz")
    for _ in range(10):  # good gzip, upper-case suffix too
        k, b = any_seed(plain)
        put("gz-good", gzip.compress(b), rng.choice([".json.gz", ".JSON.GZ"]))
    # deep nesting (100k levels) and a 10 MB string
    put("huge", b"[" * 100_000 + b"]" * 100_000)
    put("huge", b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    put("huge", b'{"history": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", ".traj")
    put("huge", b'[{"action": "message", "args": {"content": "' + b"a" * 10_000_000 + b'"}}]')
    put("huge", b"[" * 100_000 + b"\n" + b"{}" * 10, ".jsonl")
    for i in range(20):  # file names that are not UTF-8
        k, b = any_seed(plain)
        data = b if i % 2 else b[: len(b) // 3]
        put("names", data, Path(k).suffix, name=b"log-\xff\xfe-%d" % i)
    for _ in range(40):  # valid logs, some under upper-case suffixes
        k, b = any_seed()
        put("valid", b, rng.choice([Path(k).suffix, Path(k).suffix.upper()]))
    for _ in range(20):  # files of no log format: counted and reported, not read
        put("other", b"some text\n", rng.choice([".log", ".txt", ".md", ""]))
    return read, skipped


def test_one_ingest_of_a_corrupted_corpus_accounts_for_every_file(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    files, skipped = _corpus(logs)
    assert len(files) >= 1000
    url = str(tmp_path / "store")
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["ingest", str(logs), "--store", url])
    took = time.perf_counter() - t0
    assert res.exit_code == 0, res.output[-3000:]
    m = re.search(
        r"read (\d+): (\d+) new, (\d+) duplicate, (\d+) rejected "
        r"\((\d+) converted \+ (\d+) rejected, from (\d+) files\)",
        res.output,
    )
    assert m, res.output[-3000:]
    read, new, dup, rej, converted, rej2, n_files = map(int, m.groups())
    print(
        f"\nfuzz corpus: {len(files)} files read + {len(skipped)} skipped; {read} records: "
        f"{new} new, {dup} duplicate, {rej} rejected; ingest {took:.1f}s"
    )
    assert read == converted + rej and rej == rej2 and converted == new + dup
    assert n_files == len(files)
    assert f"skipped {len(skipped)} files of no log format" in res.output

    s = Store.open(url)
    traj = s.read("trajectories")
    rejected = s.read("rejected")
    assert traj.height == new and rejected.height == rej
    shown = {shown_path(p) for p in files}
    assert set(rejected["path"]) <= shown
    assert rejected["reason"].str.len_chars().min() > 0
    seen = set(traj["source_path"]) | set(rejected["path"])
    # a file missing from both tables holds only records already stored (duplicates)
    missing = shown - seen
    assert len(missing) <= dup

    # record convert names every file: converted records (with duplicates) and quarantined ones
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(app, ["record", "convert", str(logs), "-o", str(out)])
    assert res.exit_code == 0, res.output[-3000:]
    assert f"read {read}  converted {converted}  rejected {rej}" in res.output
    named = {orjson.loads(x)["source"]["path"] for x in out.read_bytes().splitlines()}
    quarantine = out.with_name("out.rejected.jsonl").read_bytes().splitlines()
    named |= {orjson.loads(x)["path"] for x in quarantine}
    assert named == shown
