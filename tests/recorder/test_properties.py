"""Mutated and truncated logs never crash an adapter: a valid Trajectory or a clear RecordError."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowlyr.errors import RecordError
from knowlyr.recorder import Converted, Rejected, get_adapter, iter_bytes, list_formats
from knowlyr.store.tables import document_row
from knowlyr.trajectory import Trajectory

DATA = Path(__file__).parent / "data"
FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"

# one real (or documented-shape) seed log per format: (file, is_jsonl)
SEEDS: dict[str, tuple[Path, bool]] = {
    "openhands": (FIX / "openhands/basic.json", False),
    "openhands_output": (DATA / "openhands_eval_output.jsonl", True),
    "swe_agent": (FIX / "swe_agent/swe-agent__test-repo-i1.traj", False),
    "knowlyr_legacy": (FIX / "knowlyr/browser_trajectory.json", False),
    "openai_chat": (DATA / "swe_gym_chat.jsonl", True),
    "anthropic": (DATA / "anthropic_messages.json", False),
    "claude_code": (DATA / "claude_code_session.jsonl", True),
    "agentgym": (DATA / "agentgym_webshop.json", False),
    "atif": (DATA / "atif_session.json", False),
    "mini_swe_agent": (DATA / "mini_swe_agent/django__django-11163.traj.json", False),
}


def _seed_bytes(fmt: str) -> bytes:
    if fmt == "knowlyr":
        from knowlyr.recorder import iter_records

        (r,) = iter_records([DATA / "atif_session.json"])
        return r.trajectory.to_json()
    return SEEDS[fmt][0].read_bytes()


def _seed_obj(fmt: str) -> Any:
    data = _seed_bytes(fmt)
    if fmt == "claude_code":
        return [orjson.loads(x) for x in data.splitlines() if x.strip()]
    if fmt in SEEDS and SEEDS[fmt][1]:
        return orjson.loads(data.splitlines()[0])
    doc = orjson.loads(data)
    return doc[0] if fmt == "agentgym" else doc


def test_every_format_has_a_seed() -> None:
    assert set(list_formats()) == set(SEEDS) | {"knowlyr"}


def _paths(x: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:12]):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    elif delete and isinstance(parent, list):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return doc


# what orjson.loads can produce: 64-bit ints (u64 too), finite floats, any text
_junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _check(result: Converted | Rejected) -> None:
    if isinstance(result, Rejected):
        assert isinstance(result.reason, str) and result.reason.strip()
        assert result.path
        return
    t = result.trajectory
    assert Trajectory.model_validate(orjson.loads(t.to_json())).id == t.id
    assert t.source.blob is not None


@pytest.mark.parametrize("fmt", [*sorted(SEEDS), "knowlyr"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_records_give_a_trajectory_or_a_record_error(fmt: str, data: st.DataObject) -> None:
    adapter = get_adapter(fmt)
    doc = copy.deepcopy(_seed_obj(fmt))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = data.draw(st.sampled_from(paths))
        doc = _set(doc, path, data.draw(_junk), delete=bool(path) and data.draw(st.booleans()))
    try:
        t = adapter.convert(copy.deepcopy(doc), path="mutated.json")
    except RecordError as e:
        assert e.reason and "mutated.json" in str(e)
        with pytest.raises(RecordError) as again:  # the document path rejects it the same way
            adapter.document(doc, path="mutated.json")
        assert again.value.reason == e.reason
        return
    assert isinstance(t, Trajectory)
    assert Trajectory.model_validate(orjson.loads(t.to_json())).id == t.id
    # the JSON document (built directly, or by default through the models) is what the models
    # serialise to, byte for byte
    d = adapter.document(doc, path="mutated.json")
    assert d["source"] == {}  # for the pipeline to fill in
    d["source"] = t.source.model_dump(exclude_none=True)
    assert document_row(d)[-1] == t.to_json()
    assert d["id"] == t.id


@pytest.mark.parametrize("fmt", [*sorted(SEEDS), "knowlyr"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_truncated_and_corrupted_bytes_are_quarantined(fmt: str, data: st.DataObject) -> None:
    raw = _seed_bytes(fmt)
    cut = data.draw(st.integers(0, len(raw)))
    raw = raw[:cut]
    if raw and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1 :]
    jsonl = SEEDS.get(fmt, (None, True))[1]
    for forced in (None, fmt):
        results = list(iter_bytes(raw, path=f"x.{'jsonl' if jsonl else 'json'}", format=forced))
        for r in results:
            _check(r)
