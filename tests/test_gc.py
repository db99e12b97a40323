"""knowlyr._gc.paused: the cyclic GC is off inside and back to what it was after."""

from __future__ import annotations

import gc

import pytest

from knowlyr._gc import paused


def test_paused_switches_gc_off_and_back_on() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():  # nested: the inner block must not switch it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_restores_after_an_error_and_as_a_decorator() -> None:
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("boom")
    assert gc.isenabled()

    @paused()
    def inside() -> bool:
        return gc.isenabled()

    assert inside() is False and gc.isenabled()


def test_paused_leaves_a_disabled_gc_disabled() -> None:
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_store_reads_leave_gc_on(tmp_path) -> None:
    from knowlyr.store import Store
    from knowlyr.trajectory import Step, TaskInfo, ToolCall, Trajectory

    store = Store.open(str(tmp_path / "store"))
    trajs = [
        Trajectory(
            task=TaskInfo(task_id=f"t{i}"),
            steps=[Step(index=0, action=ToolCall(tool="bash", params={"command": f"echo {i}"}))],
        )
        for i in range(5)
    ]
    store.add_trajectories(trajs)
    got = store.read_trajectories()
    assert sorted(t.id for t in got) == sorted(t.id for t in trajs)
    assert gc.isenabled()
    assert len(list(store.iter_trajectories(batch_size=2))) == 5 and gc.isenabled()
