"""The store's trajectory rows and sightings as Arrow columns."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from knowlyr.store.tables import TRAJECTORY_COLUMNS, rows_arrow


def test_rows_arrow_sorts_by_task_then_id_and_keeps_nulls():
    now = datetime(2026, 1, 2, tzinfo=UTC)
    row = ("b", "t2", "coding", None, "agent", None, 3, None, None, "knowlyr", None, None, b"{}")
    other = ("a", "t2", "coding", "s", "agent", "m", 1, True, 0.5, "knowlyr", "p", "h", b"[]")
    first = ("z", "t1", "coding", "s", "agent", "m", 2, False, 1.0, "knowlyr", "p", "h", b"1")
    table = rows_arrow([row, other, first], now=now)
    assert table.column_names == list(TRAJECTORY_COLUMNS)
    assert table.column("id").to_pylist() == ["z", "a", "b"]
    assert table.column("success").to_pylist() == [False, True, None]
    assert table.column("score").to_pylist() == [1.0, 0.5, None]
    assert table.column("data").to_pylist() == ["1", "[]", "{}"]
    assert table.schema.field("data").type == pa.large_string()
    assert rows_arrow([row, other], now=now, sort=False).column("id").to_pylist() == ["b", "a"]
    assert rows_arrow([]).num_rows == 0


def test_sighting_columns_are_what_sight_notes_item_by_item():
    from knowlyr.recorder.pipeline import Encoded
    from knowlyr.store import _adds
    from knowlyr.store.tables import trajectory_row
    from knowlyr.trajectory import AgentInfo, Source
    from tests.store.conftest import make_traj

    base = [make_traj(i).rehash() for i in range(4)]
    models = [
        base[0],
        base[1].model_copy(
            update={"agent": AgentInfo(name="gpt", model="m"), "source": Source(path="b.jsonl")}
        ),
        base[0].model_copy(update={"source": Source(path="again.jsonl")}),  # another file: kept
        base[2].model_copy(update={"agent": AgentInfo(name="")}),
        base[3],
        base[0],  # a repeat (same agent, same path): dropped
        base[0].model_copy(update={"source": Source(path="again.jsonl")}),  # dropped too
    ]
    rows = [Encoded(trajectory_row(t), None) for t in models]

    def noted(items):
        seen: dict = {}
        for t in items:
            _adds.sight(seen, t, t.id)
        return _adds.seen_columns(seen)

    for items in (models, rows, models[:2] + rows[2:], []):
        ids = [t.id for t in items]
        got = _adds.sighting_columns(items, ids)
        assert got == noted(items)
    assert len(_adds.sighting_columns(models, [t.id for t in models])[0]) == 5
