"""What an action *does*, whatever agent wrote it: canonical tool, target, edit payload.

Real logs name the same operation many ways: our ``edit_file(path, old, new)``, OpenHands'
``str_replace_editor`` (``command``, ``path``, ``old_str``, ``new_str``, ``file_text``),
OpenHands' ``edit`` event (``path``, ``content``, ``start``, ``end``), agentskills calls inside
``run_ipython`` code (``open_file('p')``, ``edit_file_by_replace('p', to_replace=..,
new_content=..)``), and SWE-agent command lines (``open p 293``, ``edit 4:4\\n...\\nend_of_edit``,
``edit 'old' 'new' False``), either as the tool name or inside a shell command. The rule layer
needs one view of all of them: :func:`action_facets`.

Categories come from the :class:`~knowlyr.core.profile.DomainProfile` (aliases map external
names; unknown tools fall back to the generic name heuristic).
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any, NamedTuple

from knowlyr.core.profile import DomainProfile, ToolCategory, guess_category

__all__ = ["COMMAND_WORDS", "PARSED_TOOLS", "ActionFacets", "ToolResolver", "action_facets"]

# Edit kinds.
NO_EDIT, REPLACE, REGION, UNDO = 0, 1, 2, 3

_OLD_KEYS = ("old_str", "old", "old_string", "to_replace", "search", "find")
_NEW_KEYS = ("new_str", "new", "new_string", "new_content", "replace")
_CONTENT_KEYS = ("file_text", "content", "text", "replacement")
_PATH_KEYS = ("path", "file", "file_path", "filename", "file_name")
_CMD_KEYS = ("command", "cmd", "args", "input", "code")

_SWE_READ = {"open", "goto", "scroll_up", "scroll_down", "cat", "head", "tail", "less", "more"}
# Shell commands that write a file when their output is redirected into it.
_SHELL_WRITERS = {"cat", "echo", "printf"}
_REDIRECT = re.compile(r"\s(>>?)\s*['\"]?([\w./~-]+)")
_SWE_SEARCH = {"find_file", "search_dir", "search_file", "grep", "find", "rg"}
_SWE_COMMANDS = {
    "edit",
    "open",
    "create",
    "goto",
    "scroll_up",
    "scroll_down",
    "find_file",
    "search_dir",
    "search_file",
}
_SHELL_TOOLS = {"bash", "run", "execute_bash", "shell", "cmd", "terminal", "swe-agent", "swe_agent"}
_IPY_TOOLS = {"run_ipython", "ipython", "python", "execute_ipython_cell"}
_AGENTSKILLS_READ = {"open_file", "goto_line", "scroll_down", "scroll_up"}
_AGENTSKILLS_EDIT = {"edit_file_by_replace", "insert_content_at_line", "append_file", "edit_file"}
_AGENTSKILLS_WRITE = {"create_file"}
_AGENTSKILLS_SEARCH = {"search_dir", "search_file", "find_file"}
#: Tools whose command text is parsed (besides any tool of the execute category).
PARSED_TOOLS = _IPY_TOOLS | _SWE_COMMANDS | _SHELL_TOOLS
SHELL_TOOLS = frozenset(_SHELL_TOOLS)
CMD_KEYS = _CMD_KEYS
#: First words of a shell command line that :func:`action_facets` interprets (any other
#: command line is just an execution).
COMMAND_WORDS = frozenset(
    {"edit", "create", "submit", "exit"} | _SWE_READ | _SWE_SEARCH | _SHELL_WRITERS
)
_ARG_KEYS = _PATH_KEYS + _OLD_KEYS + _CONTENT_KEYS
_facets = tuple.__new__  # builds an ActionFacets from a full 6-tuple without the keyword layer


class ActionFacets(NamedTuple):
    """The rule-relevant view of one action.

    Attributes:
        tool: canonical tool name (after aliases and command parsing).
        category: the tool's :class:`ToolCategory` value.
        target: the object acted on (a file path, URL...), or ``None``.
        edit_kind: 0 none, 1 replace ``old``->``new``, 2 region/whole-file content, 3 undo.
        old: replaced text (kind 1) or the region key (kind 2), else ``None``.
        new: replacement text (kind 1) or new region content (kind 2), else ``None``.
    """

    tool: str
    category: str
    target: str | None
    edit_kind: int = NO_EDIT
    old: str | None = None
    new: str | None = None


def _first(params: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = params.get(k)
        if v is not None:
            return v
    return None


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def _swe_command(text: str, open_file: str | None) -> ActionFacets | None:
    """Interpret a SWE-agent (or plain shell) command line; ``None`` if it is just a command."""
    text = text.strip()
    if not text:
        return None
    first_line, _, rest = text.partition("\n")
    word = first_line.split(maxsplit=1)[0]
    if word == "edit":
        arg = first_line[4:].strip()
        m = re.fullmatch(r"(\d+)\s*:\s*(\d+)", arg)
        if m:  # edit START:END\n<text>\nend_of_edit, on the open file
            body = rest.rsplit("end_of_edit", 1)[0] if "end_of_edit" in rest else rest
            return ActionFacets("edit_file", "write", open_file, REGION, f"{m[1]}:{m[2]}", body)
        parts = _split(text[4:])
        if len(parts) >= 2:  # edit 'search' 'replace' [replace-all]
            return ActionFacets("edit_file", "write", open_file, REPLACE, parts[0], parts[1])
        return ActionFacets("edit_file", "write", open_file)
    if word == "create":
        parts = _split(first_line)
        return ActionFacets(
            "write_file", "write", parts[1] if len(parts) > 1 else None, REGION, "*", ""
        )
    if word in _SHELL_WRITERS:
        m = _REDIRECT.search(first_line)
        if m and not m[2].startswith("/dev/"):
            # cat <<'EOF' > path, cat > path, echo ... > path: the file's whole new content;
            # >> appends (no region to compare)
            if m[1] == ">>":
                return ActionFacets("write_file", "write", m[2])
            body = rest.rsplit("\n", 1)[0] if rest.rstrip().endswith(("EOF", "END")) else rest
            return ActionFacets("write_file", "write", m[2], REGION, "*", body)
        if word not in _SWE_READ:
            return None
    if word in _SWE_READ:
        parts = _split(first_line)
        target = (
            parts[1]
            if len(parts) > 1 and word not in ("goto", "scroll_up", "scroll_down")
            else open_file
        )
        if word in ("head", "tail") and len(parts) > 1:
            target = parts[-1]
        return ActionFacets("read_file", "read", target)
    if word in _SWE_SEARCH:
        parts = _split(first_line)
        return ActionFacets("grep", "search", parts[1] if len(parts) > 1 else None)
    if word in ("submit", "exit"):
        return ActionFacets("submit", "submit", None)
    return None


def _ipython(code: str) -> ActionFacets | None:
    """An agentskills call (``open_file('p')`` ...) as the whole cell, else ``None``."""
    head = code.lstrip()[:40]
    if not any(
        head.startswith(n)
        for n in (
            "open_file",
            "edit_file",
            "create_file",
            "goto",
            "scroll",
            "search_",
            "find_file",
            "insert_",
            "append_",
        )
    ):
        return None
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (ValueError, SyntaxError):
        return None
    path = args[0] if args and isinstance(args[0], str) else kw.get("file_name") or kw.get("path")
    if name in _AGENTSKILLS_READ:
        return ActionFacets("read_file", "read", path if name == "open_file" else None)
    if name == "edit_file_by_replace":
        old = args[1] if len(args) > 1 else kw.get("to_replace")
        new = args[2] if len(args) > 2 else kw.get("new_content")
        return ActionFacets("edit_file", "write", path, REPLACE, old, new)
    if name in _AGENTSKILLS_EDIT:
        return ActionFacets(
            "edit_file",
            "write",
            path,
            REGION,
            f"{name}:{kw.get('line_number', '')}",
            str(args[1:]) + str(kw),
        )
    if name in _AGENTSKILLS_WRITE:
        return ActionFacets("write_file", "write", path, REGION, "*", "")
    if name in _AGENTSKILLS_SEARCH:
        return ActionFacets("grep", "search", args[0] if args else None)
    return None


class ToolResolver:
    """Memoised ``profile`` lookups: (tool, command) -> (canonical name, category, stateful key).

    Profile lookups go through pydantic private attributes (microseconds each); the rule
    layer resolves millions of steps, so it resolves each distinct tool once.
    """

    __slots__ = ("_cache", "_command_aliased", "profile")

    def __init__(self, profile: DomainProfile):
        self.profile = profile
        self._cache: dict[tuple[str, Any], tuple[str, ToolCategory, str | None, str]] = {}
        aliases = [*profile.aliases, *(a for t in profile.tools for a in t.aliases)]
        self._command_aliased = {a.split(":", 1)[0] for a in aliases if ":" in a}

    def command_aliased(self, tool: str) -> bool:
        """Does the profile alias ``tool`` differently for some ``command`` (``tool:command``)?"""
        return tool in self._command_aliased

    def __call__(self, tool: str, params: dict[str, Any]) -> tuple[str, ToolCategory, str | None]:
        name, category, key, _ = self.resolve(tool, params)
        return name, category, key

    def resolve(
        self, tool: str, params: dict[str, Any]
    ) -> tuple[str, ToolCategory, str | None, str]:
        """Like calling the resolver, plus the category's value as a plain string."""
        cmd = params.get("command")
        k = (tool, cmd if isinstance(cmd, str) and len(cmd) < 40 else None)
        hit = self._cache.get(k)
        if hit is None:
            p = self.profile
            name = p.canonical(tool, params)
            spec = p.tool(tool, params)
            category = spec.category if spec is not None else guess_category(name)
            key = spec.stateful_key if spec is not None else None
            hit = (name, category, key, category.value)
            self._cache[k] = hit
        return hit


def action_facets(
    profile: DomainProfile | ToolResolver,
    tool: str,
    params: dict[str, Any],
    open_file: str | None = None,
) -> ActionFacets:
    """The rule-relevant view of ``tool(params)``.

    Args:
        profile: maps external names through its aliases and gives categories.
        tool: the tool name as logged.
        params: the parameters as logged.
        open_file: the file a SWE-agent-style session has open (``edit`` applies to it).

    Example:
        >>> from knowlyr.core import get_profile
        >>> action_facets(get_profile("coding"), "str_replace_editor",
        ...               {"command": "view", "path": "/a.py"}).tool
        'read_file'
    """
    resolver = profile if isinstance(profile, ToolResolver) else ToolResolver(profile)
    name, category, key, cat = resolver.resolve(tool, params)
    if tool in PARSED_TOOLS or category == ToolCategory.EXECUTE:  # command text to parse?
        cmd = _first(params, _CMD_KEYS)
        if isinstance(cmd, str):
            f = None
            if tool in _IPY_TOOLS and "code" in params:
                f = _ipython(cmd)
            elif tool in _SWE_COMMANDS:
                f = _swe_command(f"{tool} {cmd}", open_file)
            elif tool in _SHELL_TOOLS or category == ToolCategory.EXECUTE:
                f = _swe_command(cmd, open_file)
            if f is not None:
                return f
        elif tool in _SWE_COMMANDS and not _first(params, _ARG_KEYS):
            f = _swe_command(tool, open_file)  # an argument-less SWE-agent command
            if f is not None:
                return f
    target = params.get(key) if key else None
    if target is None:
        target = _first(params, _PATH_KEYS)
    if target is None and open_file is not None and tool in _SWE_COMMANDS:
        target = open_file  # SWE-agent edit/goto/scroll act on the open file
    target = str(target) if target is not None else None
    if category != ToolCategory.WRITE:
        return _facets(ActionFacets, (name, cat, target, NO_EDIT, None, None))
    if params.get("command") == "undo_edit":
        return ActionFacets(name, cat, target, UNDO)
    old, new = _first(params, _OLD_KEYS), _first(params, _NEW_KEYS)
    if old is not None and new is not None:
        return ActionFacets(name, cat, target, REPLACE, str(old), str(new))
    content = _first(params, _CONTENT_KEYS)
    if content is not None:
        start = params.get("start", params.get("start_line", ""))
        region = f"{start}:{params.get('end', params.get('end_line', ''))}"
        if params.get("command") == "insert" or "insert_line" in params:
            region = f"insert:{params.get('insert_line', '')}"
        return ActionFacets(name, cat, target, REGION, region, str(content))
    if new is not None and params.get("command") == "insert":
        return ActionFacets(
            name,
            cat,
            target,
            REGION,
            f"insert:{params.get('insert_line', '')}",
            str(new),
        )
    return ActionFacets(name, cat, target)
