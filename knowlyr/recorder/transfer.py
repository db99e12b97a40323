"""A trajectory as plain tuples, to move it between processes cheaply (the recorder's pool).

Pickling the pydantic models themselves goes through Python-level ``__reduce_ex__`` /
``__setstate__`` for each of the ~80 nested models of a 20-step trajectory, which costs more
than converting the log. :func:`pack_trajectory` keeps each model's field dict (pickled in
C, keys memoised), nested models replaced by theirs; :func:`unpack_trajectory` puts them
back into model instances without re-validation. The result is equal to the original, field for field and
in field order (so ``model_dump_json`` is byte-identical), with the same ``fields_set``.

Example:
    >>> import pickle
    >>> from knowlyr.trajectory import Trajectory, TaskInfo
    >>> t = Trajectory(task=TaskInfo(task_id="t1"))
    >>> unpack_trajectory(pickle.loads(pickle.dumps(pack_trajectory(t)))) == t
    True
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from knowlyr.recorder.base import _build as build
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
    Usage,
)

__all__ = ["pack_trajectory", "unpack_trajectory"]


def _leaf(m: BaseModel | None) -> dict[str, Any] | tuple | None:
    """A model without nested models: its field dict, with its fields_set when that is not
    every field (a model validated from a dict that left fields out)."""
    if m is None:
        return None
    d = m.__dict__
    fs = m.__pydantic_fields_set__
    return d if len(fs) == len(d) else (d, frozenset(fs))


def _with_fs(m: BaseModel, d: dict[str, Any]) -> dict[str, Any] | tuple:
    fs = m.__pydantic_fields_set__
    return d if len(fs) == len(d) else (d, frozenset(fs))


def _build(cls: type, p: dict[str, Any] | tuple, extra: dict[str, Any] | None = None) -> Any:
    if type(p) is dict:
        return build(cls, p, extra)
    return build(cls, p[0], extra, p[1])


def _pack_step(s: Step) -> dict[str, Any] | tuple:
    d = s.__dict__.copy()  # a copy keeps the field order; nested models are replaced in place
    a, o, u = d["action"], d["observation"], d["usage"]
    if a is not None:
        d["action"] = _leaf(a)
    if o is not None:
        d["observation"] = _leaf(o)
    if u is not None:
        d["usage"] = _leaf(u)
    return _with_fs(s, d)


def pack_trajectory(t: Trajectory) -> dict[str, Any] | tuple:
    """A picklable, plain-data form of ``t`` (see :func:`unpack_trajectory`)."""
    d = t.__dict__.copy()
    task = d["task"]
    d["task"] = (_leaf(task), task.__pydantic_extra__)
    d["agent"] = _leaf(d["agent"])
    d["steps"] = [_pack_step(s) for s in d["steps"]]
    d["outcome"] = _leaf(d["outcome"])
    d["source"] = _leaf(d["source"])
    return _with_fs(t, d)


def unpack_trajectory(p: dict[str, Any] | tuple) -> Trajectory:
    """Rebuild a trajectory packed by :func:`pack_trajectory` (no re-validation, same values)."""
    d = p if type(p) is dict else p[0]
    steps = []
    for sp in d["steps"]:
        sd = sp if type(sp) is dict else sp[0]
        a, o, u = sd["action"], sd["observation"], sd["usage"]
        if a is not None:
            sd["action"] = _build(ToolCall, a)
        if o is not None:
            sd["observation"] = _build(Observation, o)
        if u is not None:
            sd["usage"] = _build(Usage, u)
        steps.append(_build(Step, sp))
    task, extra = d["task"]
    d["task"] = _build(TaskInfo, task, extra)
    d["agent"] = _build(AgentInfo, d["agent"])
    d["steps"] = steps
    d["outcome"] = _build(Outcome, d["outcome"])
    if d["source"] is not None:
        d["source"] = _build(Source, d["source"])
    return _build(Trajectory, p)
