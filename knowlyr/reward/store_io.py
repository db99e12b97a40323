"""Score the store's trajectories and pair them, reading and writing the store's tables.

- :func:`engine_for`: the :class:`~knowlyr.reward.engine.RewardEngine` of a domain;
- :func:`score_unscored`: score the trajectories of one version that have no reward under
  the engine's config yet (sharded by trajectory id), and save the rewards;
- :func:`preferences_from_store`: preference pairs from the stored rewards of one version.

Usable without any orchestrator: the Prefect reward tasks are thin wrappers around these.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from knowlyr._gc import paused

if TYPE_CHECKING:
    from knowlyr.reward.engine import RewardEngine, TrajectoryReward
    from knowlyr.store import Manifest, Store

__all__ = ["ScoreResult", "engine_for", "preferences_from_store", "score_unscored"]


@dataclass
class ScoreResult:
    """What :func:`score_unscored` wrote.

    Attributes:
        rewards: the newly scored trajectories' rewards.
        manifest: the ``rewards`` version written last (None: nothing new to score).
        config_hashes: the reward configs of every domain in the version, sorted.
    """

    rewards: list[TrajectoryReward] = field(default_factory=list)
    manifest: Manifest | None = None
    config_hashes: list[str] = field(default_factory=list)

    @property
    def totals(self) -> list[float]:
        """The new rewards' totals (those that have one)."""
        return [r.total for r in self.rewards if r.total is not None]


def engine_for(
    domain: str,
    *,
    profile: str | None = None,
    layers: Sequence[str] = ("rules",),
    judge: str | None = None,
    outcome_weight: float | None = None,
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
    return RewardEngine(prof, list(layers), judge=judge, outcome_weight=outcome_weight)


def score_unscored(
    store: Store,
    *,
    trajectories_version: int | None = None,
    profile: str | None = None,
    layers: Sequence[str] = ("rules",),
    judge: str | None = None,
    outcome_weight: float | None = None,
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
    frame = store.read("trajectories", version=trajectories_version, columns=["id", "domain"])
    if n_shards > 1:
        frame = frame.filter(pl.col("id").hash() % n_shards == shard)
    engines = {
        d: engine_for(d, profile=profile, layers=layers, judge=judge, outcome_weight=outcome_weight)
        for d in frame["domain"].unique().to_list()
    }
    scored = store.read("rewards", columns=["trajectory_id", "config_hash"])
    done = set(zip(scored["trajectory_id"].to_list(), scored["config_hash"].to_list(), strict=True))
    out = ScoreResult(config_hashes=sorted({e.config_hash for e in engines.values()}))
    for domain, engine in engines.items():
        ids = frame.filter(pl.col("domain") == domain)["id"].to_list()
        todo = [i for i in ids if (i, engine.config_hash) not in done]
        if todo:
            out.manifest, batch = _score_and_save(store, engine, trajectories_version, todo)
            out.rewards += batch
    return out


def _score_and_save(
    store: Store, engine: RewardEngine, version: int | None, ids: list[str]
) -> tuple[Manifest, list[TrajectoryReward]]:
    """Score ``ids`` at ``version`` and save the rewards. Without a judge this runs with the
    cyclic GC paused, so the batch of trajectories is freed by refcounting before any
    collection walks it (see knowlyr._gc); a judge waits on the network for long stretches,
    with many short-lived async objects, so it runs with the GC on."""
    with nullcontext() if engine.judge is not None else paused():
        batch = engine.score(store.read_trajectories(version=version, ids=ids))
        return engine.save(store, batch), batch


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
