"""What the trajectory and pair pages show, built from the store (no HTML here).

- :func:`trajectory_view`: the task, each step's thought, action, observation, reward with
  its facets and the judge's rationale, file edits as diffs, screenshots, the outcome and its
  source, and the lineage (runs, raw log, datasets, preference pairs); an outline of the steps
  (which failed, :func:`step_failure`), the run's totals (:class:`Totals`: tokens, cost,
  latency, duration; what the log does not record is ``None``, shown as "unknown") and the
  domain profile its facets are read against (:class:`ProfileView`).
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
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.errors import ConfigError, NotFoundError
from knowlyr.view.reader import RewardRow, StoreReader, check_id

if TYPE_CHECKING:
    from knowlyr.trajectory import Step, Trajectory

__all__ = [
    "FileDiff",
    "PairView",
    "ProfileView",
    "StepView",
    "Totals",
    "TrajectoryView",
    "diff_lines",
    "pair_view",
    "profile_view",
    "same_step",
    "step_diffs",
    "step_failure",
    "stored_pair_view",
    "totals",
    "trajectory_view",
]

SCREENSHOT_KEYS = ("screenshot", "screenshot_blob")
_FILE_EDITS = (
    "edit_file",
    "write_file",
)  # canonical tools (knowlyr.reward.actions) that edit files
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SUMMARY = 90  # characters of a step's line in the outline
_PY_TOOLS = frozenset({"run_ipython", "ipython", "python", "execute_ipython_cell"})


@dataclass
class FileDiff:
    """One file edit: its path, what kind of edit, and the diff lines as ``(kind, text)``
    with kind ``add``, ``del``, ``hunk``, ``head`` or ``ctx``."""

    path: str | None
    title: str
    lines: list[tuple[str, str]]


@dataclass
class StepView:
    """One step as the pages show it.

    Attributes:
        params: the action's parameters as indented JSON (those left after ``command``).
        command: a shell command (or Python cell, ``command_lang``) the action ran, shown as
            code rather than JSON.
        failed: why the step failed, in a few words (``exit 1``, ``error``, ``invalid
            action``), or ``None``.
        other_facets: facets the trajectory's domain profile does not weight (a reward scored
            under another profile).
    """

    step: Step
    params: str
    reward: float | None = None
    facets: dict[str, float | None] = field(default_factory=dict)
    rationale: str | None = None
    judge_error: str | None = None
    diffs: list[FileDiff] = field(default_factory=list)
    screenshot: str | None = None
    command: str | None = None
    command_lang: str = "bash"
    failed: str | None = None
    other_facets: dict[str, float] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.step.index

    @property
    def summary(self) -> str:
        """One short line for the outline: the command's first line, the target, or the
        message."""
        s = self.step
        if self.command:
            text = self.command.strip()
        elif s.action is not None:
            p = s.action.params
            text = next(
                (str(p[k]) for k in ("path", "url", "query", "element_id", "answer") if p.get(k)),
                "",
            )
        else:
            text = s.message or ""
        line = text.strip().split("\n", 1)[0]
        more = "…" if len(line) > _SUMMARY or "\n" in text.strip() else ""
        return line[:_SUMMARY] + more


@dataclass
class Totals:
    """A trajectory's totals over its steps; ``None`` where no step recorded the number.

    Attributes:
        prompt_tokens, completion_tokens: summed over the steps that recorded them
            (``tokens_steps`` of them).
        cost_usd: summed over the steps that recorded it (``cost_steps``), else the log's own
            total (``cost_from`` says which).
        latency_s: the steps' durations summed (``latency_steps`` recorded one).
        duration_s: wall clock from the first step's timestamp to the last one's end.
        failed: steps that failed (:func:`step_failure`).
    """

    steps: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens_steps: int = 0
    cost_usd: float | None = None
    cost_steps: int = 0
    cost_from: str | None = None
    latency_s: float | None = None
    latency_steps: int = 0
    duration_s: float | None = None
    failed: int = 0


@dataclass
class ProfileView:
    """The domain profile a trajectory's facets are read against: its recorded domain's
    built-in profile, else ``generic``.

    Attributes:
        domain: the domain the log (or environment) recorded for the task.
        name: the profile shown: ``domain`` when it has a built-in profile, else ``generic``.
        weights: the profile's rubric weights (a facet outside them counts for nothing here).
        outside: facets of the shown reward that this profile does not weight (computed by
            the rule layer but worth nothing under it, or a reward scored under another
            profile).
        scored_under: the built-in profile whose rules-only reward config the shown reward
            has (``None``: no reward, or another config, e.g. with a judge or own weights).
    """

    domain: str
    name: str
    display_name: str
    weights: dict[str, float]
    outside: list[str] = field(default_factory=list)
    scored_under: str | None = None

    @property
    def builtin(self) -> bool:
        return self.name == self.domain

    def weighs(self, rubric: str) -> bool:
        return self.weights.get(rubric, 0.0) > 0


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
    totals: Totals | None = None
    profile: ProfileView | None = None
    only_failed: bool = False
    query: dict[str, str] = field(default_factory=dict)

    @property
    def shown_steps(self) -> list[StepView]:
        """The steps the page shows: all, or the failed ones under ``only_failed``."""
        return [s for s in self.steps if s.failed] if self.only_failed else self.steps

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


def step_failure(step: Step) -> str | None:
    """Why ``step`` failed, in a few words, or ``None`` (as far as its log says).

    An action the agent's reply did not parse into is ``invalid action``, an observation with
    an error is ``error``, a command with a non-zero exit code is ``exit N``.
    """
    from knowlyr.trajectory import INVALID_ACTION_TOOL

    if step.action is not None and step.action.tool == INVALID_ACTION_TOOL:
        return "invalid action"
    o = step.observation
    if o is not None:
        if o.error:
            return "error"
        if o.exit_code not in (None, 0):
            return f"exit {o.exit_code}"
    return None


def _command(step: Step) -> tuple[str | None, str, dict[str, Any]]:
    """The command a shell (or Python) action ran, its language, and the other params."""
    from knowlyr.reward.actions import SHELL_TOOLS

    if step.action is None:
        return None, "bash", {}
    tool, params = step.action.tool, dict(step.action.params)
    lang = "python" if tool in _PY_TOOLS else "bash" if tool in SHELL_TOOLS else None
    if lang is None:
        return None, "bash", params
    for key in ("command", "cmd", "code"):
        if isinstance(params.get(key), str):
            return params.pop(key), lang, params
    return None, "bash", params


def totals(traj: Trajectory) -> Totals:
    """What ``traj`` cost and took, summed over its steps (see :class:`Totals`)."""
    t = Totals(steps=len(traj.steps))
    prompt = completion = 0
    cost = latency = 0.0
    for step in traj.steps:
        u = step.usage
        if u is not None and (u.prompt_tokens is not None or u.completion_tokens is not None):
            t.tokens_steps += 1
            prompt += u.prompt_tokens or 0
            completion += u.completion_tokens or 0
            if u.prompt_tokens is not None:
                t.prompt_tokens = prompt
            if u.completion_tokens is not None:
                t.completion_tokens = completion
        if u is not None and u.cost_usd is not None:
            t.cost_steps += 1
            cost += u.cost_usd
            t.cost_usd, t.cost_from = cost, "steps"
        if step.duration_s is not None:
            t.latency_steps += 1
            latency += step.duration_s
            t.latency_s = latency
        if step_failure(step):
            t.failed += 1
    if t.cost_usd is None:
        meta = traj.metadata
        stats = meta.get("model_stats")
        logged = meta.get("cost_usd")
        if logged is None and isinstance(stats, dict):
            logged = stats.get("instance_cost")
        if isinstance(logged, int | float) and not isinstance(logged, bool):
            t.cost_usd, t.cost_from = float(logged), "log"
    stamped = [s for s in traj.steps if s.timestamp is not None]
    if len(stamped) >= 2 or (stamped and stamped[-1].duration_s is not None):
        first, last = stamped[0], stamped[-1]
        span = (last.timestamp - first.timestamp).total_seconds()  # type: ignore[operator]
        t.duration_s = span + (last.duration_s or 0.0)
    return t


def profile_view(traj: Trajectory, reward: RewardRow | None = None) -> ProfileView:
    """The domain profile of ``traj``'s recorded domain (``generic`` when it has no built-in
    one), with the facets of ``reward`` that it does not weight."""
    from knowlyr.core.profile import BUILTIN_PROFILES

    domain = traj.task.domain or "generic"
    name = domain if domain in BUILTIN_PROFILES else "generic"
    p = BUILTIN_PROFILES[name]
    view = ProfileView(
        domain=domain,
        name=name,
        display_name=p.display_name or name,
        weights={k: v for k, v in p.rubric_weights.items() if v > 0},
    )
    if reward is not None:
        seen = set(reward.rubrics)
        for facets in reward.step_rubrics:
            seen.update(k for k, v in (facets or {}).items() if v is not None)
        view.outside = sorted(k for k in seen if not view.weighs(k))
        view.scored_under = _rules_configs().get(reward.config_hash)
    return view


@cache
def _rules_configs() -> dict[str, str]:
    """config hash -> built-in profile, for each profile's rules-only reward engine."""
    from knowlyr.core.profile import BUILTIN_PROFILES
    from knowlyr.reward.store_io import engine_for

    return {engine_for(name, profile=name).config_hash: name for name in BUILTIN_PROFILES}


# -- pages ----------------------------------------------------------------------------------


def trajectory_view(
    reader: StoreReader,
    id: str,
    *,
    version: int | None = None,
    config: str | None = None,
    lineage: bool = True,
    only_failed: bool = False,
) -> TrajectoryView:
    """The trajectory page of ``id`` (a unique prefix of >= 8 characters works).

    Args:
        version: the ``trajectories`` version to read it from (default: latest).
        config: the reward config hash whose per-step rewards the steps show (default: the
            newest reward row).
        lineage: also read sightings, datasets and preference pairs.
        only_failed: show only the steps that failed (the outline still lists every step).

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
    profile = profile_view(traj, reward)
    steps = []
    for i, step in enumerate(traj.steps):
        command, lang, rest = _command(step)
        params = ""
        if step.action is not None and (rest or command is None):
            params = orjson.dumps(rest, option=orjson.OPT_INDENT_2).decode()
        sv = StepView(
            step=step,
            params=params,
            diffs=diffs[i],
            screenshot=_screenshot(step, reader),
            command=command,
            command_lang=lang,
            failed=step_failure(step),
        )
        if reward is not None:
            sv.reward, sv.facets, sv.rationale, sv.judge_error = reward.step(i)
            sv.other_facets = {
                k: v for k, v in sv.facets.items() if v is not None and not profile.weighs(k)
            }
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
        totals=totals(traj),
        profile=profile,
        only_failed=only_failed,
        query={k: str(v) for k, v in (("version", version), ("config", config)) if v is not None},
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
