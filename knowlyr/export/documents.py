"""Trajectory JSON documents validated exactly as the model validates them, without models.

A batch stage (export, reward) reads each trajectory's fields once; building a
:class:`~knowlyr.trajectory.Trajectory` of ~80 pydantic objects per trajectory to do so costs
more than the stage itself. :func:`validate_document` runs pydantic-core on a schema *derived
from the model's own core schema* (every model node turned into a typed dict with the same
fields, defaults, types and extra-field rule), so the model stays the single source of truth:
a document is accepted exactly when ``Trajectory.model_validate`` accepts it, and comes back
as the plain-dict twin of ``model.model_dump()`` (defaults filled in, values coerced, ``id``
computed when empty). A rejected document raises the model's own error (it is validated by
the model once more to say why), so messages are the model path's.

Example:
    >>> doc = validate_document({"task": {"task_id": "t1"}, "steps": []})
    >>> doc["agent"], doc["outcome"]["success"], len(doc["id"])
    ({'name': 'unknown', 'model': None, 'version': None}, None, 64)
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from knowlyr.trajectory import Trajectory, document_id

__all__ = ["document_schema", "validate_document"]


def _plain(schema: Any) -> Any:
    """``schema`` (a pydantic-core schema) with every model node as a typed-dict node."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in ("function-after", "function-before", "function-wrap", "function-plain"):
        if kind == "function-after" and schema["schema"].get("type") == "model":
            return _plain(schema["schema"])  # Trajectory._fill_id: done by validate_document
        raise TypeError(f"cannot derive a document schema from a {kind} validator")
    if kind == "model":
        fields_schema = schema["schema"]
        if fields_schema.get("type") != "model-fields":
            raise TypeError(f"cannot derive a document schema from {fields_schema.get('type')}")
        config = schema.get("config", {})
        extra = fields_schema.get("extra_behavior") or config.get("extra_fields_behavior")
        fields = {}
        for name, field in fields_schema["fields"].items():
            inner = field["schema"]
            fields[name] = {
                "type": "typed-dict-field",
                "schema": _plain(inner),
                "required": inner.get("type") != "default",
            }
        out: dict[str, Any] = {"type": "typed-dict", "fields": fields}
        if extra:
            out["extra_behavior"] = extra
        return out
    if kind == "default" and "default_factory" in schema:
        factory = schema["default_factory"]
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            out = {k: v for k, v in schema.items() if k != "default_factory"}
            default = factory().model_dump()
            if not all(isinstance(v, str | int | float | bool | None) for v in default.values()):
                raise TypeError(f"cannot derive a document schema: {factory.__name__} default")
            out["default_factory"] = default.copy  # a fresh dict of scalars each time
            out["schema"] = _plain(schema["schema"])
            return out
    if kind == "default" and isinstance(schema.get("default"), BaseModel):
        raise TypeError("cannot derive a document schema from a model instance default")
    return {k: _plain(v) if k != "metadata" else v for k, v in schema.items()}


@functools.cache
def _validator() -> Any:
    from pydantic_core import SchemaValidator

    return SchemaValidator(document_schema())


def document_schema() -> dict[str, Any]:
    """The pydantic-core schema of a trajectory document, derived from ``Trajectory``'s."""
    return _plain(Trajectory.__pydantic_core_schema__)


def validate_document(obj: Any) -> dict[str, Any]:
    """``obj`` validated as ``Trajectory.model_validate(obj).model_dump()`` would give it.

    Raises:
        pydantic.ValidationError: ``obj`` is not a trajectory (the model's own error).
    """
    from pydantic import ValidationError

    try:
        doc = _validator().validate_python(obj)
    except ValidationError:
        Trajectory.model_validate(obj)  # the model's error (it rejects what the schema does)
        raise
    if not doc["id"]:
        task = doc["task"]
        doc["id"] = document_id(task["task_id"], task["instruction"], doc["steps"])
    return doc
