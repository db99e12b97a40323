"""Score the store's trajectories and pair them, reading and writing the store's tables.

- :func:`engine_for`: the :class:`~knowlyr.reward.engine.RewardEngine` of a domain;
- :func:`score_unscored`: score the trajectories of one version that have no reward under
  the engine's config yet (sharded by trajectory id), and save the rewards;
- :func:`preferences_from_store`: preference pairs from the stored rewards of one version;
- :func:`calibrate_from_store`: fit P(success | facets) on the labelled trajectories of a
  version and store it (:func:`save_calibration`: a blob, a ``calibrations`` row and a
  ``runs`` row for lineage); :func:`load_calibration` gets one back by id or from a file.

Usable without any orchestrator: the Prefect reward tasks are thin wrappers around these.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from knowlyr._gc import paused

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl

    from knowlyr.reward.calibration import CalibrationMap
    from knowlyr.reward.engine import RewardEngine, TrajectoryReward
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
    "score_unscored",
]


@dataclass
class ScoreResult:
    """What :func:`score_unscored` wrote.

    Attributes:
        rows: the newly scored trajectories' rows of the ``rewards`` table, one frame per
            domain.
        manifest: the ``rewards`` version written last (None: nothing new to score).
        config_hashes: the reward configs of every domain in the version, sorted.
    """

    rows: list[pl.DataFrame] = field(default_factory=list)
    manifest: Manifest | None = None
    config_hashes: list[str] = field(default_factory=list)

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
    judge: str | None = None,
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
        prof, list(layers), judge=judge, outcome_weight=outcome_weight, calibration=calibration
    )


def score_unscored(
    store: Store,
    *,
    trajectories_version: int | None = None,
    profile: str | None = None,
    layers: Sequence[str] = ("rules",),
    judge: str | None = None,
    outcome_weight: float | None = None,
    calibration: OutcomeCalibration | CalibrationMap | None = None,
    shard: int = 0,
    n_shards: int = 1,
) -> ScoreResult:
    """Score the trajectories at a version that have no reward under their engine's config.

    Each domain gets :func:`engine_for`; trajectories already scored under that engine's
    config hash are skipped, so a re-run scores only what is new. With ``n_shards > 1`` only
    the trajectories whose id hashes to ``shard`` are scored (fan-out of judge calls).

    Args:
        store: the store to read trajectories from and write rewards to.
        trajectories_version: the ``trajectories`` table version (None: the latest).
        profile: DomainProfile name for every trajectory (None: each one's domain).
        layers: ``"rules"`` and/or ``"judge"``.
        judge: judge spec such as ``"anthropic:MODEL"`` (judge layer).
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
    if n_shards > 1:
        frame = frame.filter(pl.col("id").hash() % n_shards == shard)
    engines = {
        d: engine_for(
            d,
            profile=profile,
            layers=layers,
            judge=judge,
            outcome_weight=outcome_weight,
            calibration=calibration,
        )
        for d in frame["domain"].unique().to_list()
    }
    scored = store.read("rewards", columns=["trajectory_id", "config_hash"])
    done = set(zip(scored["trajectory_id"].to_list(), scored["config_hash"].to_list(), strict=True))
    out = ScoreResult(config_hashes=sorted({e.config_hash for e in engines.values()}))
    for domain, engine in engines.items():
        mine = frame.filter(pl.col("domain") == domain)
        config = engine.config_hash
        todo = mine.filter(pl.Series([(i, config) not in done for i in mine["id"].to_list()]))
        if todo.height:
            out.manifest, rows = _score_and_save(store, engine, trajectories_version, todo)
            out.rows.append(rows)
    return out


#: Trajectories scored at once (at least) when the rule layer scores stored documents (1,024
#: 20-step ones: ~40 MB of documents; larger batches cost memory and gain no speed here).
SCORE_BATCH = 1024


def _score_and_save(
    store: Store, engine: RewardEngine, version: int | None, todo: pl.DataFrame
) -> tuple[Manifest, pl.DataFrame]:
    """Score the trajectories ``todo`` names (``id``, ``task_id``, ``n_steps``, ``success``)
    at ``version`` and save the rewards in one transaction.

    The rule layer reads the stored JSON documents a slice of the table at a time
    (:meth:`~knowlyr.store.Store.iter_data`) and scores :data:`SCORE_BATCH` or more at once,
    no model built (memory: one batch of documents, and the new rows: ~7 KB per 20-step
    trajectory),
    efficiency's batch medians taken over all of ``todo``, so the numbers are those of one
    batch. The judge layer and an outcome calibration read models:
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
            rows = rewards_frame(engine.score(store.read_trajectories(version=version, ids=ids)))
        return engine.save(store, rows), rows
    population = todo.select(task="task_id", n_steps="n_steps", success="success")
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
    return engine.save(store, rows), rows


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
