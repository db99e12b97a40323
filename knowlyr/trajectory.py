"""The one trajectory model that flows through the whole pipeline.

Adapters (``knowlyr.recorder``) produce it from other agents' logs, ``knowlyr.rollout.collect``
produces it from our environments, and the reward, store and export stages consume it.

Example:
    >>> from knowlyr.trajectory import Trajectory, Step, ToolCall, Observation, TaskInfo
    >>> traj = Trajectory(
    ...     task=TaskInfo(task_id="t1", instruction="Fix the bug"),
    ...     steps=[Step(index=0, action=ToolCall(tool="bash", params={"command": "ls"}),
    ...                 observation=Observation(output="a.py", exit_code=0))],
    ... )
    >>> traj.id == traj.content_hash()
    True

The content hash
----------------
``Trajectory.id`` is ``sha256`` (hex) over a canonical JSON document holding exactly what
makes two trajectories *the same episode*::

    {"task": [task_id, instruction],
     "steps": [[thought, tool, params, message, output, exit_code], ...]}

serialised with sorted keys, no whitespace and UTF-8 (orjson ``OPT_SORT_KEYS``). Timestamps,
durations, run ids, agent names, usage, rewards and any ``metadata`` are excluded, so the same
run ingested twice (or from two copies of the log) is one trajectory, while two different
tasks with identical steps never collide because the task id and instruction are hashed.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "INVALID_ACTION_TOOL",
    "SCHEMA_VERSION",
    "AgentInfo",
    "Observation",
    "Outcome",
    "Source",
    "Step",
    "TaskInfo",
    "ToolCall",
    "Trajectory",
    "Usage",
    "document_id",
    "from_chat_messages",
    "to_chat_messages",
]

SCHEMA_VERSION = "1.0"

#: Tool name of an action the model wrote but that could not be parsed (no tool call, a
#: malformed one, several where one is expected). Its params hold ``raw`` (the text) and
#: ``error`` (why). No env offers this tool: a bad generation is data, not a crash, and the
#: reward rules count format errors as steps with this tool.
INVALID_ACTION_TOOL = "invalid_action"


class SharedFieldsSet(set):
    """A ``fields_set`` (the names of the fields a model was given) shared by every model
    with the same names, instead of a set per model.

    A set per model was a third of a loaded trajectory's memory (a step's twelve names take
    728 bytes) and a third of the objects the cyclic GC walks: loading 4,000 trajectories
    into a list took 340 us each with a set per model and 205 us shared (47 KB each instead
    of 73). Pydantic changes a model's ``fields_set`` in one way, adding a name on assignment,
    and ``_Model.__setattr__`` gives the model its own copy first (copy on write); a copy
    (``model_copy``) has its own. Do not change ``model.model_fields_set`` in place.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(set(self))


_FIELDS_SETS: dict[frozenset[str], SharedFieldsSet] = {}
_MAX_FIELDS_SETS = 4096  # name sets are few; a TaskInfo's extras are arbitrary names
_put_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__


def shared_fields_set(names: Any) -> set[str]:
    """The shared set of ``names`` (a plain new set once the table is full)."""
    key = frozenset(names)
    shared = _FIELDS_SETS.get(key)
    if shared is None:
        if len(_FIELDS_SETS) >= _MAX_FIELDS_SETS:
            return set(key)
        shared = _FIELDS_SETS.setdefault(key, SharedFieldsSet(key))
    return shared


def _share(m: BaseModel | None) -> None:
    if m is not None:
        fs = m.__pydantic_fields_set__
        if type(fs) is not SharedFieldsSet:
            _put_fields_set(m, shared_fields_set(fs))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    def __setattr__(self, name: str, value: Any) -> None:
        fs = self.__pydantic_fields_set__
        if type(fs) is SharedFieldsSet and name not in fs:  # pydantic will add the name
            _put_fields_set(self, set(fs))
        super().__setattr__(name, value)


class ToolCall(_Model):
    """An action: the tool the agent called and its parameters."""

    tool: str
    params: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = Field(default=None, description="Producer's tool-call id, if any.")


class Observation(_Model):
    """What the environment answered to an action."""

    output: str = ""
    exit_code: int | None = None
    error: str | None = None


class Usage(_Model):
    """Token counts and cost of the model call that produced a step."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None


class Step(_Model):
    """One turn: the agent's thought and action (or message) and the environment's answer."""

    index: int
    thought: str = ""
    action: ToolCall | None = None
    message: str | None = Field(
        default=None, description="Text sent to the user instead of (or with) a tool call."
    )
    observation: Observation | None = None
    reward: float | None = None
    usage: Usage | None = None
    token_ids: list[int] | None = Field(
        default=None, description="Completion token ids, when the producer kept them."
    )
    logprobs: list[float] | None = None
    timestamp: datetime | None = None
    duration_s: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def tool(self) -> str | None:
        return self.action.tool if self.action is not None else None


class TaskInfo(_Model):
    """What the agent was asked to do."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    domain: str = "generic"
    suite: str | None = None
    instruction: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentInfo(_Model):
    name: str = "unknown"
    model: str | None = None
    version: str | None = None


class Outcome(_Model):
    """How the episode ended. ``success`` is ``None`` when the log does not say."""

    success: bool | None = None
    score: float | None = None
    terminated: bool = False
    truncated: bool = False
    tests_passed: int | None = None
    tests_failed: int | None = None
    reason: str | None = Field(default=None, description="Exit status or why the episode ended.")
    resolved: bool | None = Field(
        default=None,
        description="An evaluation's verdict (e.g. the SWE-bench harness); None when not evaluated.",
    )
    submission: str | None = Field(
        default=None, description="What the agent submitted (a patch, an answer), when it did."
    )
    label_source: str | None = Field(
        default=None,
        description="Where success / resolved came from: 'log' (the log itself), 'env' (our "
        "environment's check) or the results file that labelled it.",
    )


class Source(_Model):
    """Where a trajectory came from."""

    format: str = "knowlyr"
    path: str | None = None
    blob: str | None = Field(default=None, description="sha256 of the raw log stored as a blob.")
    line: int | None = None


class Trajectory(_Model):
    """A whole episode. ``id`` is the canonical content hash (see the module docstring)."""

    id: str = ""
    schema_version: str = SCHEMA_VERSION
    task: TaskInfo
    agent: AgentInfo = Field(default_factory=AgentInfo)
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    source: Source = Field(default_factory=Source)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fill_id(self) -> Trajectory:
        if not self.id:
            self.id = self.content_hash()
        # and every model of the tree gets the shared set of its field names (SharedFieldsSet);
        # one validator: the store's document path expects exactly this one on the schema
        _share(self)
        _share(self.task)
        _share(self.agent)
        _share(self.outcome)
        _share(self.source)
        for st in self.steps:
            _share(st)
            _share(st.action)
            _share(st.observation)
            _share(st.usage)
        return self

    def canonical_bytes(self) -> bytes:
        """The canonical JSON the content hash is computed over."""
        steps = []
        for s in self.steps:
            a, o = s.action, s.observation
            steps.append(
                (
                    s.thought,
                    a.tool if a else None,
                    a.params if a else None,
                    s.message,
                    o.output if o else None,
                    o.exit_code if o else None,
                )
            )
        return _canonical(self.task.task_id, self.task.instruction, steps)

    def content_hash(self) -> str:
        """sha256 hex digest of :meth:`canonical_bytes`."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    def rehash(self) -> Trajectory:
        """Recompute ``id`` after the steps or task were changed in place; returns self."""
        self.id = self.content_hash()
        return self

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward or 0.0 for s in self.steps))

    def tools_used(self) -> list[str]:
        return [s.action.tool for s in self.steps if s.action is not None]

    def to_json(self) -> bytes:
        """Compact JSON without ``None`` fields (``model_dump_json(exclude_none=True)`` as bytes,
        straight from pydantic-core)."""
        return self.__pydantic_serializer__.to_json(self, exclude_none=True)

    @classmethod
    def from_json(cls, data: bytes | str) -> Trajectory:
        return cls.model_validate(orjson.loads(data))

    def to_messages(self, system_prompt: str | None = None) -> list[dict[str, Any]]:
        """OpenAI-style chat messages; see :func:`to_chat_messages`."""
        return to_chat_messages(self, system_prompt=system_prompt)


# -- chat messages --------------------------------------------------------------------------

Role = Literal["system", "user", "assistant", "tool"]


def _call_id(step: Step) -> str:
    return step.action.call_id if step.action and step.action.call_id else f"call_{step.index}"


def _canonical(task_id: str, instruction: str, steps: list[tuple]) -> bytes:
    doc = {"task": (task_id, instruction), "steps": steps}
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def document_id(task_id: str, instruction: str, steps: list[dict[str, Any]]) -> str:
    """:meth:`Trajectory.content_hash` of a trajectory given as its JSON document's task id,
    instruction and step documents (``None`` fields left out, as ``to_json`` writes them)."""
    canon = []
    for s in steps:
        a, o = s.get("action"), s.get("observation")
        canon.append(  # thought, params and output are never None, so always written
            (
                s["thought"],
                a["tool"] if a else None,
                a["params"] if a else None,
                s.get("message"),
                o["output"] if o else None,
                o.get("exit_code") if o else None,
            )
        )
    return hashlib.sha256(_canonical(task_id, instruction, canon)).hexdigest()


def to_chat_messages(traj: Trajectory, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Convert a trajectory to OpenAI-style chat messages with ``tool_calls``.

    The user turn is the task instruction; each step becomes an assistant message (thought as
    ``content``, the action as one ``tool_calls`` entry with JSON ``arguments``) followed by a
    ``tool`` message with the observation. A step with only a ``message`` becomes a plain
    assistant message. :func:`from_chat_messages` inverts this, except for exit codes, which
    chat messages have no field for.
    """
    msgs: list[dict[str, Any]] = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": traj.task.instruction})
    for step in traj.steps:
        content = step.thought
        if step.message is not None:
            content = f"{content}\n{step.message}".strip("\n") if content else step.message
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if step.action is not None:
            msg["tool_calls"] = [
                {
                    "id": _call_id(step),
                    "type": "function",
                    "function": {
                        "name": step.action.tool,
                        "arguments": orjson.dumps(step.action.params).decode(),
                    },
                }
            ]
        msgs.append(msg)
        if step.action is not None and step.observation is not None:
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": _call_id(step),
                    "name": step.action.tool,
                    "content": step.observation.output,
                }
            )
    return msgs


def from_chat_messages(
    messages: list[dict[str, Any]],
    *,
    task: TaskInfo | None = None,
    agent: AgentInfo | None = None,
    outcome: Outcome | None = None,
) -> Trajectory:
    """Build a trajectory from OpenAI-style chat messages (the inverse of :func:`to_chat_messages`).

    The first user message is the instruction unless ``task`` is given. An assistant message
    with several ``tool_calls`` yields one step per call (the thought stays on the first); each
    ``tool`` message is matched to its call by ``tool_call_id``. Assistant text without tool
    calls becomes a message step.

    Raises:
        ValueError: when a message has no ``role`` or ``arguments`` is not JSON.
    """
    steps: list[Step] = []
    by_call: dict[str, Step] = {}
    instruction: str | None = None
    for i, m in enumerate(messages):
        role = m.get("role")
        if role is None:
            raise ValueError(f"message {i} has no 'role'")
        content = _text(m.get("content"))
        if role == "system":
            continue
        if role == "user":
            if instruction is None:
                instruction = content
            continue
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls:
                steps.append(Step(index=len(steps), message=content))
                continue
            for j, call in enumerate(calls):
                fn = call.get("function") or {}
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = orjson.loads(args) if args.strip() else {}
                    except orjson.JSONDecodeError as e:
                        raise ValueError(
                            f"message {i}: tool call arguments are not JSON: {e}"
                        ) from e
                step = Step(
                    index=len(steps),
                    thought=content if j == 0 else "",
                    action=ToolCall(
                        tool=fn.get("name", ""), params=args or {}, call_id=call.get("id")
                    ),
                )
                steps.append(step)
                if call.get("id"):
                    by_call[call["id"]] = step
            continue
        if role == "tool":
            step = by_call.get(m.get("tool_call_id", "")) or _last_open(steps)
            if step is not None:
                step.observation = Observation(output=content)
    if task is None:
        task = TaskInfo(
            task_id=hashlib.sha256((instruction or "").encode()).hexdigest()[:16],
            instruction=instruction or "",
        )
    return Trajectory(
        task=task, agent=agent or AgentInfo(), steps=steps, outcome=outcome or Outcome()
    )


def _last_open(steps: list[Step]) -> Step | None:
    for s in reversed(steps):
        if s.action is not None and s.observation is None:
            return s
    return None


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)
