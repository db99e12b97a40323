"""The rule rubrics computed one step at a time in plain Python: the specification the
vectorised rule layer (:mod:`knowlyr.reward.rules`) must reproduce exactly.

Slow on purpose: every step goes through :func:`action_facets` with the SWE-agent open-file
state carried along, Python sets and ``re.findall``; no memo, no hashing tricks.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from knowlyr.core import get_profile
from knowlyr.core.profile import DomainProfile
from knowlyr.reward.actions import REGION, REPLACE, UNDO, action_facets
from knowlyr.reward.commands import (
    EDIT_PATTERN,
    FAILURE_PATTERN,
    RUN_PATTERN,
    SETBACK_PATTERN,
    TRACEBACK,
)
from knowlyr.reward.rules import TOKEN_PATTERN, reference_steps
from knowlyr.reward.steps import THOUGHT_CAP, stopped_by_limit
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

_TOKEN = re.compile(TOKEN_PATTERN)
_CAP = 20_000  # characters of an observation / instruction scanned for tokens
_FAILURE_PREFIXES = ("ERROR:", "Error:", "[Error", "error:")
_FAILURE_TEXT = (
    "No exact match found",
    "Your proposed edit has introduced new syntax error",
    "No replacement was performed",
    "did not appear verbatim",
    "No such file or directory",
    "is not a valid",
)


def _text_of(params: dict) -> str:
    import orjson

    parts = []
    for v in params.values():
        if isinstance(v, str):
            parts.append(v)
        elif v is not None and not isinstance(v, bool):
            parts.append(orjson.dumps(v).decode() if isinstance(v, dict | list) else str(v))
    return "\n".join(parts).replace("end_of_edit", "")


def _failed(out: str) -> bool:
    return out.startswith(_FAILURE_PREFIXES) or any(t in out[:400] for t in _FAILURE_TEXT)


Row = tuple[float | None, ...]


def _facets_and_ok(prof: DomainProfile, s, text: str, open_file: str | None):
    """A step's facets (with the SWE-agent open file carried along), whether it succeeded (no
    exit code, error or failed write) and the open file after it."""
    a, obs = s.action, s.observation
    f = action_facets(prof, a.tool, a.params, open_file)
    if f.target is not None and (f.category == "read" or f.tool == "write_file"):
        open_file = f.target
    ok = obs is None or (obs.exit_code in (None, 0) and obs.error is None)
    if f.category == "write" and ok and _failed(text):
        ok = False
    return f, ok, open_file


def reference_rules(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> list[Row]:
    """Every rule rubric in :data:`~knowlyr.reward.rules.RULE_COLUMNS` order, then the
    reference length, per step of every trajectory, in order."""
    first = _how_rules(trajectories, profile)
    second = _what_happened(trajectories, profile)
    return [a[:4] + b + a[4:] for a, b in zip(first, second, strict=True)]


def _what_happened(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> list[Row]:
    """``(command_success, no_repeated_failure, edit_tested, last_test_passed,
    reproduced_first, within_limits, valid_format, no_setback)`` per step."""
    import orjson

    prof = get_profile(profile)
    out: list[Row] = []
    for t in trajectories:
        n = len(t.steps)
        open_file = None
        rows = []  # per step: action, cat, run, edit, invalid, failed, sig, text
        for s in t.steps:
            obs = s.observation
            text = (obs.output if obs is not None else "")[:_CAP]
            if s.action is None:
                rows.append((False, "", False, False, False, False, None, text))
                continue
            a = s.action
            f, ok, open_file = _facets_and_ok(prof, s, text, open_file)
            failed = not ok or TRACEBACK in text
            params = _text_of(a.params)
            execute = f.category == "execute"
            run = execute and re.search(RUN_PATTERN, params) is not None
            edit = (f.category == "write" and f.edit_kind != UNDO) or (
                execute and re.search(EDIT_PATTERN, params) is not None
            )
            sig = (f.tool, a.tool, orjson.dumps(a.params, option=orjson.OPT_SORT_KEYS), f.target)
            rows.append(
                (True, f.category, run, edit, a.tool == INVALID_ACTION_TOOL, failed, sig, text)
            )
        setback = [re.search(SETBACK_PATTERN, s.thought[:THOUGHT_CAP]) is not None for s in t.steps]
        n_runs = sum(r[2] for r in rows)
        stopped = stopped_by_limit(t.outcome)
        runs_before = edits_before = 0
        failed_sigs: set[tuple] = set()
        for i, (action, cat, run, edit, invalid, failed, sig, text) in enumerate(rows):
            last = i == n - 1
            runs_after = n_runs - runs_before - run
            success = None
            if action and not invalid and cat != "search" and not (run and edits_before == 0):
                success = float(not failed)
            repeat = float(not failed) if action and sig in failed_sigs else None
            tested = float(runs_after > 0) if edit else None
            passed = None
            if run and runs_after == 0:
                passed = float(not failed and re.search(FAILURE_PATTERN, text) is None)
            first = float(runs_before > 0) if edit and edits_before == 0 else None
            within = float(not stopped) if last else None
            valid = float(not invalid) if action else None
            no_setback = float(not setback[i + 1]) if action and not last else None
            out.append((success, repeat, tested, passed, first, within, valid, no_setback))
            runs_before += run
            edits_before += edit
            if action and failed:
                failed_sigs.add(sig)
    return out


def _how_rules(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> list[Row]:
    """``(non_redundancy, non_regression, info_utilization, efficiency, reference)`` per step
    of every trajectory, in order."""
    import orjson

    prof = get_profile(profile)
    lengths: dict[str, list[int]] = {}
    won: dict[str, list[int]] = {}  # the lengths of the runs that succeeded
    for t in trajectories:
        if t.steps:  # the batch median counts trajectories with at least one step
            lengths.setdefault(t.task.task_id, []).append(len(t.steps))
            if t.outcome.success:
                won.setdefault(t.task.task_id, []).append(len(t.steps))
    medians = {
        k: float(statistics.median(won.get(k) or v)) for k, v in lengths.items() if len(v) >= 2
    }
    out: list[Row] = []
    for t in trajectories:
        ref = reference_steps(t.task)
        if ref is None:
            ref = medians.get(t.task.task_id, prof.reference_steps)
        seen: dict[tuple, int] = {}  # call signature -> state counter after its last use
        executes = writes = 0
        writes_to: dict[str, int] = {}
        applied: set[tuple] = set()
        regions: dict[tuple, list[str | None]] = {}
        revealed = set(_TOKEN.findall(t.task.instruction[:_CAP]))
        open_file = None
        for i, s in enumerate(t.steps):
            eff = None if ref is None else (1.0 if i + 1 <= ref else ref / (i + 1))
            obs = s.observation
            text = obs.output if obs is not None else ""
            if s.action is None:  # a message step: no call, nothing to judge but efficiency
                out.append((1.0, 1.0, None, eff, ref))
                revealed.update(_TOKEN.findall(text[:_CAP]))
                continue
            a = s.action
            f, ok, open_file = _facets_and_ok(prof, s, text, open_file)
            is_w = f.category == "write" and ok
            is_x = f.category == "execute"
            sig = (f.tool, a.tool, orjson.dumps(a.params, option=orjson.OPT_SORT_KEYS), f.target)
            reads_target = f.category in ("read", "query") and f.target is not None
            before = executes + (writes_to.get(f.target, 0) if reads_target else writes)
            red = 0.0 if seen.get(sig) == before else 1.0
            seen[sig] = before + is_w + is_x
            reg = 1.0
            if is_w and f.edit_kind == REPLACE:
                if (f.target, f.new, f.old) in applied:
                    reg = 0.0
                applied.add((f.target, f.old, f.new))
            elif is_w and f.edit_kind == REGION:
                hist = regions.setdefault((f.target, f.old), [])
                if hist and hist[-1] != f.new and f.new in hist:
                    reg = 0.0
                hist.append(f.new)
            elif is_w and f.edit_kind == UNDO:
                reg = 0.0
            tokens = set(_TOKEN.findall(_text_of(a.params)))
            info = (1.0 if tokens & revealed else 0.0) if tokens and revealed else None
            out.append((red, reg, info, eff, ref))
            executes += is_x
            writes += is_w
            if is_w:
                writes_to[f.target] = writes_to.get(f.target, 0) + 1
            revealed.update(_TOKEN.findall(text[:_CAP]))
    return out
