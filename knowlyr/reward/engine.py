"""RewardEngine: combine rule, judge and calibration layers into per-step and total rewards.

Formula (documented on :class:`RewardEngine`): with normalised rubric weights ``w_r`` (the
DomainProfile's ``rubric_weights`` unless overridden, restricted to the active layers'
rubrics and scaled to sum to 1) and rubric scores ``s_{r,j}`` in [0, 1] for step ``j``::

    r_j   = sum_{r in A_j} w_r * s_{r,j} / sum_{r in A_j} w_r      (A_j: rubrics scored at j)
    P     = max(0, 1 - sum_j (1 - r_j) / L)                         (process reward)
    total = (1 - outcome_weight) * P + outcome_weight * [success]   (when success is known)

``L`` is the task's reference length (``reference_steps``, else the median length of the
batch's trajectories of the same task, as for the efficiency rubric), else the number of
scored steps, in which case ``P`` is simply the mean of ``r_j``. Counting each step's
shortfall ``1 - r_j`` against the reference length means padding a trajectory with
harmless extra steps cannot dilute its flaws: a trajectory that repeats the expert's steps
plus detours scores lower than the expert. Rubrics not applicable at a step (``None``:
e.g. info utilization before anything was revealed, or a judge failure) drop out of that
step's weighted mean rather than counting 0.
An outcome calibration (layer 3, :class:`~knowlyr.reward.outcome_calibration.OutcomeCalibration`)
replaces ``P`` in ``total`` by the predicted probability of success from the trajectory's
facets (step rewards stay as they are). A human calibration map maps ``r_j`` (step-level map)
or ``total`` (trajectory-level)
onto the human scale; ``total_raw`` keeps the uncalibrated value.

Example:
    >>> engine = RewardEngine("coding")                          # rules only, no network
    >>> rewards = engine.score(trajectories)                     # doctest: +SKIP
    >>> rewards[0].total, rewards[0].step_rewards                # doctest: +SKIP
    >>> engine.config_hash                                       # changes with weights
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr._gc import paused
from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.errors import ConfigError
from knowlyr.reward.rubrics import RUBRIC_VERSION, RULE_RUBRICS, resolve_weights
from knowlyr.trajectory import Trajectory

if TYPE_CHECKING:
    import polars as pl

    from knowlyr.reward.calibration import CalibrationMap
    from knowlyr.reward.combine import RubricBlock, TrajectoryInfo
    from knowlyr.reward.judge import LLMJudge
    from knowlyr.reward.outcome_calibration import OutcomeCalibration

__all__ = ["RewardEngine", "TrajectoryReward", "dump_rewards", "load_rewards", "rewards_frame"]

_LAYERS = ("rules", "judge")
_SHARED_ROWS = 1024  # trajectories whose rewards share one copy of their step rubrics' rows


class _RubricRows:
    """One reward's ``step_rubrics`` before anything reads them: rows ``a:b`` of a
    :class:`~knowlyr.reward.combine.RubricBlock` shared with the rewards of up to
    :data:`_SHARED_ROWS` trajectories of its batch (108 bytes a step for 12 rubrics, where a
    dict and its floats take ~750). Reading :attr:`TrajectoryReward.step_rubrics` turns them
    into the list of dicts, which the reward keeps from then on; a pickle or copy holds that
    list."""

    __slots__ = ("a", "b", "block")

    def __init__(self, block: RubricBlock, a: int, b: int):
        self.block, self.a, self.b = block, a, b

    def dicts(self) -> list[dict[str, float | None]]:
        """The rows as new dicts (``None`` where a rubric did not apply)."""
        block, a, b = self.block, self.a, self.b
        names = block.names
        return [
            {n: v if ok else None for n, v, ok in zip(names, row, oks, strict=True)}
            for row, oks in zip(block.scores[a:b].tolist(), block.scored[a:b].tolist(), strict=True)
        ]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (self.dicts(),)


class _StepRubrics:
    """The ``step_rubrics`` field: a list of dicts, or :class:`_RubricRows` until first read."""

    def __get__(self, obj: Any, owner: Any = None) -> list[dict[str, float | None]]:
        if obj is None:  # a required field: no class-level default
            raise AttributeError("step_rubrics")
        value = obj.__dict__["step_rubrics"]
        if type(value) is _RubricRows:
            value = obj.__dict__["step_rubrics"] = value.dicts()
        return value

    def __set__(self, obj: Any, value: list[dict[str, float | None]]) -> None:
        obj.__dict__["step_rubrics"] = value


@dataclass
class TrajectoryReward:
    """The reward of one trajectory under one reward config.

    Attributes:
        total: the final reward (calibrated when a calibration map is set), ``None`` when no
            step could be scored.
        total_raw: ``total`` before calibration.
        step_rewards: ``r_j`` per step (``None`` where no rubric applied).
        rubric_scores: mean score per rubric over the steps where it applied.
        step_rubrics: per step, every rubric's score (``None`` = not applicable / failed).
            The engine's rewards hold these as rows of numpy arrays until the attribute is
            first read, which builds the list of dicts and keeps it (``to_dict``, ``to_row``
            and ``dump_rewards`` read them without keeping the dicts).
        rationales: the judge's rationale per step (``None`` without the judge).
        judge_errors: the judge's error per step (``None`` = fine).
        judge_model: the judge backend (``None`` without the judge layer).
        process: the process reward ``P`` alone (no outcome term, no calibration).
        missing_layers: active layers that failed somewhere in this trajectory (``"judge"``
            when a judge call failed: those steps' totals hold the other layers only).
    """

    trajectory_id: str
    task_id: str
    agent: str
    model: str | None
    total: float | None
    total_raw: float | None
    step_rewards: list[float | None]
    rubric_scores: dict[str, float]
    step_rubrics: list[dict[str, float | None]] = _StepRubrics()  # type: ignore[assignment]
    config_hash: str
    success: bool | None = None
    rationales: list[str | None] = field(default_factory=list)
    judge_errors: list[str | None] = field(default_factory=list)
    judge_model: str | None = None
    missing_layers: list[str] = field(default_factory=list)
    process: float | None = None

    def to_row(self) -> dict[str, Any]:
        """A row of the store's ``rewards`` table (declared columns plus extras)."""
        return {
            "trajectory_id": self.trajectory_id,
            "config_hash": self.config_hash,
            "total": self.total,
            "per_step": [math.nan if r is None else r for r in self.step_rewards],
            "per_rubric": orjson.dumps(self.rubric_scores).decode(),
            "rationale": orjson.dumps(self.rationales).decode(),
            "judge": self.judge_model,
            "judge_errors": orjson.dumps(self.judge_errors).decode(),
            "created_at": datetime.now(UTC),
            "task_id": self.task_id,
            "agent": self.agent,
            "model": self.model,
            "total_raw": self.total_raw,
            "success": self.success,
            "step_rubrics": orjson.dumps(self._step_rubrics_copy()).decode(),
            "missing_layers": orjson.dumps(self.missing_layers).decode(),
            "process": self.process,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TrajectoryReward:
        """The reward a ``rewards`` table row (:meth:`to_row`) holds."""
        loads = orjson.loads
        return cls(
            trajectory_id=row["trajectory_id"],
            task_id=row["task_id"],
            agent=row["agent"],
            model=row["model"],
            total=row["total"],
            total_raw=row["total_raw"],
            step_rewards=[None if math.isnan(r) else r for r in row["per_step"]],
            rubric_scores=loads(row["per_rubric"]),
            step_rubrics=loads(row["step_rubrics"]),
            config_hash=row["config_hash"],
            success=row["success"],
            rationales=loads(row["rationale"]),
            judge_errors=loads(row["judge_errors"]),
            judge_model=row["judge"],
            missing_layers=loads(row["missing_layers"]),
            process=row["process"],
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a new dict whose lists and dicts are copies (``dataclasses.asdict``'s
        result; the step rubrics are read without being kept on the reward)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "step_rubrics":
                out[f.name] = self._step_rubrics_copy()
            else:
                v = getattr(self, f.name)
                out[f.name] = v.copy() if isinstance(v, list | dict) else v
        return out

    def _step_rubrics_copy(self) -> list[dict[str, float | None]]:
        value = self.__dict__["step_rubrics"]
        return value.dicts() if type(value) is _RubricRows else [dict(d) for d in value]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrajectoryReward:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def rewards_frame(rewards: Sequence[TrajectoryReward]) -> pl.DataFrame:
    """The rows of :meth:`TrajectoryReward.to_row` as a polars frame (for ``Store.append``)."""
    import polars as pl

    return pl.DataFrame([r.to_row() for r in rewards], infer_schema_length=None)


def trajectory_info(trajectories: Sequence[Trajectory]) -> TrajectoryInfo:
    """The per-trajectory columns of a batch of Trajectory objects."""
    import numpy as np

    from knowlyr.reward.combine import TrajectoryInfo

    ids, tasks, agents, models, success = [], [], [], [], []
    for t in trajectories:
        ids.append(t.id)
        tasks.append(t.task.task_id)
        agents.append(t.agent.name)
        models.append(t.agent.model)
        o = t.outcome  # an evaluation verdict counts where the log did not know
        success.append(o.success if o.success is not None else o.resolved)
    lengths = np.fromiter((len(t.steps) for t in trajectories), np.int64, len(trajectories))
    return TrajectoryInfo(ids, tasks, agents, models, success, lengths)


def document_info(documents: Sequence[dict[str, Any]]) -> TrajectoryInfo:
    """:func:`trajectory_info` of trajectories given as JSON documents."""
    import numpy as np

    from knowlyr.reward.combine import TrajectoryInfo

    ids, tasks, agents, models, success, lengths = [], [], [], [], [], []
    for d in documents:
        ids.append(d["id"])
        tasks.append(d["task"]["task_id"])
        agent = d.get("agent") or {}
        agents.append(agent.get("name", "unknown"))
        models.append(agent.get("model"))
        o = d.get("outcome") or {}
        won = o.get("success")
        success.append(won if won is not None else o.get("resolved"))
        lengths.append(len(d.get("steps") or ()))
    return TrajectoryInfo(ids, tasks, agents, models, success, np.asarray(lengths, np.int64))


def take_rule_block(df: pl.DataFrame, n_traj: int) -> tuple[RubricBlock, Any]:
    """The rule rubrics' scores of a :func:`~knowlyr.reward.rules.score_rules` frame, and
    each trajectory's reference length (NaN: none). Takes the columns out of ``df`` one by
    one (``drop_in_place``), so that the frame and the block are never both held whole."""
    import numpy as np

    from knowlyr.reward.combine import RubricBlock
    from knowlyr.reward.rules import RULE_COLUMNS

    references = np.full(n_traj, np.nan)
    references[df.get_column("traj").to_numpy()] = (
        df.get_column("reference").fill_null(np.nan).to_numpy()
    )
    shape = (df.height, len(RULE_COLUMNS))
    scores, scored = np.empty(shape, order="F"), np.empty(shape, dtype=bool, order="F")
    for j, name in enumerate(RULE_COLUMNS):
        col = df.drop_in_place(name)
        scores[:, j] = col.fill_null(0.0).to_numpy()
        scored[:, j] = col.is_not_null().to_numpy()
        del col
    return RubricBlock(RULE_COLUMNS, scores, scored), references


def _judge_columns(
    judged: Sequence[Sequence[Any]], lengths: Any, names: list[str]
) -> list[tuple[str, Any, Any]]:
    """``(name, scores, scored)`` per judge rubric from the judge's per-step results."""
    import numpy as np

    n = int(lengths.sum())
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    out = []
    for name in names:
        scores, scored = np.zeros(n), np.zeros(n, dtype=bool)
        for ti, row in enumerate(judged):
            for si, j in enumerate(row):
                v = j.scores.get(name) if j.scores else None
                if v is not None:
                    scores[starts[ti] + si] = v
                    scored[starts[ti] + si] = True
        out.append((name, scores, scored))
    return out


def _nullable(values: Any, ok: Any) -> list[float | None]:
    """``values`` as Python floats, ``None`` where ``ok`` is False."""
    import polars as pl

    return pl.Series(values, dtype=pl.Float64).set(pl.Series(~ok), None).to_list()


class RewardEngine:
    """Scores trajectories with the chosen layers and the profile's rubric weights.

    See the module docstring for the formula.

    Args:
        profile: a DomainProfile or built-in profile name (weights, categories, aliases).
        layers: ``("rules",)`` (default, no network) or ``("rules", "judge")`` / ``("judge",)``.
        weights: rubric -> weight overriding the profile's; normalised over the active rubrics.
        judge: an :class:`~knowlyr.reward.judge.LLMJudge` or a spec (``"anthropic:MODEL"``),
            required with the judge layer.
        calibration: a fitted :class:`~knowlyr.reward.outcome_calibration.OutcomeCalibration`
            (P(success | facets) replaces the process reward in ``total``) or a human
            :class:`~knowlyr.reward.calibration.CalibrationMap`.
        outcome_weight: weight of the outcome (success = 1, failure = 0) in ``total`` where
            it is known (``None``: the profile's ``outcome_weight``).

    Raises:
        ConfigError: unknown layer, judge layer without a judge, bad weights.
    """

    def __init__(
        self,
        profile: DomainProfile | str = "generic",
        layers: Sequence[str] = ("rules",),
        weights: dict[str, float] | None = None,
        judge: LLMJudge | str | None = None,
        calibration: CalibrationMap | OutcomeCalibration | None = None,
        *,
        outcome_weight: float | None = None,
    ):
        self.profile = get_profile(profile)
        self.layers = tuple(layers)
        bad = [x for x in self.layers if x not in _LAYERS]
        if bad or not self.layers:
            raise ConfigError(f"layers must be a non-empty subset of {_LAYERS}, got {layers!r}")
        if outcome_weight is None:
            outcome_weight = self.profile.outcome_weight
        if not 0.0 <= outcome_weight <= 1.0:
            raise ConfigError(f"outcome_weight must be in [0, 1], got {outcome_weight}")
        if "judge" in self.layers:
            if judge is None:
                raise ConfigError(
                    "the 'judge' layer needs judge= (an LLMJudge or 'anthropic:MODEL' / "
                    "'openai:MODEL' / 'hf:PATH'); use layers=('rules',) to score without a judge"
                )
            if isinstance(judge, str):
                from knowlyr.reward.judge import LLMJudge

                judge = LLMJudge(judge, profile=self.profile)
        self.judge = judge if "judge" in self.layers else None
        rubrics: list[str] = []
        if "rules" in self.layers:
            rubrics += list(RULE_RUBRICS)
        if self.judge is not None:
            rubrics += [r.name for r in self.judge.rubrics]
        self.rubrics = rubrics
        self.weights = resolve_weights(self.profile, weights, rubrics)
        self.calibration = calibration
        self.outcome_weight = outcome_weight

    @property
    def config(self) -> dict[str, Any]:
        """Everything in the engine that changes the numbers; :attr:`config_hash` is its
        sha256. What comes with each trajectory is recorded beside the total: its outcome
        (``success``, an evaluation label where the store has one), and a store keeps one
        reward per (trajectory, config hash), the one its current outcome gives
        (:func:`~knowlyr.reward.store_io.save_rewards`)."""
        return {
            "profile": self.profile.domain,
            "profile_sha": hashlib.sha256(self.profile.to_json().encode()).hexdigest()[:16],
            "layers": list(self.layers),
            "weights": {k: round(v, 12) for k, v in sorted(self.weights.items())},
            "judge_model": self.judge.model if self.judge else None,
            "rubric_version": RUBRIC_VERSION
            + (f"/{self.judge.rubric_version}" if self.judge else ""),
            "calibration": self.calibration.version if self.calibration else None,
            "outcome_weight": self.outcome_weight,
        }

    @property
    def config_hash(self) -> str:
        """sha256 (16 hex chars) of :attr:`config`: a new value for any change of weights,
        layers, profile, judge model, rubric version or calibration."""
        return hashlib.sha256(orjson.dumps(self.config, option=orjson.OPT_SORT_KEYS)).hexdigest()[
            :16
        ]

    def score(
        self, trajectories: Sequence[Trajectory], *, population: pl.DataFrame | None = None
    ) -> list[TrajectoryReward]:
        """Score a batch (the judge layer runs its own event loop; see :meth:`ascore`).
        ``population``: see :func:`~knowlyr.reward.rules.score_documents`."""
        if self.judge is None:
            return self._combine(trajectories, None, population)
        judged = self.judge.judge(trajectories)
        return self._combine(trajectories, judged, population)

    async def ascore(
        self, trajectories: Sequence[Trajectory], *, population: pl.DataFrame | None = None
    ) -> list[TrajectoryReward]:
        """:meth:`score` inside a running event loop."""
        judged = await self.judge.ajudge(trajectories) if self.judge is not None else None
        return self._combine(trajectories, judged, population)

    @paused()
    def _combine(
        self,
        trajectories: Sequence[Trajectory],
        judged: Any,
        population: pl.DataFrame | None = None,
    ) -> list[TrajectoryReward]:
        import numpy as np

        from knowlyr.reward.combine import RubricBlock, rubric_scores

        info = trajectory_info(trajectories)
        block, references = self._rule_block(trajectories, population)
        n = len(trajectories)
        rationales: list[list[str | None]] = [[None] * k for k in info.lengths.tolist()]
        errors: list[list[str | None]] = [[None] * k for k in info.lengths.tolist()]
        if judged is not None:
            judge = _judge_columns(judged, info.lengths, [r.name for r in self.judge.rubrics])
            block = block.joined(judge) if block is not None else RubricBlock.of(judge)
            for ti, row in enumerate(judged):
                for si, j in enumerate(row):
                    rationales[ti][si] = j.rationale
                    errors[ti][si] = j.error
        c = self.combine(block.columns() if block is not None else [], info, references)
        step_r = _nullable(c.step_reward, c.has_step_reward)
        total, total_raw, process = (
            _nullable(x, c.has_process) for x in (c.total, c.total_raw, c.process)
        )
        config_hash = self.config_hash
        judge_model = self.judge.model if self.judge else None
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(info.lengths, out=offsets[1:])
        out = []
        rows, base = None, 0
        for ti in range(n):
            a, b = int(offsets[ti]), int(offsets[ti + 1])
            if block is not None and ti % _SHARED_ROWS == 0:
                # rewards share their rows by runs of _SHARED_ROWS trajectories: a reward kept
                # alone keeps those, not the whole batch's arrays
                rows, base = block.rows(a, int(offsets[min(n, ti + _SHARED_ROWS)])), a
            judge_failed = self.judge is not None and any(e is not None for e in errors[ti])
            out.append(
                TrajectoryReward(
                    trajectory_id=info.ids[ti],
                    task_id=info.task_ids[ti],
                    agent=info.agents[ti],
                    model=info.models[ti],
                    total=total[ti],
                    total_raw=total_raw[ti],
                    step_rewards=step_r[a:b],
                    rubric_scores=rubric_scores(c, ti),
                    step_rubrics=(
                        _RubricRows(rows, a - base, b - base)
                        if rows is not None
                        else [{} for _ in range(b - a)]
                    ),
                    config_hash=config_hash,
                    success=info.success[ti],
                    rationales=rationales[ti],
                    judge_errors=errors[ti],
                    judge_model=judge_model,
                    missing_layers=["judge"] if judge_failed else [],
                    process=process[ti],
                )
            )
        cal = self.calibration
        if cal is not None and cal.level == "outcome" and out:
            self._apply_outcome_calibration(trajectories, out)
        return out

    def score_documents(
        self, documents: Sequence[dict[str, Any]], *, population: pl.DataFrame | None = None
    ) -> pl.DataFrame:
        """Rewards of trajectories given as JSON documents (``Trajectory.to_json``, or validated
        by :func:`knowlyr.store._documents.validate_document`), as the rows of the store's
        ``rewards`` table: the values of ``rewards_frame(self.score(models))``, computed
        without a model per trajectory,
        step or reward (the rule layer and a human calibration map; with the judge layer or
        an outcome calibration, which read the models, it scores the models).
        ``population``: see :func:`~knowlyr.reward.rules.score_documents`.

        Example:
            >>> rows = RewardEngine("coding").score_documents(docs)  # doctest: +SKIP
            >>> rows.select("trajectory_id", "total").row(0)  # doctest: +SKIP
        """
        from knowlyr.reward.combine import reward_rows

        cal = self.calibration
        if self.judge is not None or (cal is not None and cal.level == "outcome"):
            from knowlyr.trajectory import Trajectory

            with paused():
                models = [Trajectory.model_validate(d) for d in documents]
            return rewards_frame(self.score(models, population=population))
        with paused():
            info = document_info(documents)
            columns, references = [], None
            if documents:
                from knowlyr.reward.rules import score_documents

                df = score_documents(documents, self.profile, population=population)
                block, references = take_rule_block(df, len(documents))
                del df
                columns = block.columns()
            c = self.combine(columns, info, references)
            return reward_rows(c, info, columns, config_hash=self.config_hash)

    def _rule_block(
        self, trajectories: Sequence[Trajectory], population: pl.DataFrame | None = None
    ) -> tuple[RubricBlock | None, Any]:
        """The rule rubrics' scores and each trajectory's reference length (NaN: none);
        ``(None, None)`` without the rules layer or trajectories."""
        if "rules" not in self.layers or not trajectories:
            return None, None
        from knowlyr.reward.rules import score_rules

        df = score_rules(trajectories, self.profile, population=population)
        return take_rule_block(df, len(trajectories))

    def combine(self, columns: list[tuple[str, Any, Any]], info: TrajectoryInfo, references: Any):
        """:func:`knowlyr.reward.combine.combine` with this engine's weights, rubrics, outcome
        weight and (human) calibration map."""
        from knowlyr.reward.combine import combine

        cal = self.calibration
        return combine(
            columns,
            info.lengths,
            references,
            info.success,
            weights=self.weights,
            rubrics=self.rubrics,
            outcome_weight=self.outcome_weight,
            calibration=cal if cal is not None and cal.level in ("step", "trajectory") else None,
        )

    def _apply_outcome_calibration(
        self, trajectories: Sequence[Trajectory], rewards: list[TrajectoryReward]
    ) -> None:
        """``total`` = P(success | facets), with the outcome term where the outcome is known."""
        scored = [i for i, r in enumerate(rewards) if r.total_raw is not None]
        probs = self.calibration.predict(
            [trajectories[i] for i in scored], [rewards[i] for i in scored]
        )
        w = self.outcome_weight
        for i, p in zip(scored, probs, strict=True):
            r = rewards[i]
            r.total = p if r.success is None or not w else (1 - w) * p + w * float(r.success)

    def save(self, store: Any, rewards: Sequence[TrajectoryReward] | pl.DataFrame) -> Any:
        """Append ``rewards`` (objects, or the rows :meth:`score_documents` made) to the
        store's ``rewards`` table (one Delta transaction).

        Rows are keyed by (trajectory_id, config_hash): re-scoring with the same config and
        outcome adds nothing; changed weights are a new config hash, so new rows; a row stored
        with another outcome (a label attached since) is replaced
        (:func:`~knowlyr.reward.store_io.save_rewards`). Returns the manifest.
        """
        import polars as pl

        from knowlyr.reward.store_io import save_rewards

        frame = rewards if isinstance(rewards, pl.DataFrame) else rewards_frame(rewards)
        return save_rewards(store, frame)


def dump_rewards(rewards: Sequence[TrajectoryReward], **extra: Any) -> bytes:
    """The JSON document ``knowlyr reward score`` writes: ``{"rewards": [...], **extra}``."""
    return orjson.dumps(
        {**extra, "rewards": [r.to_dict() for r in rewards]},
        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
    )


def load_rewards(path: str | Any) -> list[TrajectoryReward]:
    """Read rewards written by :func:`dump_rewards` (or a JSON list / JSONL of reward dicts).

    Raises:
        ConfigError: the file is missing or not a rewards document (names the file and line).
    """
    from pathlib import Path

    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read rewards file {p}: {e.strerror}") from e
    try:
        doc = orjson.loads(raw)
        items = doc["rewards"] if isinstance(doc, dict) else doc
        lines = [None] * len(items)
    except orjson.JSONDecodeError:
        items, lines = [], []
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    items.append(orjson.loads(line))
                except orjson.JSONDecodeError as e:
                    raise ConfigError(f"{p}:{n}: not valid JSON: {e}") from e
                lines.append(n)
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{p}: expected a rewards document with a 'rewards' list ({e})") from e
    out = []
    for i, (item, line) in enumerate(zip(items, lines, strict=True)):
        try:
            out.append(TrajectoryReward.from_dict(item))
        except (TypeError, KeyError) as e:
            where = f"{p}:{line}" if line else f"{p}: rewards[{i}]"
            raise ConfigError(f"{where}: not a trajectory reward ({e})") from e
    return out
