"""DomainProfile: what a domain's tools mean, when an episode ends and how it is judged.

A profile names each tool with a :class:`ToolCategory`, maps external tool names (OpenHands'
``str_replace_editor``, SWE-agent's ``open``, a browser agent's ``goto``) onto ours through
aliases, lists the terminal tools, says how the outcome is decided and weights the reward
rubrics. Tools a profile does not know fall back to a name heuristic (the ``generic`` profile
is nothing but that heuristic).

Example:
    >>> p = get_profile("coding")
    >>> p.canonical("str_replace_editor", {"command": "view"}), p.category("open")
    ('read_file', <ToolCategory.READ: 'read'>)
    >>> p = load_profile("browser_profile.json")  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from knowlyr.errors import ConfigError

__all__ = [
    "BUILTIN_PROFILES",
    "DomainProfile",
    "OutcomeSpec",
    "ToolCategory",
    "ToolSpec",
    "get_profile",
    "list_profiles",
    "load_profile",
]


class ToolCategory(StrEnum):
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    SEARCH = "search"
    NAVIGATE = "navigate"
    QUERY = "query"
    RESPOND = "respond"
    SUBMIT = "submit"
    THINK = "think"
    OTHER = "other"


class ToolSpec(BaseModel):
    """A tool of a domain.

    ``stateful_key`` names the parameter that identifies the object the tool acts on (a
    file path, a URL, an element id); rules use it to tell a re-read from a new read.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    category: ToolCategory = ToolCategory.OTHER
    description: str = ""
    stateful_key: str | None = None
    aliases: list[str] = Field(default_factory=list)


class OutcomeSpec(BaseModel):
    """Where a log keeps its outcome (field names in the raw record)."""

    model_config = ConfigDict(extra="forbid")

    success_field: str = "success"
    score_field: str = ""
    total_field: str = ""
    partial_credit_field: str = ""


OutcomeRule = Literal["tests", "facts", "answer", "submitted", "log"]

_DEFAULT_WEIGHTS = {
    "goal_progress": 0.30,
    "tool_selection": 0.15,
    "param_correctness": 0.15,
    "info_utilization": 0.10,
    "non_redundancy": 0.15,
    "non_regression": 0.05,
    "efficiency": 0.10,
    "command_success": 0.10,
    "no_repeated_failure": 0.05,
    "within_limits": 0.10,
    "valid_format": 0.10,
    "no_setback": 0.05,
}


class DomainProfile(BaseModel):
    """A domain's tools, aliases, terminal tools, outcome rule and rubric weights."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    domain: str
    display_name: str = ""
    description: str = ""
    tools: list[ToolSpec] = Field(default_factory=list)
    aliases: dict[str, str] = Field(
        default_factory=dict,
        description="External name -> our tool name. A key 'tool:command' matches params['command'] too.",
    )
    terminal_tools: list[str] = Field(default_factory=list)
    outcome_rule: OutcomeRule = "log"
    outcome_spec: OutcomeSpec = Field(default_factory=OutcomeSpec)
    task_fields: dict[str, str] = Field(default_factory=dict)
    rubric_weights: dict[str, float] = Field(
        default_factory=lambda: dict(_DEFAULT_WEIGHTS),
        validation_alias=AliasChoices("rubric_weights", "default_rubric_weights"),
    )
    reference_steps: float | None = Field(
        None,
        gt=0,
        description="A typical run's length in this domain: the reference for efficiency and "
        "for the process reward when neither the task (reference_steps) nor the batch (other "
        "runs of the same task) gives one.",
    )
    outcome_weight: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Weight of the outcome (success 1, failure 0) in a trajectory's total "
        "reward, where the outcome is known; the process reward has the rest.",
    )
    _index: dict[str, ToolSpec] = PrivateAttr(default_factory=dict)
    _alias: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> DomainProfile:
        names = [t.name for t in self.tools]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"tools are listed twice: {sorted(dup)}")
        for t in self.terminal_tools:
            if names and t not in names:
                raise ValueError(f"terminal tool {t!r} is not one of the profile's tools {names}")
        if not self.terminal_tools:
            self.terminal_tools = [t.name for t in self.tools if t.category == ToolCategory.SUBMIT]
        for k, w in self.rubric_weights.items():
            if w < 0:
                raise ValueError(f"rubric weight {k!r} must be >= 0, got {w}")
        self._index = {t.name: t for t in self.tools}
        self._alias = {a: t.name for t in self.tools for a in t.aliases} | self.aliases
        return self

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def canonical(self, tool: str, params: dict[str, Any] | None = None) -> str:
        """Our name for ``tool`` (an external name is mapped through the aliases)."""
        if tool in self._index:
            return tool
        cmd = (params or {}).get("command")
        if isinstance(cmd, str) and f"{tool}:{cmd}" in self._alias:
            return self._alias[f"{tool}:{cmd}"]
        return self._alias.get(tool, tool)

    def tool(self, tool: str, params: dict[str, Any] | None = None) -> ToolSpec | None:
        return self._index.get(self.canonical(tool, params))

    def category(self, tool: str, params: dict[str, Any] | None = None) -> ToolCategory:
        """The tool's category; unknown tools fall back to a name heuristic."""
        spec = self.tool(tool, params)
        if spec is not None:
            return spec.category
        return guess_category(self.canonical(tool, params))

    def is_terminal(self, tool: str, params: dict[str, Any] | None = None) -> bool:
        name = self.canonical(tool, params)
        if self.terminal_tools:
            return name in self.terminal_tools
        return self.category(tool, params) == ToolCategory.SUBMIT

    def stateful_key(self, tool: str, params: dict[str, Any] | None = None) -> str | None:
        spec = self.tool(tool, params)
        return spec.stateful_key if spec else None

    def normalized_weights(self) -> dict[str, float]:
        total = sum(self.rubric_weights.values())
        if total <= 0:
            raise ConfigError(
                f"profile {self.domain!r}: rubric weights sum to {total}; give at least one positive weight"
            )
        return {k: v / total for k, v in self.rubric_weights.items()}

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


_HEURISTICS: list[tuple[re.Pattern[str], ToolCategory]] = [
    (re.compile(r"submit|finish|done|final_answer|complete_task"), ToolCategory.SUBMIT),
    (re.compile(r"think|reason|plan|reflect"), ToolCategory.THINK),
    (re.compile(r"grep|search|find|lookup|retrieve"), ToolCategory.SEARCH),
    (re.compile(r"respond|reply|message|answer|say|send"), ToolCategory.RESPOND),
    (re.compile(r"navigate|goto|go_to|browse|open_url|scroll|click"), ToolCategory.NAVIGATE),
    (re.compile(r"query|stats|get_|list_|fetch|knowledge"), ToolCategory.QUERY),
    (re.compile(r"write|edit|create|replace|insert|patch|append|delete|type"), ToolCategory.WRITE),
    (re.compile(r"read|view|cat|open|show|screenshot|observe"), ToolCategory.READ),
    (re.compile(r"bash|shell|exec|run|python|cmd|terminal|git|test"), ToolCategory.EXECUTE),
]


def guess_category(tool: str) -> ToolCategory:
    """Category from a tool's name alone (the generic fallback)."""
    name = tool.lower()
    for pattern, cat in _HEURISTICS:
        if pattern.search(name):
            return cat
    return ToolCategory.OTHER


def _t(name: str, cat: ToolCategory, desc: str, key: str | None = None, *aliases: str) -> ToolSpec:
    return ToolSpec(
        name=name, category=cat, description=desc, stateful_key=key, aliases=list(aliases)
    )


R, W, X, S, N, Q, A, SUB, T = (
    ToolCategory.READ,
    ToolCategory.WRITE,
    ToolCategory.EXECUTE,
    ToolCategory.SEARCH,
    ToolCategory.NAVIGATE,
    ToolCategory.QUERY,
    ToolCategory.RESPOND,
    ToolCategory.SUBMIT,
    ToolCategory.THINK,
)

_CODING = DomainProfile(
    domain="coding",
    display_name="Coding agent",
    description="Repository tasks in a sandbox: read, edit, run tests, submit.",
    tools=[
        _t("read_file", R, "Read a file of the workspace.", "path", "read", "open", "view", "cat"),
        _t("write_file", W, "Create or overwrite a file.", "path", "write", "create"),
        _t(
            "edit_file",
            W,
            "Replace one exact occurrence of a string in a file.",
            "path",
            "edit",
            "str_replace",
            "str_replace_editor",
        ),
        _t(
            "bash",
            X,
            "Run a shell command in the workspace.",
            None,
            "run",
            "execute_bash",
            "run_ipython",
            "python",
            "shell",
        ),
        _t(
            "grep",
            S,
            "Search files for a pattern.",
            "pattern",
            "search_dir",
            "search_file",
            "find_file",
            "find",
        ),
        _t("git", X, "Run a git subcommand in the workspace."),
        _t("think", T, "Think out loud; no effect on the workspace.", None, "think"),
        _t(
            "submit",
            SUB,
            "Finish the task; hidden tests decide the outcome.",
            None,
            "finish",
            "done",
        ),
    ],
    aliases={
        "str_replace_editor:view": "read_file",
        "str_replace_editor:create": "write_file",
        "str_replace_editor:str_replace": "edit_file",
        "str_replace_editor:insert": "edit_file",
        "str_replace_editor:undo_edit": "edit_file",
        "goto": "read_file",
        "scroll_up": "read_file",
        "scroll_down": "read_file",
    },
    terminal_tools=["submit"],
    outcome_rule="tests",
    # what happened in the run (failed and repeated commands, untested edits, the last test
    # run, limits, format errors, setbacks) weighs about as much as how it was done
    rubric_weights={
        "goal_progress": 0.30,
        "tool_selection": 0.15,
        "param_correctness": 0.15,
        "info_utilization": 0.05,
        "non_redundancy": 0.10,
        "non_regression": 0.10,
        "efficiency": 0.05,
        "command_success": 0.15,
        "no_repeated_failure": 0.10,
        "edit_tested": 0.10,
        "last_test_passed": 0.10,
        "reproduced_first": 0.05,
        "within_limits": 0.10,
        "valid_format": 0.10,
        "no_setback": 0.15,
    },
    reference_steps=30,
)

_BROWSER = DomainProfile(
    domain="browser",
    display_name="Browser agent",
    description="Web navigation tasks.",
    tools=[
        _t("navigate", N, "Open a URL.", "url", "goto", "open_url", "go_to_url"),
        _t("click", X, "Click an element.", "element_id", "click_element"),
        _t(
            "type_text",
            W,
            "Type text into an element.",
            "element_id",
            "fill",
            "input_text",
            "send_keys",
        ),
        _t("scroll", N, "Scroll the page.", None, "scroll_down", "scroll_up"),
        _t("screenshot", R, "Look at the page.", None, "observe", "get_screenshot"),
        _t(
            "read_page",
            R,
            "Read the page as text with element ids.",
            None,
            "get_text",
            "accessibility_tree",
        ),
        _t("submit", SUB, "Finish the task.", None, "done", "finish"),
    ],
    terminal_tools=["submit"],
    outcome_rule="log",
    rubric_weights={
        "goal_progress": 0.35,
        "tool_selection": 0.20,
        "param_correctness": 0.20,
        "info_utilization": 0.10,
        "non_redundancy": 0.15,
        "command_success": 0.10,
        "within_limits": 0.10,
        "valid_format": 0.10,
    },
)

_CONVERSATION = DomainProfile(
    domain="conversation",
    display_name="Customer-service agent",
    description="Answer a customer using account and order tools.",
    tools=[
        _t(
            "query_stats",
            Q,
            "Look up records (orders, accounts) in the service database.",
            "order_id",
            "query_order",
            "lookup",
        ),
        _t("web_search", S, "Search the help center.", "query", "search"),
        _t(
            "send_message",
            X,
            "Send a message or perform an action for the customer (e.g. a refund).",
            "to",
        ),
        _t(
            "respond",
            A,
            "Reply to the customer; ends the episode.",
            None,
            "reply",
            "answer",
            "message",
        ),
    ],
    terminal_tools=["respond"],
    outcome_rule="facts",
    rubric_weights={
        "goal_progress": 0.30,
        "tool_selection": 0.15,
        "param_correctness": 0.15,
        "info_utilization": 0.15,
        "non_redundancy": 0.15,
        "efficiency": 0.10,
        "command_success": 0.10,
        "within_limits": 0.10,
        "valid_format": 0.10,
    },
)

_ENGINEERING = DomainProfile(
    domain="engineering",
    display_name="Engineering assistant",
    description="Answer questions about a repository and its design documents.",
    tools=[
        _t("read_file", R, "Read a file of the repository.", "path", "open", "view", "cat"),
        _t("grep", S, "Search the repository.", "pattern", "search_dir", "find"),
        _t("git", X, "Run a read-only git subcommand.", "args"),
        _t("knowledge_base", Q, "Search the team's knowledge base.", "query", "kb_search"),
        _t("bash", X, "Run a shell command.", None, "run", "execute_bash"),
        _t(
            "respond",
            A,
            "Give the final answer; ends the episode.",
            None,
            "answer",
            "finish",
            "submit",
        ),
    ],
    terminal_tools=["respond"],
    outcome_rule="answer",
)

_ADVISORY = DomainProfile(
    domain="advisory",
    display_name="Advisor",
    description="Give grounded advice from a knowledge base.",
    tools=[
        _t("knowledge_base", Q, "Search the knowledge base.", "query", "kb_search"),
        _t("web_search", S, "Search reference material.", "query", "search"),
        _t("create_note", W, "Write a note for the client.", "title", "note"),
        _t("respond", A, "Give the advice; ends the episode.", None, "answer", "reply", "finish"),
    ],
    terminal_tools=["respond"],
    outcome_rule="answer",
)

_DISCUSSION = DomainProfile(
    domain="discussion",
    display_name="Discussion partner",
    description="Argue a position grounded in a knowledge base.",
    tools=[
        _t("knowledge_base", Q, "Search the knowledge base.", "query", "kb_search"),
        _t("think", T, "Think out loud.", None, "reason", "reflect"),
        _t("respond", A, "Answer; ends the episode.", None, "answer", "reply", "finish"),
    ],
    terminal_tools=["respond"],
    outcome_rule="answer",
)

_GENERIC = DomainProfile(
    domain="generic",
    display_name="Generic",
    description="No tool list: categories come from the tool names (heuristic fallback).",
    outcome_rule="log",
)

BUILTIN_PROFILES: dict[str, DomainProfile] = {
    p.domain: p
    for p in (_CODING, _BROWSER, _CONVERSATION, _ENGINEERING, _ADVISORY, _DISCUSSION, _GENERIC)
}


def list_profiles() -> list[str]:
    return sorted(BUILTIN_PROFILES)


def get_profile(name_or_path: str | Path | DomainProfile) -> DomainProfile:
    """A built-in profile by domain name, or one loaded from a JSON/YAML file.

    Raises:
        ConfigError: unknown name (listing the built-ins) or an invalid file.
    """
    if isinstance(name_or_path, DomainProfile):
        return name_or_path
    key = str(name_or_path)
    if key in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[key]
    if Path(key).suffix.lower() in (".json", ".yaml", ".yml") or Path(key).exists():
        return load_profile(key)
    close = difflib.get_close_matches(key, list_profiles(), n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"unknown domain profile {key!r}; built-in profiles: {', '.join(list_profiles())}, "
        f"or pass the path of a JSON/YAML profile.{hint}"
    )


def load_profile(path: str | Path) -> DomainProfile:
    """Load a profile from a JSON or YAML file.

    Raises:
        ConfigError: the file is missing, unparsable or not a valid profile; the message names
            the file and the offending field.
    """
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read profile {p}: {e.strerror}") from e
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = orjson.loads(text)
    except Exception as e:
        raise ConfigError(
            f"profile {p} is not valid {p.suffix.lstrip('.').upper() or 'JSON'}: {e}"
        ) from e
    try:
        return DomainProfile.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or '<root>'}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"profile {p} is invalid: {errs}") from e
