"""Score the store's trajectories and pair them, reading and writing the store's tables.

- :func:`engine_for`: the :class:`~knowlyr.reward.engine.RewardEngine` of a domain;
- :func:`score_unscored`: score the trajectories of one version that have no reward under
  the engine's config yet, or whose outcome changed since (a label arrived), sharded by
  trajectory id, and save the rewards (:func:`save_rewards`);
- :func:`stored_outcomes`: the outcomes (labels included) the store holds for trajectories,
  which scoring files into a store uses in place of the logs' own;
- :func:`preferences_from_store`: preference pairs from the stored rewards of one version;
- :func:`calibrate_from_store`: fit P(success | facets) on the labelled trajectories of a
  version and store it (:func:`save_calibration`: a blob, a ``calibrations`` row and a
  ``runs`` row for lineage); :func:`load_calibration` gets one back by id or from a file.

Usable without any orchestrator: the Prefect reward tasks are thin wrappers around these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowlyr._gc import paused

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl

    from knowlyr.reward.calibration import CalibrationMap
    from knowlyr.reward.engine import RewardEngine, TrajectoryReward
    from knowlyr.reward.judge import LLMJudge
    from knowlyr.reward.outcome_calibration import OutcomeCalibration, OutcomeCalibrationResult
    from knowlyr.store import Manifest, Store

__all__ = [
    "CalibrationFit",
    "ScoreResult",
    "calibrate_from_store",
    "engine_for",
    "load_calibration",
    "preferences_from_store",
    "save_calibration",
    "save_rewards",
    "score_unscored",
    "stored_outcomes",
]


@dataclass
class ScoreResult:
    """What :func:`score_unscored` wrote.

    Attributes:
        rows: the newly scored trajectories' rows of the ``rewards`` table, one frame per
            domain.
        manifest: the ``rewards`` version written last (None: nothing new to score).
        config_hashes: the reward configs of every domain in the version, sorted.
        replaced: of the scored trajectories, those whose stored reward under the config
            was computed with another outcome (a label attached since), now replaced.
    """

    rows: list[pl.DataFrame] = field(default_factory=list)
    manifest: Manifest | None = None
    config_hashes: list[str] = field(default_factory=list)
    replaced: int = 0

    @property
    def rewards(self) -> list[TrajectoryReward]:
        """The newly scored trajectories' rewards, as objects (built from :attr:`rows`)."""
        from knowlyr.reward.engine import TrajectoryReward

        return [
            TrajectoryReward.from_row(r) for frame in self.rows for r in frame.iter_rows(named=True)
        ]

    @property
    def trajectory_ids(self) -> list[str]:
        """The newly scored trajectories' ids."""
        return [i for frame in self.rows for i in frame["trajectory_id"].to_list()]

    @property
    def totals(self) -> list[float]:
        """The new rewards' totals (those that have one)."""
        return [t for frame in self.rows for t in frame["total"].drop_nulls().to_list()]


def engine_for(
    domain: str,
    *,
    profile: str | None = None,
    layers: Sequence[str] = ("rules",),
    judge: str | LLMJudge | None = None,
    weights: dict[str, float] | None = None,
    outcome_weight: float | None = None,
    calibration: OutcomeCalibration | CalibrationMap | None = None,
) -> RewardEngine:
    """The reward engine of ``domain``: ``profile`` if given, else the domain's own profile.

    A domain with no profile of its own falls back to ``generic``.

    Example:
        >>> engine_for("conversation").config_hash  # doctest: +SKIP
        '3f1c...'
    """
    from knowlyr.core.profile import get_profile
    from knowlyr.reward.engine import RewardEngine

    try:
        prof = get_profile(profile or domain or "generic")
    except (KeyError, ValueError):  # a domain with no profile of its own
        prof = get_profile("generic")
    return RewardEngine(
        prof,
        list(layers),
        weights=weights,
        judge=judge,
        outcome_weight=outcome_weight,
        calibration=calibration,
    )


def score_unscored(
    store: Store,
    *,
    trajectories_version: int | None = None,
    profile: str | None = None,
    layers: Sequence[str] = ("rules",),
    judge: str | LLMJudge | None = None,
    weights: dict[str, float] | None = None,
    outcome_weight: float | None = None,
    calibration: OutcomeCalibration | CalibrationMap | None = None,
    shard: int = 0,
    n_shards: int = 1,
) -> ScoreResult:
    """Score the trajectories at a version that have no reward under their engine's config,
    or whose reward was computed under another outcome.

    Each domain gets :func:`engine_for`. A trajectory already scored under that engine's
    config hash is skipped, so a re-run scores only what is new, unless its outcome changed
    since (a label attached after scoring: the reward's recorded ``success`` differs from the
    trajectory's): it is scored again and its row replaced (:func:`save_rewards`), so a config
    hash holds one total per trajectory, the one its current outcome gives. Efficiency's
    batch medians are taken over every trajectory to score of the domain, whatever the
    shard, so ``n_shards`` never changes a total. With ``n_shards > 1`` only the trajectories
    whose id hashes to ``shard`` are scored (fan-out of judge calls).

    This is what the ``reward`` flow and ``knowlyr reward score --store S`` (no paths) run.

    Args:
        store: the store to read trajectories from and write rewards to.
        trajectories_version: the ``trajectories`` table version (None: the latest).
        profile: DomainProfile name for every trajectory (None: each one's domain).
        layers: ``"rules"`` and/or ``"judge"``.
        judge: judge spec such as ``"anthropic:MODEL"``, or an
            :class:`~knowlyr.reward.judge.LLMJudge` (judge layer).
        weights: rubric weights overriding the profiles' (see
            :class:`~knowlyr.reward.engine.RewardEngine`).
        outcome_weight: weight of success in the total (None: each profile's).
        calibration: applied to every domain's totals (see :func:`load_calibration`); its
            version is part of the reward config, so a new calibration scores anew.
        shard: this shard's index, ``0 <= shard < n_shards``.
        n_shards: number of shards.

    Raises:
        ValueError: ``shard`` is not in ``[0, n_shards)``.

    Example:
        >>> res = score_unscored(Store.open("./store"), layers=["rules"])  # doctest: +SKIP
        >>> len(res.rewards), res.config_hashes  # doctest: +SKIP
    """
    import polars as pl

    if n_shards < 1 or not 0 <= shard < n_shards:
        raise ValueError(f"shard must be in [0, n_shards={n_shards}), got {shard}")
    frame = store.read(
        "trajectories",
        version=trajectories_version,
        columns=["id", "domain", "task_id", "n_steps", "success"],
    )
    engines = {
        d: engine_for(
            d,
            profile=profile,
            layers=layers,
            judge=judge,
            weights=weights,
            outcome_weight=outcome_weight,
            calibration=calibration,
        )
        for d in frame["domain"].unique().to_list()
    }
    done = _scored_outcomes(store, sorted({e.config_hash for e in engines.values()}))
    out = ScoreResult(config_hashes=sorted({e.config_hash for e in engines.values()}))
    for domain, engine in engines.items():
        mine = frame.filter(pl.col("domain") == domain)
        config = engine.config_hash
        todo = mine.filter(
            pl.Series(
                [
                    not _is_current(done, (i, config), won)
                    for i, won in zip(mine["id"].to_list(), mine["success"].to_list(), strict=True)
                ],
                dtype=pl.Boolean,
            )
        )
        population = todo.select(task="task_id", n_steps="n_steps", success="success")
        if n_shards > 1:
            todo = todo.filter(pl.col("id").hash() % n_shards == shard)
        if todo.height:
            out.replaced += sum((i, config) in done for i in todo["id"].to_list())
            out.manifest, rows = _score_and_save(
                store, engine, trajectories_version, todo, population
            )
            out.rows.append(rows)
    return out


_NOT_SCORED = object()


def _is_current(done: dict[tuple[str, str], Any], key: tuple[str, str], success: Any) -> bool:
    """Whether a trajectory whose outcome says ``success`` has a reward under ``key``'s config
    computed with that outcome (a stored reward with another outcome is stale; a trajectory
    whose ``success`` column is null has no label that could have changed it)."""
    stored = done.get(key, _NOT_SCORED)
    return stored is not _NOT_SCORED and (success is None or stored == success)


def _scored_outcomes(store: Store, hashes: Sequence[str]) -> dict[tuple[str, str], Any]:
    """``{(trajectory_id, config_hash): success}`` of the stored rewards under ``hashes``
    (``success``: the outcome the total was computed with; None on rows written before it
    was recorded)."""
    import polars as pl

    if store.version("rewards") is None or not hashes:
        return {}
    lf = store.scan("rewards").filter(pl.col("config_hash").is_in(list(hashes)))
    won = pl.col("success") if "success" in lf.collect_schema().names() else pl.lit(None)
    rows = lf.select("trajectory_id", "config_hash", won.cast(pl.Boolean).alias("success"))
    return {(t, c): w for t, c, w in rows.collect().iter_rows()}


def save_rewards(store: Store, rows: pl.DataFrame) -> Manifest:
    """Append rows of the ``rewards`` table (one transaction), keyed by (trajectory_id,
    config_hash): a row already stored with the same outcome (``success``) adds nothing; one
    stored with another outcome (a label attached since it was scored) is replaced, so one
    config hash never holds two totals for a trajectory. The earlier row stays readable at
    the earlier version (time travel).

    Example:
        >>> save_rewards(store, RewardEngine("coding").score_documents(docs))  # doctest: +SKIP
    """
    import polars as pl

    if not rows.height or store.version("rewards") is None:
        return store.append("rewards", rows)
    stored = _scored_outcomes(store, rows["config_hash"].unique().to_list())
    keys = zip(rows["trajectory_id"].to_list(), rows["config_hash"].to_list(), strict=True)
    stale = [
        (k in stored and stored[k] != won) for k, won in zip(keys, rows["success"], strict=True)
    ]
    if not any(stale):
        return store.append("rewards", rows)
    # the stale rows and the new ones, in one MERGE: matched rows are updated, others inserted
    keys = zip(rows["trajectory_id"].to_list(), rows["config_hash"].to_list(), strict=True)
    fresh = [(k not in stored) or s for k, s in zip(keys, stale, strict=True)]
    return store.append("rewards", rows.filter(pl.Series(fresh)), on_duplicate="update")


#: Trajectories scored at once (at least) when the rule layer scores stored documents (1,024
#: 20-step ones: ~40 MB of documents; larger batches cost memory and gain no speed here).
SCORE_BATCH = 1024


def _score_and_save(
    store: Store,
    engine: RewardEngine,
    version: int | None,
    todo: pl.DataFrame,
    population: pl.DataFrame,
) -> tuple[Manifest, pl.DataFrame]:
    """Score the trajectories ``todo`` names (``id``, ``task_id``, ``n_steps``, ``success``)
    at ``version`` and save the rewards in one transaction (:func:`save_rewards`).

    The rule layer reads the stored JSON documents a slice of the table at a time
    (:meth:`~knowlyr.store.Store.iter_data`) and scores :data:`SCORE_BATCH` or more at once,
    no model built (memory: one batch of documents, and the new rows: ~7 KB per 20-step
    trajectory),
    efficiency's batch medians taken over ``population`` (``task``, ``n_steps``,
    ``success``), so the numbers are those of one batch. The judge layer and an outcome
    calibration read models:
    those run on one batch of models, with the cyclic GC on for a judge (it waits on the
    network for long stretches, with many short-lived async objects) and paused otherwise
    (see knowlyr._gc)."""
    import orjson
    import polars as pl

    from knowlyr.reward.engine import rewards_frame

    ids = todo["id"].to_list()
    cal = engine.calibration
    if engine.judge is not None or (cal is not None and cal.level == "outcome"):
        with nullcontext() if engine.judge is not None else paused():
            rows = rewards_frame(
                engine.score(
                    store.read_trajectories(version=version, ids=ids), population=population
                )
            )
        return save_rewards(store, rows), rows
    parts, docs = [], []
    for datas in store.iter_data(version=version, filter=pl.col("id").is_in(ids)):
        with paused():
            docs += map(orjson.loads, datas)
            del datas
            if len(docs) >= SCORE_BATCH:
                parts.append(engine.score_documents(docs, population=population))
                docs = []
    if docs or not parts:
        with paused():
            parts.append(engine.score_documents(docs, population=population))
    del docs
    rows = pl.concat(parts, rechunk=False)
    return save_rewards(store, rows), rows


def stored_outcomes(
    store: Store, ids: Iterable[str], *, version: int | None = None
) -> dict[str, dict[str, Any]]:
    """The outcome documents (``Trajectory.outcome`` as JSON, evaluation labels included) of
    the trajectories among ``ids`` that the store holds at ``version`` (latest by default).

    Scoring logs into a store takes these in place of the logs' own outcomes, so a
    trajectory's total under a config is the same whether its log or the store's copy was
    scored.

    Example:
        >>> stored_outcomes(store, [t.id for t in trajs])  # doctest: +SKIP
        {'3fa1...': {'success': False, 'resolved': False, 'label_source': 'labels.json'}}
    """
    import orjson
    import polars as pl

    wanted = list(set(ids))
    if not wanted or store.version("trajectories") is None:
        return {}
    rows = (
        store.scan("trajectories", version=version)
        .filter(pl.col("id").is_in(wanted))
        .select("id", outcome=pl.col("data").str.json_path_match("$.outcome"))
        .collect()
    )
    return {i: orjson.loads(o) if o else {} for i, o in rows.iter_rows()}


def preferences_from_store(
    store: Store,
    *,
    trajectories_version: int | None = None,
    reward_config_hashes: Sequence[str],
    min_margin: float = 0.05,
) -> Manifest | None:
    """Pair trajectories of the same task whose stored rewards differ by ``min_margin`` or more.

    Uses the reward rows under ``reward_config_hashes`` of the trajectories in the version,
    and appends the pairs to the ``preferences`` table.

    Returns:
        The ``preferences`` manifest, or None when no pair clears the margin.

    Example:
        >>> preferences_from_store(store, reward_config_hashes=res.config_hashes)  # doctest: +SKIP
    """
    import polars as pl

    from knowlyr.reward.engine import TrajectoryReward
    from knowlyr.reward.preferences import build_preferences, preferences_frame

    hashes = sorted(set(reward_config_hashes))
    ids = store.read("trajectories", version=trajectories_version, columns=["id"])
    rows = store.read("rewards", filter=pl.col("config_hash").is_in(hashes)).join(
        ids, left_on="trajectory_id", right_on="id", how="semi"
    )
    scored = [
        TrajectoryReward(
            trajectory_id=r["trajectory_id"],
            task_id=r["task_id"],
            agent=r["agent"] or "",
            model=r["model"],
            total=r["total"],
            total_raw=r["total_raw"],
            step_rewards=[],
            rubric_scores={},
            step_rubrics=[],
            config_hash=r["config_hash"],
            success=r["success"],
        )
        for r in rows.iter_rows(named=True)
    ]
    pairs = build_preferences(scored, min_margin=min_margin)
    return store.append("preferences", preferences_frame(pairs)) if pairs else None


# -- calibrations ----------------------------------------------------------------------------


@dataclass
class CalibrationFit:
    """What :func:`calibrate_from_store` fitted and wrote.

    Attributes:
        result: the fit and its cross-validated assessment.
        manifest: the ``calibrations`` version holding it.
        calibration_id: its id (the model's version), for ``--calibration``.
        unlabelled: trajectories of the version without a label (left out of the fit).
    """

    result: OutcomeCalibrationResult
    manifest: Manifest
    calibration_id: str
    unlabelled: int


def save_calibration(
    store: Store,
    result: OutcomeCalibrationResult,
    *,
    profile: str,
    inputs: dict[str, int | str] | None = None,
    params: dict[str, object] | None = None,
) -> Manifest:
    """Store a fitted outcome calibration: its JSON as a blob, a ``calibrations`` row (id =
    the model's version, with its cross-validated AUC and Brier score) and a ``runs`` row
    (stage ``calibrate``: the inputs it was fitted on, the new version), in that order, so
    that lineage leads from a reward config to the labelled data behind it."""
    from datetime import UTC, datetime

    model = result.model
    blob = store.put_blob(model.to_json())
    row = {
        "calibration_id": model.version,
        "kind": "outcome",
        "blob": blob,
        "profile": profile,
        "n": len(result.labels),
        "positives": sum(result.labels),
        "cv_auc": result.cv_auc,
        "cv_brier": result.cv_brier,
        "created_at": datetime.now(UTC),
    }
    manifest = store.append("calibrations", [row])
    store.record_run(
        "calibrate",
        inputs=inputs or {},
        outputs={"calibrations": manifest, "calibration": blob},
        params={"profile": profile, **(params or {}), **result.to_dict()},
    )
    return manifest


def calibrate_from_store(
    store: Store,
    *,
    trajectories_version: int | None = None,
    profile: str = "coding",
    method: str = "sigmoid",
    folds: int = 5,
    seed: int = 0,
) -> CalibrationFit:
    """Fit P(success | facets) on the labelled trajectories of a version (``resolved`` where
    an evaluation labelled them, else the outcome the log gave) and store the calibration.

    Raises:
        CalibrationDataError: too few labelled runs of either class.
    """
    from knowlyr.reward.outcome_calibration import fit_outcome_calibration

    latest = store.version("trajectories") if trajectories_version is None else None
    version = trajectories_version if trajectories_version is not None else latest
    with paused():
        trajs = store.read_trajectories(version=version)
        labelled = [t for t in trajs if _label(t) is not None]
        rewards = engine_for(profile, profile=profile, outcome_weight=0.0).score(labelled)
    result = fit_outcome_calibration(
        labelled, rewards, [bool(_label(t)) for t in labelled], method=method, folds=folds,
        seed=seed,
    )  # fmt: skip
    manifest = save_calibration(
        store,
        result,
        profile=profile,
        inputs={"trajectories": version},
        params={"method": method, "seed": seed},
    )
    return CalibrationFit(result, manifest, result.model.version, len(trajs) - len(labelled))


def _label(t: object) -> bool | None:
    o = t.outcome  # type: ignore[attr-defined]
    return o.resolved if o.resolved is not None else o.success


def load_calibration(
    spec: str | Path, *, store: Store | None = None
) -> OutcomeCalibration | CalibrationMap:
    """A calibration by file path (an outcome calibration or a human calibration map JSON)
    or by the id of one stored in ``store``'s ``calibrations`` table.

    Raises:
        ConfigError: neither a readable calibration file nor a stored id (says which ids exist).
    """
    from pathlib import Path

    import orjson
    import polars as pl

    from knowlyr.errors import ConfigError
    from knowlyr.reward.calibration import CalibrationMap
    from knowlyr.reward.outcome_calibration import OutcomeCalibration

    p = Path(spec)
    if p.is_file():
        data = p.read_bytes()
    elif store is not None and "calibrations" in store.tables():
        rows = store.read("calibrations", filter=pl.col("calibration_id") == str(spec))
        if not rows.height:
            known = store.read("calibrations", columns=["calibration_id"])["calibration_id"]
            raise ConfigError(
                f"calibration {spec!r} is neither a file nor stored in {store.url}; stored "
                f"calibrations: {', '.join(known.to_list()) or 'none'}"
            )
        data = store.get_blob(rows["blob"][0])
    else:
        where = f" nor a calibration id in {store.url}" if store is not None else ""
        raise ConfigError(
            f"calibration {spec!r} is not a file{where}: give the JSON `knowlyr reward "
            "calibrate` wrote, or a stored calibration id with --store"
        )
    try:
        kind = orjson.loads(data).get("kind")
    except (orjson.JSONDecodeError, AttributeError) as e:
        raise ConfigError(f"calibration {spec}: not a calibration JSON document ({e})") from e
    try:
        if kind == "outcome":
            return OutcomeCalibration.from_json(data)
        return CalibrationMap.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"calibration {spec}: {e}") from e
