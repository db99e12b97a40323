"""What the trajectory and pair pages show, built from the store (no HTML here).

- :func:`trajectory_view`: the task, each step's thought, action, observation, reward with
  its facets and the judge's rationale, file edits as diffs, screenshots, the outcome and its
  source, and the lineage (runs, raw log, datasets, preference pairs).
- :func:`pair_view`: two trajectories of one task as a preference pair: chosen / rejected,
  the margin and the reason (a stored ``preferences`` row when there is one, else the reward
  stage's own rule, :func:`knowlyr.reward.preferences.build_preferences`).

File edits are read with the reward layer's :func:`~knowlyr.reward.actions.action_facets`, so
every agent's edit tool (``edit_file``, ``str_replace_editor``, SWE-agent ``edit``, a shell
``cat > file``...) is a diff. A browser step's screenshot is the blob whose sha256 the step's
``metadata["screenshot"]`` names (e.g. the PNG a browser env saved with ``store.put_blob``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.view.reader import RewardRow, StoreReader, check_id

if TYPE_CHECKING:
    from knowlyr.trajectory import Step, Trajectory

__all__ = [
    "FileDiff",
    "PairView",
    "StepView",
    "TrajectoryView",
    "diff_lines",
    "pair_view",
    "same_step",
    "step_diffs",
    "stored_pair_view",
    "trajectory_view",
]

SCREENSHOT_KEYS = ("screenshot", "screenshot_blob")
_FILE_EDITS = (
    "edit_file",
    "write_file",
)  # canonical tools (knowlyr.reward.actions) that edit files
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class FileDiff:
    """One file edit: its path, what kind of edit, and the diff lines as ``(kind, text)``
    with kind ``add``, ``del``, ``hunk``, ``head`` or ``ctx``."""

    path: str | None
    title: str
    lines: list[tuple[str, str]]


@dataclass
class StepView:
    """One step as the pages show it."""

    step: Step
    params: str
    reward: float | None = None
    facets: dict[str, float | None] = field(default_factory=dict)
    rationale: str | None = None
    judge_error: str | None = None
    diffs: list[FileDiff] = field(default_factory=list)
    screenshot: str | None = None

    @property
    def index(self) -> int:
        return self.step.index


@dataclass
class TrajectoryView:
    """A trajectory page: the trajectory, its steps, rewards and lineage."""

    traj: Trajectory
    steps: list[StepView]
    rewards: list[RewardRow]
    reward: RewardRow | None
    sightings: list[dict[str, Any]]
    datasets: list[dict[str, Any]]
    preferences: list[dict[str, Any]]
    raw_blob: str | None
    version: int | None
    submission: list[tuple[str, str]] | None = None

    @property
    def blobs(self) -> list[str]:
        """Blobs the page shows (raw log, screenshots): a static export copies them."""
        out = [s.screenshot for s in self.steps if s.screenshot]
        return [self.raw_blob, *out] if self.raw_blob else out


@dataclass
class PairView:
    """Two trajectories of one task as a preference pair, steps side by side."""

    task_id: str
    chosen: TrajectoryView
    rejected: TrajectoryView
    margin: float | None
    reason: str
    pair_id: str | None
    config_hash: str | None
    rows: list[tuple[StepView | None, StepView | None]]
    first_difference: int | None


# -- diffs ----------------------------------------------------------------------------------


def diff_lines(before: str, after: str, path: str | None) -> list[tuple[str, str]]:
    """A unified diff of ``before`` -> ``after`` as classified lines."""
    name = (path or "file").lstrip("/")
    out = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{name}", f"b/{name}", n=3, lineterm=""
    ):
        out.append((_kind(line), line))
    return out


def _kind(line: str) -> str:
    if line.startswith(("+++", "---", "diff --git", "index ")):
        return "head"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def patch_lines(text: str) -> list[tuple[str, str]] | None:
    """A submitted patch (unified diff text) as classified lines; None if it is not one."""
    if not re.search(r"^(diff --git |--- a/|\+\+\+ b/|@@ )", text, re.M):
        return None
    return [(_kind(line), line) for line in text.splitlines()]


def step_diffs(traj: Trajectory) -> list[list[FileDiff]]:
    """The file edits of each step of ``traj`` as diffs (an empty list for other steps).

    A whole-file write is diffed against the file's last content this trajectory wrote (else
    against nothing); a replacement diffs the old text against the new one (and updates the
    known content when it holds the old text); a region edit (SWE-agent ``edit 5:7``, an
    insert) shows the new lines.
    """
    from knowlyr.core.profile import BUILTIN_PROFILES
    from knowlyr.reward.actions import NO_EDIT, REGION, REPLACE, UNDO, ToolResolver, action_facets

    profile = BUILTIN_PROFILES.get(traj.task.domain) or BUILTIN_PROFILES["generic"]
    resolver = ToolResolver(profile)
    files: dict[str, str] = {}
    open_file: str | None = None
    out: list[list[FileDiff]] = []
    for step in traj.steps:
        if step.action is None:
            out.append([])
            continue
        f = action_facets(resolver, step.action.tool, step.action.params, open_file)
        if f.target and (f.category == "read" or f.tool == "write_file"):
            open_file = f.target
        if f.tool not in _FILE_EDITS or f.edit_kind == NO_EDIT:  # typing into a page is no file
            out.append([])
            continue
        path = f.target
        if f.edit_kind == UNDO:
            out.append([FileDiff(path, "undo the last edit", [])])
        elif f.edit_kind == REPLACE:
            old, new = f.old or "", f.new or ""
            known = files.get(path or "")
            if known is not None and old in known:
                files[path or ""] = known.replace(old, new, 1)
            out.append([FileDiff(path, "replace", diff_lines(old, new, path))])
        elif f.edit_kind == REGION and f.old in ("*", ":"):
            before = files.get(path or "", "")
            files[path or ""] = f.new or ""
            title = "write (whole file)" if before else "create"
            out.append([FileDiff(path, title, diff_lines(before, f.new or "", path))])
        else:
            lines = [("add", f"+{x}") for x in (f.new or "").splitlines()]
            out.append([FileDiff(path, _region_title(f.old), lines)])
    return out


def _region_title(region: str | None) -> str:
    if region and region.startswith("insert:"):
        return f"insert at line {region[7:]}"
    if region and re.fullmatch(r"\d+:\d+", region):
        return f"replace lines {region}"
    return "edit"


def _screenshot(step: Step, reader: StoreReader) -> str | None:
    for key in SCREENSHOT_KEYS:
        v = step.metadata.get(key)
        if isinstance(v, str) and _HEX64.match(v) and reader.has_blob(v):
            return v
    return None


# -- pages ----------------------------------------------------------------------------------


def trajectory_view(
    reader: StoreReader,
    id: str,
    *,
    version: int | None = None,
    config: str | None = None,
    lineage: bool = True,
) -> TrajectoryView:
    """The trajectory page of ``id`` (a unique prefix of >= 8 characters works).

    Args:
        version: the ``trajectories`` version to read it from (default: latest).
        config: the reward config hash whose per-step rewards the steps show (default: the
            newest reward row).
        lineage: also read sightings, datasets and preference pairs.

    Raises:
        ConfigError: a malformed or ambiguous id, or a config the trajectory has no reward for.
        NotFoundError: no such trajectory.
    """
    traj = reader.trajectory(id, version=version)
    rewards = reader.rewards(traj.id)
    reward = rewards[0] if rewards else None
    if config:
        picked = [r for r in rewards if r.config_hash.startswith(config)]
        if not picked:
            have = ", ".join(r.config_hash for r in rewards) or "none"
            raise ConfigError(
                f"config={config!r}: trajectory {traj.id[:12]} has no reward under that config "
                f"(it has: {have})"
            )
        reward = picked[0]
    diffs = step_diffs(traj)
    steps = []
    for i, step in enumerate(traj.steps):
        params = (
            orjson.dumps(step.action.params, option=orjson.OPT_INDENT_2).decode()
            if step.action is not None
            else ""
        )
        sv = StepView(
            step=step, params=params, diffs=diffs[i], screenshot=_screenshot(step, reader)
        )
        if reward is not None:
            sv.reward, sv.facets, sv.rationale, sv.judge_error = reward.step(i)
        elif step.reward is not None:
            sv.reward = step.reward
        steps.append(sv)
    out = traj.outcome
    return TrajectoryView(
        traj=traj,
        steps=steps,
        rewards=rewards,
        reward=reward,
        sightings=reader.sightings(traj.id) if lineage else [],
        datasets=reader.datasets(traj.id) if lineage else [],
        preferences=reader.preferences(traj.id) if lineage else [],
        raw_blob=traj.source.blob if reader.has_blob(traj.source.blob) else None,
        version=version if version is not None else reader.version("trajectories"),
        submission=patch_lines(out.submission) if out.submission else None,
    )


def _side_by_side(
    a: list[StepView], b: list[StepView]
) -> tuple[list[tuple[StepView | None, StepView | None]], int | None]:
    rows = [
        (a[i] if i < len(a) else None, b[i] if i < len(b) else None)
        for i in range(max(len(a), len(b)))
    ]
    first = None
    for i, (x, y) in enumerate(rows):
        if x is None or y is None or not same_step(x.step, y.step):
            first = i
            break
    return rows, first


def same_step(x: Step, y: Step) -> bool:
    """Whether two steps did the same (thought, action, message and output)."""
    ax = (x.action.tool, x.action.params) if x.action else None
    ay = (y.action.tool, y.action.params) if y.action else None
    ox = x.observation.output if x.observation else None
    oy = y.observation.output if y.observation else None
    return (x.thought, ax, x.message, ox) == (y.thought, ay, y.message, oy)


def stored_pair_view(reader: StoreReader, pair_id: str) -> PairView:
    """The page of the stored preference pair ``pair_id`` (``preferences`` table).

    Raises:
        ConfigError: a malformed id. NotFoundError: no such pair.
    """
    check_id(pair_id, "pair id")
    rows = reader.preferences(pair_id=pair_id)
    if not rows:
        raise NotFoundError(f"no preference pair {pair_id} in the store {reader.url}")
    p = rows[0]
    return _build_pair(reader, p["chosen_id"], p["rejected_id"], p)


def pair_view(reader: StoreReader, a: str, b: str) -> PairView:
    """Trajectories ``a`` and ``b`` of one task as a preference pair.

    A stored pair of the two (either way round) gives chosen / rejected, margin and reason.
    Otherwise the reward stage's rule decides on their newest rewards: the higher total is
    chosen (:func:`~knowlyr.reward.preferences.build_preferences` with no minimum margin,
    whose reason names the outcomes and the rubrics that differ most); without rewards the
    successful one is chosen.

    Raises:
        ConfigError: a malformed id, the same trajectory twice, or two different tasks.
        NotFoundError: either trajectory does not exist.
    """
    ta, tb = reader.trajectory(a), reader.trajectory(b)
    if ta.id == tb.id:
        raise ConfigError(f"compare needs two different trajectories, got {a} twice")
    if ta.task.task_id != tb.task.task_id:
        raise ConfigError(
            f"{ta.id[:12]} is task {ta.task.task_id!r} and {tb.id[:12]} is task "
            f"{tb.task.task_id!r}: a pair compares two trajectories of one task"
        )
    for p in reader.preferences(ta.id):
        if {p["chosen_id"], p["rejected_id"]} == {ta.id, tb.id}:
            return _build_pair(reader, p["chosen_id"], p["rejected_id"], p)
    return _build_pair(reader, ta.id, tb.id, None)


def _build_pair(reader: StoreReader, a: str, b: str, stored: dict[str, Any] | None) -> PairView:
    va, vb = trajectory_view(reader, a, lineage=False), trajectory_view(reader, b, lineage=False)
    if stored is not None:
        chosen, rejected = va, vb
        margin, reason = stored.get("margin"), stored.get("reason") or "stored pair"
        pair_id, config = stored.get("pair_id"), stored.get("config_hash")
    else:
        chosen, rejected, margin, reason, config = _decide(va, vb)
        pair_id = None
    rows, first = _side_by_side(chosen.steps, rejected.steps)
    return PairView(
        task_id=chosen.traj.task.task_id,
        chosen=chosen,
        rejected=rejected,
        margin=margin,
        reason=reason,
        pair_id=pair_id,
        config_hash=config,
        rows=rows,
        first_difference=first,
    )


def _decide(
    a: TrajectoryView, b: TrajectoryView
) -> tuple[TrajectoryView, TrajectoryView, float | None, str, str | None]:
    """chosen, rejected, margin, reason and config of a pair that is not stored."""
    from knowlyr.reward.engine import TrajectoryReward
    from knowlyr.reward.preferences import build_preferences

    def outcome(v: TrajectoryView) -> int:
        return {True: 1, None: 0, False: -1}[v.traj.outcome.success]

    ra, rb = a.reward, b.reward
    if ra is None or rb is None or ra.total is None or rb.total is None:
        c, r = (a, b) if outcome(a) >= outcome(b) else (b, a)
        missing = " and ".join(
            v.traj.id[:12] for v in (a, b) if v.reward is None or v.reward.total is None
        )
        return c, r, None, f"no reward stored for {missing}: ordered by outcome", None

    def scored(v: TrajectoryView, rw: RewardRow) -> TrajectoryReward:
        t = v.traj
        return TrajectoryReward(
            trajectory_id=t.id,
            task_id=t.task.task_id,
            agent=t.agent.name,
            model=t.agent.model,
            total=rw.total,
            total_raw=rw.total_raw,
            step_rewards=rw.per_step,
            rubric_scores=rw.rubrics,
            step_rubrics=rw.step_rubrics,
            config_hash=rw.config_hash,
            success=t.outcome.success,
        )

    pairs = build_preferences([scored(a, ra), scored(b, rb)], min_margin=0.0)
    if not pairs:
        c, r = (a, b) if outcome(a) >= outcome(b) else (b, a)
        return c, r, 0.0, f"equal totals ({ra.total:.3f}): ordered by outcome", ra.config_hash
    p = pairs[0]
    c, r = (a, b) if p.chosen_id == a.traj.id else (b, a)
    note = "" if ra.config_hash == rb.config_hash else " (rewards under different configs)"
    return c, r, p.margin, p.reason + note, p.config_hash
