"""What every export shares: trajectory rewards, tool schemas, the result and its dataset card."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from knowlyr.errors import ExportError
from knowlyr.store._documents import validate_document
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "CallShapes",
    "DatasetCard",
    "ExportResult",
    "ToolSets",
    "add_call_shapes",
    "as_trajectories",
    "infer_tool_schemas",
    "normalized_step_weights",
    "reward_of",
    "schemas_of_shapes",
    "step_rewards_of",
    "step_weights",
    "tool_schemas_from_calls",
    "trajectory_fields",
    "trajectory_reward",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that solves the user's task with the tools provided. "
    "Call exactly one tool per turn."
)


def trajectory_reward(traj: Trajectory, rewards: Mapping[str, float] | None = None) -> float:
    """The scalar reward of a trajectory.

    In order: ``rewards[traj.id]`` when given (e.g. from the reward engine), the sum of the step
    rewards when any step has one, ``outcome.score``, else 1.0 for success and 0.0 otherwise.
    """
    if rewards is not None and traj.id in rewards:
        return float(rewards[traj.id])
    if any(s.reward is not None for s in traj.steps):
        return traj.total_reward
    if traj.outcome.score is not None:
        return float(traj.outcome.score)
    return 1.0 if traj.outcome.success else 0.0


def normalized_step_weights(rewards: list[float | None], *, mix: float = 0.5) -> list[float]:
    """Per-step weights with mean 1 from step rewards.

    Negative rewards count as 0 and steps without a reward get the mean of the others; the
    reward-proportional weights ``w`` (mean 1) are mixed with uniform weights:
    ``(1 - mix) + mix * w``. ``mix=1`` is purely reward-proportional (a step with reward 0 gets
    weight 0), ``mix=0`` is uniform. When no step has a positive reward every weight is 1.
    """
    if not 0.0 <= mix <= 1.0:
        raise ExportError(f"step weight mix must be in [0, 1], got {mix}")
    known = [max(r, 0.0) for r in rewards if r is not None]
    if not known or sum(known) <= 0:
        return [1.0] * len(rewards)
    fill = sum(known) / len(known)
    vals = [fill if r is None else max(r, 0.0) for r in rewards]
    mean = sum(vals) / len(vals)
    return [(1.0 - mix) + mix * v / mean for v in vals]


def step_weights(traj: Trajectory, *, mix: float = 0.5) -> list[float]:
    """:func:`normalized_step_weights` of a trajectory's step rewards."""
    return normalized_step_weights([s.reward for s in traj.steps], mix=mix)


def as_trajectories(items: Iterable[Trajectory | Mapping[str, Any]]) -> Iterable[Trajectory]:
    """Accept Trajectory objects or their dicts (``model_dump``); validate the dicts."""
    for i, t in enumerate(items):
        if isinstance(t, Trajectory):
            yield t
        elif isinstance(t, Mapping):
            try:
                yield Trajectory.model_validate(t)
            except Exception as e:
                raise ExportError(f"record {i} is not a valid trajectory: {e}") from e
        else:
            raise ExportError(f"record {i} must be a Trajectory or a dict, got {type(t).__name__}")


def trajectory_fields(
    items: Iterable[Trajectory | Mapping[str, Any]], validated: bool
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]]:
    """Each trajectory's fields, task and outcome as mappings (a model's ``__dict__``, a
    document's dicts): the exporter reads both alike. Dicts are validated as the model
    validates them (:func:`~knowlyr.store._documents.validate_document`) unless
    ``validated``."""
    for i, t in enumerate(items):
        if isinstance(t, Trajectory):
            td = t.__dict__
            yield td, td["task"].__dict__, td["outcome"].__dict__
        elif isinstance(t, Mapping):
            if not validated:
                try:
                    t = validate_document(t)
                except Exception as e:
                    raise ExportError(f"record {i} is not a valid trajectory: {e}") from e
            yield t, t["task"], t.get("outcome") or {}
        else:
            raise ExportError(f"record {i} must be a Trajectory or a dict, got {type(t).__name__}")


def step_rewards_of(steps: list[Any]) -> list[float | None]:
    """The reward of each step (models or step documents; None where a step has none)."""
    return [(s if type(s) is dict else s.__dict__).get("reward") for s in steps]


def reward_of(step_rewards: list[float | None], outcome: Mapping[str, Any]) -> float:
    """:func:`~knowlyr.export.common.trajectory_reward` of a trajectory's step rewards and
    outcome: their sum when any step has one, else ``score``, else 1.0 for a success."""
    if any(r is not None for r in step_rewards):
        return float(sum(r or 0.0 for r in step_rewards))
    if outcome.get("score") is not None:
        return float(outcome["score"])
    return 1.0 if outcome.get("success") else 0.0


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def infer_tool_schemas(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """OpenAI function schemas for every tool the trajectories call (sorted by name).

    Properties are the union of the parameter names seen, typed from the values of the first
    call of each set of names (several types give a list of types); a parameter present in
    every call is required. There is no description: the calls do not say what a tool does.
    The invalid-action tool (a reply that could not be parsed) is not a tool and is left out.
    This is the fallback for logs that do not record their tools; the exporters use the real
    schemas where the source has them (:func:`knowlyr.export.messages.declared_tools`).

    Example:
        >>> from knowlyr.trajectory import Step, TaskInfo, ToolCall, Trajectory
        >>> t = Trajectory(task=TaskInfo(task_id="x"), steps=[
        ...     Step(index=0, action=ToolCall(tool="q", params={"a": "1", "b": 2})),
        ...     Step(index=1, action=ToolCall(tool="q", params={"a": "2"}))])
        >>> infer_tool_schemas([t])[0]["function"]["parameters"]["required"]
        ['a']
    """
    actions = [s.action for traj in trajectories for s in traj.steps if s.action is not None]
    return tool_schemas_from_calls([a.tool for a in actions], [a.params for a in actions])


def tool_schemas_from_calls(
    tools: list[str],
    params: list[dict[str, Any]],
    keys: list[tuple[str, ...]] | None = None,
) -> list[dict[str, Any]]:
    """:func:`infer_tool_schemas` of the calls ``zip(tools, params)`` (in call order);
    ``keys`` (``tuple(params[i])`` per call) when already at hand."""
    if keys is None:
        keys = list(map(tuple, params))
    if INVALID_ACTION_TOOL in tools:  # a reply that could not be parsed calls no tool
        kept = [i for i, t in enumerate(tools) if t != INVALID_ACTION_TOOL]
        tools, params, keys = (
            [tools[i] for i in kept],
            [params[i] for i in kept],
            [keys[i] for i in kept],
        )
    counts = Counter(zip(tools, keys, strict=True))  # in order of first appearance
    first_index: dict[tuple[str, tuple[str, ...]], int] = {}
    if len(counts) <= 64:  # few shapes (the usual case): find each one's first call
        for tool, k in counts:
            i = keys.index(k)
            while tools[i] != tool:
                i = keys.index(k, i + 1)
            first_index[tool, k] = i
    else:
        shapes = list(zip(tools, keys, strict=True))
        first_index = dict(zip(reversed(shapes), range(len(shapes) - 1, -1, -1), strict=True))
    seen: dict[str, dict[str, list[str]]] = {}
    calls: Counter[str] = Counter()
    present: dict[str, Counter[str]] = {}
    for (tool, keys), n in counts.items():
        props = seen.setdefault(tool, {})
        calls[tool] += n
        cnt = present.setdefault(tool, Counter())
        first = params[first_index[(tool, keys)]]
        for k in keys:
            types = props.setdefault(k, [])
            t = _JSON_TYPES.get(type(first[k]), "null" if first[k] is None else "string")
            if t not in types:
                types.append(t)
            cnt[k] += n
    out = []
    for name in sorted(seen):
        props = seen[name]
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "parameters": {
                        "type": "object",
                        "properties": {
                            k: {"type": t[0] if len(t) == 1 else t} for k, t in props.items()
                        },
                        "required": [k for k in props if present[name][k] == calls[name]],
                    },
                },
            }
        )
    return out


#: Tool-call shapes: (tool, parameter names) -> the params of the first call of that shape, in
#: order of first appearance. The schemas of all the calls are those of these
#: (:func:`schemas_of_shapes`), so an export keeps one call per shape, not every call.
CallShapes = dict[tuple[str, tuple[str, ...]], dict[str, Any]]


def add_call_shapes(shapes: CallShapes, steps: Iterable[Any]) -> None:
    """Record in ``shapes`` the tool calls of ``steps`` (models or step documents) whose shape
    is new."""
    for s in steps:
        a = (s if type(s) is dict else s.__dict__).get("action")
        if a is not None:
            ad = a if type(a) is dict else a.__dict__
            p = ad["params"]
            shapes.setdefault((ad["tool"], tuple(p)), p)


def schemas_of_shapes(shapes: CallShapes) -> list[dict[str, Any]]:
    """:func:`infer_tool_schemas` of the calls whose shapes ``shapes`` holds."""
    return tool_schemas_from_calls(
        [t for t, _ in shapes], list(shapes.values()), [k for _, k in shapes]
    )


class ToolSets:
    """The tools each row of an export declares: its trajectory's agent's.

    ``tools`` given: every row declares them. Otherwise a trajectory's tools are the ones its
    source declares (:func:`~knowlyr.export.messages.declared_tools`: ``metadata["tools"]``,
    or the fixed tools of the agent writing its log format), else they are inferred from the
    calls of all the trajectories of the same agent (name and log format) in the export
    (:func:`tool_schemas_from_calls`). :meth:`key` names a trajectory's set;
    :meth:`schemas` gives each set's schemas once every call has been seen.
    """

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        self.given = tools
        #: set key -> declared schemas (a given or declared set)
        self.declared: dict[str, list[dict[str, Any]]] = {} if tools is None else {"": tools}
        #: set key -> call shapes of an inferred set (filled by the exporter)
        self.shapes: dict[str, CallShapes] = {}

    def key(self, trajectory: Mapping[str, Any]) -> tuple[str, bool]:
        """The key of the tool set of ``trajectory`` (a document or a model's ``__dict__``),
        and whether it is inferred (then the caller adds its calls to ``shapes[key]``)."""
        from knowlyr.export.messages import declared_tools

        if self.given is not None:
            return "", False
        tools = declared_tools(trajectory)
        if tools is not None:
            key = "=" + orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()
            self.declared.setdefault(key, tools)
            return key, False
        agent, source = trajectory.get("agent"), trajectory.get("source")
        name = (agent if type(agent) is dict else agent.__dict__).get("name") if agent else None
        fmt = (
            (source if type(source) is dict else source.__dict__).get("format") if source else None
        )
        key = f"~{name or ''}\x00{fmt or ''}"
        self.shapes.setdefault(key, {})  # a set of no call at all declares no tool
        return key, True

    def merge(self, other: ToolSets) -> None:
        """Add ``other``'s sets (a part of the same export, gathered elsewhere) to these."""
        for key, tools in other.declared.items():
            self.declared.setdefault(key, tools)
        for key, shapes in other.shapes.items():
            mine = self.shapes.setdefault(key, {})
            for shape, params in shapes.items():  # in order of first appearance
                mine.setdefault(shape, params)

    def schemas(self) -> dict[str, list[dict[str, Any]]]:
        """Each set's schemas (inferred sets from the shapes seen)."""
        out = dict(self.declared)
        for key, shapes in self.shapes.items():
            out.setdefault(key, schemas_of_shapes(shapes))
        return out

    @staticmethod
    def union(sets: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The schemas of ``sets``, one per tool name (the first seen)."""
        out: dict[str, dict[str, Any]] = {}
        for tools in sets:
            for t in tools:
                out.setdefault(t.get("function", t).get("name"), t)
        return list(out.values())

    @staticmethod
    def names(sets: Iterable[list[dict[str, Any]]]) -> list[str]:
        """The tool names of ``sets``, each once, in order of first appearance."""
        return list(
            dict.fromkeys(t.get("function", t).get("name") for tools in sets for t in tools)
        )


@dataclass
class DatasetCard:
    """What a reader of an exported dataset needs to know: counts, filters, reward stats."""

    kind: str
    rows: int
    trajectories: int
    tasks: int
    rejected: dict[str, int] = field(default_factory=dict)
    reward: dict[str, float] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    #: invalid actions (replies the harness could not parse) in the exported trajectories,
    #: kept out of the rows: ``{"steps": n, "trajectories": m}``
    invalid_actions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rows": self.rows,
            "trajectories": self.trajectories,
            "tasks": self.tasks,
            "rejected": self.rejected,
            "reward": self.reward,
            "params": self.params,
            "splits": self.splits,
            "invalid_actions": self.invalid_actions,
        }

    def to_markdown(self, *, data_file: str | None = None, config: str = "default") -> str:
        """The card as a README; with ``data_file`` (the folder's parquet file) it starts with
        the ``configs`` header that makes ``datasets.load_dataset(FOLDER)`` (and ``trl ...
        --dataset_name FOLDER``) read that file as the ``train`` split of config ``config``.

        ``datasets`` caches what it loads from a folder under the folder's name and the
        config's name, whatever the files hold: give every export its own ``config`` (see
        :func:`readme`), or a re-export into a folder of the same name loads the old rows."""
        lines = []
        if data_file is not None:
            lines += [
                "---",
                "configs:",
                f"- config_name: {config}",
                "  default: true",
                "  data_files:",
                "  - split: train",
                f"    path: {data_file}",
                "---",
                "",
            ]
        lines += [
            f"# knowlyr {self.kind} dataset",
            "",
            "| | |",
            "|---|---|",
            f"| rows | {self.rows} |",
            f"| trajectories | {self.trajectories} |",
            f"| tasks | {self.tasks} |",
        ]
        lines += [f"| split `{k}` | {v} rows |" for k, v in self.splits.items()]
        lines += [f"| rejected: {k} | {v} |" for k, v in self.rejected.items()]
        if self.invalid_actions:
            lines += [
                f"| invalid actions left out: {k} | {v} |" for k, v in self.invalid_actions.items()
            ]
        lines += [f"| reward {k} | {v:.4g} |" for k, v in self.reward.items()]
        if self.params:
            lines += [
                "",
                "Export parameters:",
                "",
                "```json",
                json.dumps(self.params, indent=2, default=str),
                "```",
            ]
        if data_file is not None:
            lines += [
                "",
                "Load it with `datasets.load_dataset(FOLDER)` (the parquet file), or "
                '`datasets.load_from_disk(FOLDER + "/dataset")` (the Arrow copy).',
            ]
        if self.invalid_actions:
            lines += [
                "",
                "An invalid action (a reply the agent's harness could not parse) stays in its "
                "trajectory but is no row's target: it is cut from the conversation with the "
                "harness's answer to it.",
            ]
        return "\n".join(lines) + "\n"


def reward_stats(values: list[float]) -> dict[str, float]:
    """Mean, population std, min and max of the finite ``values`` (a NaN reward is data, not
    a crash: it is left out of the statistics)."""
    if not all(map(math.isfinite, values)):
        values = [v for v in values if math.isfinite(v)]
    if not values:
        return {}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


class RowsDigest:
    """A digest of an export: its card and, row by row, which trajectories (and chunks) the
    rows hold, whatever batches they come in. It names the folder's ``datasets`` config
    (:func:`readme`): ``datasets`` caches what it loads from a folder under the folder's and
    the config's names, so two exports written to folders of the same name would otherwise
    share a cache, and the second would load the first one's rows."""

    COLUMNS = ("trajectory_id", "chunk", "chosen_id", "rejected_id", "task_id", "trajectory_ids")

    def __init__(self, card: DatasetCard) -> None:
        import hashlib

        self._card = orjson.dumps(card.to_dict(), default=str)
        self._columns = {name: hashlib.sha256() for name in self.COLUMNS}  # one per column

    def update(self, batch: Any) -> None:
        """Add the rows of an Arrow record batch (or table)."""
        for name, h in self._columns.items():
            if name in batch.schema.names:
                values = batch.column(name).to_pylist()
                h.update("".join(f"{v}\n" for v in values).encode())

    def hexdigest(self) -> str:
        import hashlib

        h = hashlib.sha256(self._card)
        for c in self._columns.values():
            h.update(c.digest())
        return h.hexdigest()


def readme(card: DatasetCard, digest: RowsDigest | None) -> str:
    """The README of an export folder: the card, with the ``configs`` header naming
    ``data.parquet`` (as the config ``KIND-DIGEST``) when a ``digest`` of its rows is given."""
    if digest is None:
        return card.to_markdown()
    config = f"{card.kind}-{digest.hexdigest()[:16]}"
    return card.to_markdown(data_file="data.parquet", config=config)


@dataclass
class ExportResult:
    """An exported dataset, its card and the records that were left out (with the reason)."""

    dataset: Any
    card: DatasetCard
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.dataset)

    def save(self, path: str | os.PathLike[str], *, parquet: bool = True) -> Path:
        """Write ``save_to_disk`` data, ``data.parquet``, ``README.md`` (the card) and ``card.json``."""
        from knowlyr.export.folder import clear_caches

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if (path / "dataset").is_dir():
            clear_caches(path / "dataset")
        self.dataset.save_to_disk(str(path / "dataset"))
        if parquet:
            self.dataset.to_parquet(str(path / "data.parquet"))
        digest = None
        if parquet:
            digest = RowsDigest(self.card)
            digest.update(self.dataset.data.table)
        (path / "README.md").write_text(readme(self.card, digest), encoding="utf-8")
        (path / "card.json").write_text(
            json.dumps(self.card.to_dict(), indent=2, default=str), encoding="utf-8"
        )
        return path

    def to_store(self, store: Any, *, name: str, split: str = "train") -> Any:
        """Write the dataset to the store: its rows once, then a manifest naming them.

        Each row goes to ``dataset_rows`` under the sha256 of its sorted-key JSON (a row
        another export already wrote is not written again); one ``datasets`` row (``name``,
        ``kind``, ``split``, ``n_rows``, the ordered ``row_hashes`` and the
        ``trajectory_ids`` behind them) is the dataset. ``store`` is a
        :class:`knowlyr.store.Store`; returns the ``datasets`` manifest (that table version is
        the dataset version). Re-exporting the same rows under the same name adds nothing.
        """
        import hashlib

        hashes: list[str] = []
        trajectory_ids: set[str] = set()
        out: dict[str, dict[str, Any]] = {}
        for row in self.dataset.to_list():
            data = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
            digest = hashlib.sha256(data).hexdigest()
            hashes.append(digest)
            ids = [row.get(k) for k in ("trajectory_id", "chosen_id", "rejected_id")]
            trajectory_ids.update(i for i in ids if i)
            if digest not in out:
                out[digest] = {
                    "row_hash": digest,
                    "kind": self.card.kind,
                    "trajectory_id": next((i for i in ids if i), None),
                    "data": data.decode(),
                }
        if not hashes:
            return store.append("datasets", [])
        store.append("dataset_rows", list(out.values()))
        manifest = {
            "dataset": name,
            "rows_hash": hashlib.sha256("\n".join(hashes).encode()).hexdigest(),
            "kind": self.card.kind,
            "split": split,
            "n_rows": len(hashes),
            "row_hashes": hashes,
            "trajectory_ids": sorted(trajectory_ids),
        }
        return store.append("datasets", [manifest])
