"""The coding-domain tools: typed functions over a :class:`~knowlyr.sandbox.base.Sandbox`.

Every tool takes the sandbox as keyword-only context (``Toolbox.call(name, params,
sandbox=sb)``), so the JSON schema the model sees holds only its real parameters. Paths are
relative to the workspace (or absolute inside it); a path leaving the workspace, directly,
with ``..`` or through a symlink, is refused. Failures come back as a
:class:`~knowlyr.core.tools.ToolResult` with a non-zero ``exit_code`` and an ``error``.

Example:
    >>> from knowlyr.sandbox import create_sandbox
    >>> box = coding_toolbox()
    >>> with create_sandbox(files={"a.py": "x = 1\\n"}) as sb:  # doctest: +SKIP
    ...     box.call("edit_file", {"path": "a.py", "old_str": "1", "new_str": "2"}, sandbox=sb).ok
    ...     box.call("bash", {"command": "python3 -c 'import a; print(a.x)'"}, sandbox=sb).output
    True
    '2\\n'
"""

from __future__ import annotations

import errno
import shlex
from typing import TYPE_CHECKING

from knowlyr.core.tools import Toolbox, ToolResult, tool
from knowlyr.errors import WorkspacePathError
from knowlyr.sandbox._util import truncate_text, workspace_relpath

if TYPE_CHECKING:
    from knowlyr.sandbox.base import Sandbox

__all__ = [
    "bash",
    "coding_toolbox",
    "edit_file",
    "git",
    "grep",
    "read_file",
    "submit",
    "write_file",
]


def _limit(sandbox: Sandbox) -> int:
    return sandbox.config.max_output_chars


def _read_text(sandbox: Sandbox, path: str) -> str | ToolResult:
    try:
        data = sandbox.read_file(path)
    except WorkspacePathError as e:
        return ToolResult.failure(str(e), exit_code=2)
    except FileNotFoundError:
        return ToolResult.failure(f"{path}: no such file in the workspace", exit_code=2)
    except IsADirectoryError:
        return ToolResult.failure(
            f"{path} is a directory; use bash with `ls {shlex.quote(path)}`", exit_code=2
        )
    if b"\x00" in data[:8192]:
        return ToolResult.failure(f"{path} is a binary file ({len(data)} bytes)", exit_code=2)
    return data.decode("utf-8", "replace")


def _numbered(lines: list[str], first: int) -> str:
    return "".join(f"{i:6}\t{line}" for i, line in enumerate(lines, first))


@tool
def read_file(
    path: str, start_line: int | None = None, end_line: int | None = None, *, sandbox: Sandbox
) -> ToolResult:
    """Read a text file of the workspace, with line numbers.

    Args:
        path: file path, relative to the workspace.
        start_line: first line to show (1-based, default 1).
        end_line: last line to show (inclusive, default the end of the file).
    """
    text = _read_text(sandbox, path)
    if isinstance(text, ToolResult):
        return text
    lines = text.splitlines(keepends=True)
    total = len(lines)
    start = 1 if start_line is None else start_line
    end = total if end_line is None else min(end_line, total)
    if start < 1:
        return ToolResult.failure(f"start_line must be >= 1, got {start_line}", exit_code=2)
    if end_line is not None and end_line < start:
        return ToolResult.failure(
            f"end_line ({end_line}) is before start_line ({start})", exit_code=2
        )
    if total and start > total:
        return ToolResult.failure(
            f"start_line {start} is past the end of {path} ({total} lines)", exit_code=2
        )
    body = _numbered(lines[start - 1 : end], start)
    if body and not body.endswith("\n"):
        body += "\n"
    out, truncated = truncate_text(body, _limit(sandbox))
    return ToolResult(
        output=out,
        data={
            "path": path,
            "lines": total,
            "start_line": start,
            "end_line": end,
            "truncated": truncated,
        },
    )


@tool
def write_file(path: str, content: str, *, sandbox: Sandbox) -> ToolResult:
    """Create or overwrite a file in the workspace (parent directories are created).

    Args:
        path: file path, relative to the workspace.
        content: the complete new content of the file.
    """
    try:
        sandbox.write_file(path, content)
    except WorkspacePathError as e:
        return ToolResult.failure(str(e), exit_code=2)
    except IsADirectoryError:
        return ToolResult.failure(f"{path} is a directory", exit_code=2)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return ToolResult.failure(f"{path} was left empty: {e.strerror}", exit_code=1)
    n = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return ToolResult(
        output=f"Wrote {len(content.encode())} bytes ({n} lines) to {path}", data={"path": path}
    )


@tool
def edit_file(path: str, old_str: str, new_str: str, *, sandbox: Sandbox) -> ToolResult:
    """Replace the one exact occurrence of ``old_str`` in a file with ``new_str``.

    Args:
        path: file path, relative to the workspace.
        old_str: the exact text to replace (whitespace included); it must occur exactly once.
        new_str: the replacement text.
    """
    if not old_str:
        return ToolResult.failure(
            "old_str must not be empty; use write_file to create a file", exit_code=2
        )
    text = _read_text(sandbox, path)
    if isinstance(text, ToolResult):
        return text
    count = text.count(old_str)
    if count == 0:
        hint = ""
        if old_str.strip() and text.count(old_str.strip()) > 0:
            hint = " (it does occur with different leading/trailing whitespace)"
        return ToolResult.failure(
            f"old_str not found in {path}: 0 occurrences{hint}", exit_code=1, occurrences=0
        )
    if count > 1:
        lines, pos = [], -1
        while len(lines) < 10:
            pos = text.find(old_str, pos + 1)
            if pos < 0:
                break
            lines.append(text.count("\n", 0, pos) + 1)
        return ToolResult.failure(
            f"old_str occurs {count} times in {path} (lines {', '.join(map(str, lines))}); "
            "include more surrounding text so it matches exactly once",
            exit_code=1,
            occurrences=count,
        )
    pos = text.index(old_str)
    new_text = text[:pos] + new_str + text[pos + len(old_str) :]
    try:
        sandbox.write_file(path, new_text)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return ToolResult.failure(f"{path} was left empty: {e.strerror}", exit_code=1)
    first = text.count("\n", 0, pos) + 1
    new_lines = new_text.splitlines(keepends=True)
    last = first + new_str.count("\n")
    lo, hi = max(first - 3, 1), min(last + 3, len(new_lines))
    snippet, _ = truncate_text(_numbered(new_lines[lo - 1 : hi], lo), _limit(sandbox))
    return ToolResult(
        output=f"Edited {path} (line {first}). The changed region now reads:\n{snippet}",
        data={"path": path, "line": first},
    )


@tool
def bash(command: str, timeout: float | None = None, *, sandbox: Sandbox) -> ToolResult:
    """Run a bash command in the workspace; the output is stdout and stderr.

    Args:
        command: the command line (run with ``bash -lc``).
        timeout: seconds before the command is killed (at most the sandbox's limit).
    """
    if not command.strip():
        return ToolResult.failure("command is empty", exit_code=2)
    limit = sandbox.config.timeout_s
    if timeout is not None:
        if timeout <= 0:
            return ToolResult.failure(f"timeout must be positive, got {timeout}", exit_code=2)
        limit = min(timeout, limit)
    r = sandbox.exec(command, timeout=limit)
    error = None
    if r.timed_out:  # its own limit, or the sandbox's deadline (a TimeoutWrapper's) came first
        error = (
            f"timed out after {limit:g}s"
            if r.duration_s >= limit * 0.99
            else "cut off: the episode's time limit ran out"
        )
    return ToolResult(
        output=r.output,
        exit_code=r.exit_code,
        error=error,
        data={
            "timed_out": r.timed_out,
            "truncated": r.truncated,
            "duration_s": round(r.duration_s, 4),
        },
    )


@tool
def grep(pattern: str, path: str = ".", *, sandbox: Sandbox) -> ToolResult:
    """Search workspace files for a regular expression (extended syntax); prints file:line:text.

    Args:
        pattern: the regular expression.
        path: file or directory to search, relative to the workspace (default: everything).
    """
    try:
        rel = workspace_relpath(path, sandbox.config.workdir) or "."
    except WorkspacePathError as e:
        return ToolResult.failure(str(e), exit_code=2)
    where = f" -- {shlex.quote(rel)}" if rel != "." else ""  # no operand: names print without ./
    cmd = f"grep -rnIE --exclude-dir=.git --color=never -e {shlex.quote(pattern)}{where}"
    r = sandbox.exec(cmd)
    if r.exit_code == 1 and not r.stderr:
        return ToolResult(output=f"No matches for {pattern!r} in {path}", data={"matches": 0})
    if r.exit_code != 0:
        return ToolResult.failure(
            f"grep failed: {r.output.strip() or r.exit_code}", exit_code=r.exit_code
        )
    return ToolResult(
        output=r.stdout, data={"matches": r.stdout.count("\n"), "truncated": r.truncated}
    )


@tool
def git(args: str, *, sandbox: Sandbox) -> ToolResult:
    """Run a git subcommand in the workspace, for example ``diff`` or ``log --oneline -5``.

    Args:
        args: the arguments after ``git`` (shell-style quoting; no pipes or redirections).
    """
    try:
        argv = shlex.split(args)
    except ValueError as e:
        return ToolResult.failure(f"cannot parse args {args!r}: {e}", exit_code=2)
    if not argv:
        return ToolResult.failure(
            "args is empty; give a git subcommand such as 'status'", exit_code=2
        )
    r = sandbox.exec(shlex.join(["git", "--no-pager", *argv]))
    return ToolResult(
        output=r.output,
        exit_code=r.exit_code,
        error=None if r.exit_code == 0 else f"git exited with {r.exit_code}",
        data={"truncated": r.truncated},
    )


@tool
def submit(*, sandbox: Sandbox | None = None) -> ToolResult:
    """Finish the task: the workspace as it is now is graded."""
    return ToolResult(output="Submitted.", data={"submitted": True})


def coding_toolbox() -> Toolbox:
    """The coding tools: read_file, write_file, edit_file, bash, grep, git, submit.

    Example:
        >>> [s["function"]["name"] for s in coding_toolbox().schemas()]
        ['read_file', 'write_file', 'edit_file', 'bash', 'grep', 'git', 'submit']
    """
    return Toolbox([read_file, write_file, edit_file, bash, grep, git, submit])
