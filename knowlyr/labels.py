"""Outcome labels from evaluations: read results files, decide what a label does to an outcome.

An agent's log seldom knows whether its work was right: a SWE-bench run ends with a patch,
and the SWE-bench harness says later whether that patch *resolved* the issue. This module
reads such verdicts as :class:`Label` records (instance id, resolved, test counts, source)
from the files evaluations write, and :func:`label_outcome` says what a label does to a
trajectory's outcome. The store applies them (``knowlyr ingest LOGS --results FILE`` and
``knowlyr store label FILE``, see :mod:`knowlyr.store.labels`); a label matches every
trajectory whose ``task.task_id`` is its instance id (several runs of one instance all get it).

Files read (:func:`read_labels`; the kind is detected from the content):

=====================  ========================================================================
kind                   content
=====================  ========================================================================
``swebench-report``    the harness's per-instance ``report.json``: ``{instance_id: {"resolved":
                       bool, "tests_status": {"FAIL_TO_PASS": {"success": [...], "failure":
                       [...]}, "PASS_TO_PASS": ..., ...}, ...}}`` (one or many instances), or a
                       directory tree of them (``logs/run_evaluation/<run>/<model>/<id>/``)
``swebench-summary``   the harness's run summary (``<model>.<run_id>.json``): ``resolved_ids``
                       label True; ``unresolved_ids``, ``error_ids`` (the patch did not apply
                       or the evaluation failed) and ``empty_patch_ids`` label False, as the
                       harness scores them; ``incomplete_ids`` (not run) label nothing
``resolved-map``       ``{"resolved": {instance_id: bool}}``
``map``                ``{instance_id: bool}``
``jsonl``              one ``{"instance_id": str, "resolved": bool}`` object a line
=====================  ========================================================================

Test counts come from a report's ``tests_status``: ``tests_passed`` is the number of tests in
every category's ``success`` list, ``tests_failed`` in every ``failure`` list. The other kinds
carry no counts.

Example:
    >>> from knowlyr.labels import Label, label_outcome
    >>> lab = Label("django__django-11099", True, source="map:/runs/labels.json")
    >>> d = label_outcome({"success": None, "terminated": True, "truncated": False}, lab)
    >>> d.status, d.outcome["resolved"], d.outcome["success"], d.outcome["label_source"]
    ('applied', True, True, 'map:/runs/labels.json')
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from knowlyr.errors import LabelError

__all__ = [
    "REPORT_FILE",
    "Label",
    "LabelDecision",
    "iter_results_files",
    "label_outcome",
    "load_labels",
    "looks_like_results",
    "read_labels",
]

#: The file name of the SWE-bench harness's per-instance report.
REPORT_FILE = "report.json"

Kind = Literal["swebench-report", "swebench-summary", "resolved-map", "map", "jsonl"]

# run-summary lists and the verdict each gives (the harness scores errors and empty
# patches as not resolved); incomplete_ids, submitted_ids, completed_ids label nothing
_SUMMARY_LISTS: tuple[tuple[str, bool], ...] = (
    ("resolved_ids", True),
    ("unresolved_ids", False),
    ("error_ids", False),
    ("empty_patch_ids", False),
)

_FIX_KINDS = (
    "a results file is a SWE-bench report.json ({instance_id: {'resolved': bool, ...}}), the "
    "harness's run summary ({'resolved_ids': [...], 'unresolved_ids': [...], ...}), "
    "{'resolved': {instance_id: bool}}, {instance_id: bool}, or JSONL lines "
    "{'instance_id': str, 'resolved': bool}"
)


@dataclass(frozen=True, slots=True)
class Label:
    """One evaluation verdict for one instance (task id).

    Attributes:
        instance_id: the task it labels (matched against ``trajectory.task.task_id``).
        resolved: the evaluation's verdict.
        tests_passed: tests that passed in the evaluation, when the file says.
        tests_failed: tests that failed in the evaluation, when the file says.
        source: ``"<kind>:<absolute path>"`` (``<kind>`` as in the module docstring; a
            run summary's adds the list, e.g. ``swebench-summary/error_ids``; JSONL adds
            ``:<line>``): what ``outcome.label_source`` becomes.
        path: the file it was read from.
        line: its 1-based line in a JSONL file, else ``None``.
    """

    instance_id: str
    resolved: bool
    tests_passed: int | None = None
    tests_failed: int | None = None
    source: str = ""
    path: str | None = None
    line: int | None = None

    @property
    def kind(self) -> str:
        """The file kind, from :attr:`source` (``"swebench-report"``, ``"map"``...)."""
        return self.source.split(":", 1)[0].split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class LabelDecision:
    """What :func:`label_outcome` decided for one outcome.

    Attributes:
        status: ``"applied"`` (the outcome changes), ``"unchanged"`` (it already says so),
            ``"contradicting"`` (it says the opposite and ``override`` was off: nothing
            changes) or ``"overridden"`` (it said the opposite; the label replaced it).
        outcome: the new outcome document (``None`` fields left out) when it changes.
        stored: what the outcome said before (resolved if set, else success).
        stored_source: where that came from (its ``label_source``, else ``"log"``).
    """

    status: Literal["applied", "unchanged", "contradicting", "overridden"]
    outcome: dict[str, Any] | None = None
    stored: bool | None = None
    stored_source: str | None = None


# -- reading ---------------------------------------------------------------------------------


def iter_results_files(path: str | os.PathLike[str]) -> Iterator[Path]:
    """``path`` itself, or every ``report.json`` under a directory (sorted).

    Raises:
        LabelError: when ``path`` does not exist or a directory holds no ``report.json``.
    """
    p = Path(path)
    if p.is_dir():
        found = sorted(f for f in p.rglob(REPORT_FILE) if f.is_file())
        if not found:
            raise LabelError(
                f"no {REPORT_FILE} under this directory: pass the harness's "
                "logs/run_evaluation/<run_id> folder, a run summary or a labels file",
                path=str(p),
            )
        yield from found
    elif p.is_file():
        yield p
    else:
        raise LabelError("no such results file or directory", path=str(p))


def read_labels(path: str | os.PathLike[str]) -> list[Label]:
    """Labels in one results file, or in every ``report.json`` under a directory.

    The file's kind is detected from its content (see the module docstring).

    Raises:
        LabelError: when the file is not one of the kinds, or a value has the wrong type;
            the message names the file, the key and the fix.

    Example:
        >>> read_labels("logs/run_evaluation/run1")        # doctest: +SKIP
        [Label(instance_id='astropy__astropy-12907', resolved=True, tests_passed=17, ...)]
    """
    out: list[Label] = []
    for f in iter_results_files(path):
        out.extend(_read_file(f))
    return out


def load_labels(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
) -> dict[str, Label]:
    """Labels from several results files, one per instance id (files read in order).

    The same verdict for one instance from several files is one label (the first file's,
    with test counts from a later one when the first has none). Two files that disagree
    about an instance are an error: pick one evaluation.

    Raises:
        LabelError: a bad file (see :func:`read_labels`) or two disagreeing verdicts.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    merged: dict[str, Label] = {}
    for p in paths:
        for lab in read_labels(p):
            old = merged.get(lab.instance_id)
            if old is None:
                merged[lab.instance_id] = lab
            elif old.resolved != lab.resolved:
                raise LabelError(
                    f"says resolved={lab.resolved}, but {old.source} says resolved="
                    f"{old.resolved}: pass the results of one evaluation per instance",
                    path=lab.path,
                    key=_where(lab),
                )
            elif old.tests_passed is None and lab.tests_passed is not None:
                merged[lab.instance_id] = Label(
                    old.instance_id,
                    old.resolved,
                    lab.tests_passed,
                    lab.tests_failed,
                    old.source,
                    old.path,
                    old.line,
                )
    return merged


def _where(lab: Label) -> str:
    return f"line {lab.line}" if lab.line is not None else repr(lab.instance_id)


def _read_file(f: Path) -> list[Label]:
    path = os.path.abspath(f)
    try:
        data = f.read_bytes()
    except OSError as e:
        raise LabelError(f"cannot be read: {e}", path=path) from e
    if f.suffix == ".jsonl":
        return _jsonl(data, path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        lines = [ln for ln in data.splitlines() if ln.strip()]
        if len(lines) > 1 and all(ln.lstrip().startswith(b"{") for ln in lines):
            return _jsonl(data, path)
        raise LabelError(f"is not JSON ({e}): {_FIX_KINDS}", path=path) from e
    if not isinstance(doc, dict):
        raise LabelError(
            f"holds a JSON {type(doc).__name__}, not an object: {_FIX_KINDS}", path=path
        )
    if "resolved_ids" in doc:
        return _summary(doc, path)
    if isinstance(doc.get("resolved"), dict):
        return _map(doc["resolved"], path, "resolved-map", prefix="resolved.")
    if "instance_id" in doc and "resolved" in doc:  # a one-line JSONL file
        return _jsonl(data, path)
    if not doc:
        raise LabelError(f"is an empty object: {_FIX_KINDS}", path=path)
    if all(isinstance(v, dict) for v in doc.values()):
        return _reports(doc, path)
    if all(isinstance(v, bool) for v in doc.values()):
        return _map(doc, path, "map")
    key, value = next((k, v) for k, v in doc.items() if not isinstance(v, bool | dict))
    raise LabelError(
        f"is {_type(value)}, which no results file has there: {_FIX_KINDS}",
        path=path,
        key=repr(key),
    )


def _type(v: Any) -> str:
    if v is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: f"a string ({v!r:.40})",
    }.get(type(v), f"a JSON {'array' if isinstance(v, list) else 'object'}")


def _reports(doc: dict[str, Any], path: str) -> list[Label]:
    out = []
    for iid, rep in doc.items():
        resolved = rep.get("resolved")
        if not isinstance(resolved, bool):
            raise LabelError(
                f"is {_type(resolved)}; a SWE-bench report says true or false for each "
                "instance: pass the harness's own report.json",
                path=path,
                key=f"{iid}.resolved",
            )
        passed, failed = _test_counts(rep.get("tests_status"), path, iid)
        out.append(Label(iid, resolved, passed, failed, f"swebench-report:{path}", path))
    return out


def _test_counts(status: Any, path: str, iid: str) -> tuple[int | None, int | None]:
    if status is None:  # the patch did not apply: no tests ran
        return None, None
    if not isinstance(status, dict):
        raise LabelError(
            f"is {_type(status)}, not an object of categories (FAIL_TO_PASS, PASS_TO_PASS, "
            "...): pass the harness's own report.json",
            path=path,
            key=f"{iid}.tests_status",
        )
    passed = failed = 0
    for cat, lists in status.items():
        if not isinstance(lists, dict):
            raise LabelError(
                f"is {_type(lists)}, not {{'success': [...], 'failure': [...]}}",
                path=path,
                key=f"{iid}.tests_status.{cat}",
            )
        for name in ("success", "failure"):
            tests = lists.get(name, [])
            if not isinstance(tests, list):
                raise LabelError(
                    f"is {_type(tests)}, not a list of test names",
                    path=path,
                    key=f"{iid}.tests_status.{cat}.{name}",
                )
            if name == "success":
                passed += len(tests)
            else:
                failed += len(tests)
    return passed, failed


def _summary(doc: dict[str, Any], path: str) -> list[Label]:
    out: list[Label] = []
    seen: dict[str, str] = {}
    for key, verdict in _SUMMARY_LISTS:
        ids = doc.get(key, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise LabelError(
                f"is {_type(ids)}; a run summary lists instance ids (strings) there",
                path=path,
                key=key,
            )
        for iid in ids:
            if iid in seen:
                raise LabelError(
                    f"lists {iid!r}, which {seen[iid]} lists too: one verdict per instance; "
                    "regenerate the summary with the harness",
                    path=path,
                    key=key,
                )
            seen[iid] = key
            out.append(Label(iid, verdict, source=f"swebench-summary/{key}:{path}", path=path))
    return out


def _map(doc: dict[str, Any], path: str, kind: Kind, *, prefix: str = "") -> list[Label]:
    out = []
    for iid, v in doc.items():
        if not isinstance(v, bool):
            raise LabelError(f"is {_type(v)}; write true or false", path=path, key=f"{prefix}{iid}")
        out.append(Label(iid, v, source=f"{kind}:{path}", path=path))
    return out


def _jsonl(data: bytes, path: str) -> list[Label]:
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise LabelError(f"is not JSON ({e})", path=path, key=f"line {n}") from e
        if not isinstance(obj, dict):
            raise LabelError(
                f"is {_type(obj)}; write {{'instance_id': str, 'resolved': bool}}",
                path=path,
                key=f"line {n}",
            )
        iid, resolved = obj.get("instance_id"), obj.get("resolved")
        if not isinstance(iid, str) or not iid:
            raise LabelError(
                f"'instance_id' is {_type(iid)}; write the instance id as a string",
                path=path,
                key=f"line {n}",
            )
        if not isinstance(resolved, bool):
            raise LabelError(
                f"'resolved' is {_type(resolved)}; write true or false",
                path=path,
                key=f"line {n}",
            )
        out.append(Label(iid, resolved, source=f"jsonl:{path}:{n}", path=path, line=n))
    return out


# -- applying --------------------------------------------------------------------------------

_OUTCOME_FIELDS: tuple[str, ...] | None = None


def _outcome_fields() -> tuple[str, ...]:
    global _OUTCOME_FIELDS
    if _OUTCOME_FIELDS is None:
        from knowlyr.trajectory import Outcome

        _OUTCOME_FIELDS = tuple(Outcome.model_fields)
    return _OUTCOME_FIELDS


def label_outcome(
    outcome: Mapping[str, Any], label: Label, *, override: bool = False
) -> LabelDecision:
    """What ``label`` does to an outcome given as its JSON document (``None`` fields may be
    left out, as ``Trajectory.to_json`` writes them).

    The outcome's current verdict is ``resolved`` when set (an earlier label), else
    ``success`` (what the log said). A label that agrees with it, or meets an outcome that
    does not know, sets ``resolved``, ``success`` (only where it was unknown), the test
    counts it has and ``label_source``. A label that disagrees is ``"contradicting"`` and
    changes nothing, unless ``override`` (then success and resolved both follow the label).
    An outcome already labelled the same way keeps its ``label_source``; only new test
    counts change it, so applying the same labels twice is a no-op.
    """
    resolved = outcome.get("resolved")
    success = outcome.get("success")
    stored = resolved if resolved is not None else success
    stored_source = outcome.get("label_source") or "log"
    new = dict(outcome)
    status: Literal["applied", "overridden"] = "applied"
    if stored is not None and stored != label.resolved:
        if not override:
            return LabelDecision("contradicting", None, stored, stored_source)
        status = "overridden"
        new["success"] = label.resolved
    elif success is None:
        new["success"] = label.resolved
    if resolved != label.resolved or status == "overridden":
        new["label_source"] = label.source
    new["resolved"] = label.resolved
    if label.tests_passed is not None:
        new["tests_passed"] = label.tests_passed
        new["tests_failed"] = label.tests_failed
    doc = {k: new[k] for k in _outcome_fields() if new.get(k) is not None}
    doc.update((k, v) for k, v in new.items() if k not in doc and v is not None)
    if doc == {k: v for k, v in outcome.items() if v is not None}:
        return LabelDecision("unchanged", None, stored, stored_source)
    return LabelDecision(status, doc, stored, stored_source)


def looks_like_results(obj: Any) -> bool:
    """Whether a parsed JSON document is evaluation results rather than a log: a run summary
    (``resolved_ids``), per-instance reports (``{id: {"resolved": bool, ...}}``), a
    ``{"resolved": {id: bool}}`` map or a plain ``{id: bool}`` map."""
    if not isinstance(obj, dict) or not obj:
        return False
    if isinstance(obj.get("resolved_ids"), list):
        return True
    inner = obj.get("resolved")
    values = list((inner if isinstance(inner, dict) and inner else obj).values())[:50]
    return all(isinstance(v, bool) for v in values) or all(
        isinstance(v, dict) and isinstance(v.get("resolved"), bool) for v in values
    )
