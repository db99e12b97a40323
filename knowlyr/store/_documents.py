"""Trajectory JSON to ``trajectories`` rows without building models.

:class:`~knowlyr.trajectory.Trajectory` stays the schema's single source of truth: this module
derives, from the model's own pydantic-core schema, a validator and a serializer in which every
model is a typed dict. Fields, types, coercions, defaults, extra-field rules and serializers are
the model's; only the result is plain dicts instead of ~80 model instances per 20-step
trajectory (validating a line costs ~1/3 of ``Trajectory.model_validate_json`` here). So a
trajectory JSON line becomes the row ``trajectory_row(Trajectory.model_validate_json(line))``
gives, byte for byte, and a bad line raises the model's own ``ValidationError`` (the line is
validated by the model once more to say why); ``tests/store/test_documents.py`` checks both on
the fixtures and on hostile lines. :func:`validate_document` does the same for a JSON value
already parsed (the export's documents: ``tests/export/test_documents.py``).

The model's one validator (``id`` filled with the content hash when empty) is applied here
with :func:`knowlyr.trajectory.document_id`, the function the recorder's documents use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from knowlyr.trajectory import Trajectory, document_id

__all__ = ["DocumentRow", "document_row_of", "validate_document", "validate_line"]


@dataclass(slots=True)
class DocumentRow:
    """A trajectory's row of the ``trajectories`` table (``knowlyr.store.tables.TRAJECTORY_ROW``
    order, ``data`` its JSON), as :meth:`~knowlyr.store.Store.add_trajectories` takes it."""

    row: tuple

    @property
    def id(self) -> str:
        return self.row[0]


def _typed(schema: Any, top: bool = False) -> Any:
    """``schema`` with every ``model`` schema turned into the equivalent ``typed-dict``."""
    if isinstance(schema, list):
        return [_typed(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if top and kind == "function-after" and schema["schema"].get("cls") is Trajectory:
        return _typed(schema["schema"])  # Trajectory._fill_id: applied by validate_line
    if kind in ("function-after", "function-before", "function-wrap", "function-plain"):
        raise TypeError(f"a model validator the document path cannot apply: {schema!r:.200}")
    if kind == "default":
        return _default(schema)
    if kind != "model":
        return {k: _typed(v) for k, v in schema.items()}
    fields_schema, config = schema["schema"], schema.get("config", {})
    if schema.get("custom_init") or schema.get("root_model") or fields_schema["computed_fields"]:
        raise TypeError(f"{schema['cls'].__name__}: a model feature typed dicts lack")
    fields = {}
    for name, f in fields_schema["fields"].items():
        inner = _typed(f["schema"])
        field = {
            "type": "typed-dict-field",
            "schema": inner,
            "required": inner["type"] != "default",
        }
        for k in ("validation_alias", "serialization_alias", "serialization_exclude"):
            if k in f:
                field[k] = f[k]
        fields[name] = field
    out: dict[str, Any] = {"type": "typed-dict", "fields": fields, "config": dict(config)}
    if "extra_fields_behavior" in config:
        out["extra_behavior"] = config["extra_fields_behavior"]
    if "ref" in schema:
        out["ref"] = schema["ref"]
    return out


def _default(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's default: a model made by default (``Field(default_factory=AgentInfo)``)
    becomes its document, every field written, as validation would give it."""
    from pydantic import BaseModel

    out = {k: _typed(v) for k, v in schema.items()}
    make = schema.get("default_factory")
    if make is not None and not schema.get("default_factory_takes_data"):
        if isinstance(make, type) and issubclass(make, BaseModel):
            out["default_factory"] = lambda: make().model_dump()
    elif isinstance(schema.get("default"), BaseModel):
        value = schema["default"]
        out.pop("default")
        out["default_factory"] = lambda: value.model_dump()
    return out


@cache
def _codec() -> tuple[Any, Any]:
    from pydantic_core import SchemaSerializer, SchemaValidator

    schema = _typed(Trajectory.__pydantic_core_schema__, top=True)
    config = {"title": "Trajectory"}  # errors read "... validation error for Trajectory"
    return SchemaValidator(schema, config), SchemaSerializer(schema, config)


def validate_line(line: bytes | str) -> dict[str, Any]:
    """The trajectory document of one JSON line, as ``Trajectory.model_validate_json`` reads
    it (every field present, ``id`` filled), in plain dicts.

    Raises:
        pydantic.ValidationError: what the model raises for the same line.
    """
    from pydantic import ValidationError

    try:
        doc = _codec()[0].validate_json(line)
    except ValidationError:
        Trajectory.model_validate_json(line)  # the model's own error, word for word
        raise
    if not doc["id"]:
        task = doc["task"]
        doc["id"] = document_id(task["task_id"], task["instruction"], doc["steps"])
    return doc


def validate_document(obj: Any) -> dict[str, Any]:
    """:func:`validate_line` of a JSON value already parsed (``orjson.loads``), as
    ``Trajectory.model_validate`` reads it: ``Trajectory.model_validate(obj).model_dump()``,
    without the models.

    Raises:
        pydantic.ValidationError: what the model raises for the same value.
    """
    from pydantic import ValidationError

    try:
        doc = _codec()[0].validate_python(obj)
    except ValidationError:
        Trajectory.model_validate(obj)  # the model's own error, word for word
        raise
    if not doc["id"]:
        task = doc["task"]
        doc["id"] = document_id(task["task_id"], task["instruction"], doc["steps"])
    return doc


def document_row_of(doc: dict[str, Any]) -> DocumentRow:
    """The row of a document from :func:`validate_line` (its ``source`` possibly set since):
    ``data`` is what ``Trajectory.to_json`` writes for it."""
    task, agent, out, src = doc["task"], doc["agent"], doc["outcome"], doc["source"]
    data = _codec()[1].to_json(doc, exclude_none=True)
    return DocumentRow(
        (
            doc["id"],
            task["task_id"],
            task["domain"],
            task["suite"],
            agent["name"],
            agent["model"],
            len(doc["steps"]),
            out["success"],
            out["score"],
            src["format"],
            src["path"],
            src["blob"],
            data,
        )
    )
