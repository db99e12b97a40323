"""Where an export's rewards come from: a store's rewards version, a rewards file, or the rule
layer run on the fly.

An export's ``reward`` column, its ``--min-reward`` filter, its step weights (SFT), pair
margins (DPO) and group advantages (GRPO) all read the trajectory's total and step rewards.
A :class:`RewardSource` holds them for every trajectory of the export and says where they
came from (:attr:`RewardSource.info`, written into the dataset card as ``params.rewards``):

- :func:`store_rewards`: the ``rewards`` table of a store at one version, under the reward
  config(s) chosen (one total per trajectory, the one the ``reward`` flow and ``knowlyr
  reward score --store`` wrote);
- :func:`file_rewards`: a rewards document ``knowlyr reward score ... -o FILE`` wrote;
- :func:`rule_rewards`: the rule layer of each trajectory's domain profile, run over the
  input as one batch (what ``knowlyr reward score`` on the same files gives per domain).

:meth:`RewardSource.documents` puts each trajectory's step rewards into its JSON document
(the exporters read them there) and the totals go in as the exporters' ``rewards``; a
trajectory the source has no reward for is an error naming it and the fix, never a silent
default.

Example:
    >>> source = store_rewards(store)  # doctest: +SKIP
    >>> export_sft(source.documents(docs), rewards=source.totals,
    ...            reward_source=source.info)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowlyr.errors import ExportError

if TYPE_CHECKING:
    import polars as pl

    from knowlyr.store import Store

__all__ = ["RewardSource", "file_rewards", "reward_source_of", "rule_rewards", "store_rewards"]


def reward_source_of(info: Any, rewards: Any) -> dict[str, Any]:
    """What a dataset card says of its rewards: ``info`` (a :attr:`RewardSource.info`) when
    given, else ``{"source": "given"}`` for a ``rewards`` mapping passed in, else
    ``{"source": "trajectories"}`` (the step rewards and outcomes the trajectories carry)."""
    if info:
        return dict(info)
    return {"source": "given" if rewards is not None else "trajectories"}


@dataclass
class RewardSource:
    """Every exported trajectory's total and step rewards, and where they came from.

    Attributes:
        totals: trajectory id -> total reward (left out where no step could be scored: the
            exporters then take the outcome's).
        steps: trajectory id -> reward of each of its steps (``None`` where no rubric applied).
        info: what the rewards are (``source``: ``store`` / ``file`` / ``rules``, and the
            store, rewards version, config hashes or file it names); the dataset card's
            ``params.rewards``.
        missing: how to get a reward for a trajectory this source lacks (the error's fix).
    """

    totals: dict[str, float] = field(default_factory=dict)
    steps: dict[str, list[float | None]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    missing: str = "score it"

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` (a trajectory's JSON document, changed in place) with the step rewards of
        this source.

        Raises:
            ExportError: the source has no reward for the trajectory, or rewards for another
                number of steps (names the trajectory and the fix).
        """
        tid = doc["id"]
        rewards = self.steps.get(tid)
        if rewards is None:
            raise ExportError(
                f"trajectory {tid[:16]} (task {doc['task']['task_id']}) has no reward in "
                f"{self.describe()}: {self.missing}"
            )
        steps = doc.get("steps") or []
        if len(rewards) != len(steps):
            raise ExportError(
                f"trajectory {tid[:16]}: {self.describe()} has {len(rewards)} step rewards for "
                f"its {len(steps)} steps (rewards of another trajectory?): {self.missing}"
            )
        for step, r in zip(steps, rewards, strict=True):
            step["reward"] = r
        return doc

    def documents(self, docs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """:meth:`apply` of each document, one at a time."""
        return map(self.apply, docs)

    def merged(self, other: RewardSource) -> RewardSource:
        """This source and ``other`` (for an export of files and a store): ``other``'s
        rewards where both have one; ``info`` names both."""
        return RewardSource(
            {**self.totals, **other.totals},
            {**self.steps, **other.steps},
            {"source": "mixed", "parts": [self.info, other.info]},
            f"{self.missing}; {other.missing}",
        )

    def describe(self) -> str:
        """A few words naming the source (for messages)."""
        info = self.info
        if info.get("source") == "store":
            return f"the rewards of {info['store']} (rewards@{info['rewards_version']})"
        if info.get("source") == "file":
            return f"the rewards file {info['path']}"
        if info.get("source") == "mixed":
            return " and ".join(RewardSource(info=p).describe() for p in info["parts"])
        return "the rule rewards computed for the export"


def _add_rows(source: RewardSource, rows: pl.DataFrame) -> None:
    """Add ``rewards`` table rows (``trajectory_id``, ``total``, ``per_step``) to ``source``."""
    for tid, total, per_step in rows.select("trajectory_id", "total", "per_step").iter_rows():
        if total is not None:  # none: no step could be scored (the outcome decides)
            source.totals[tid] = total
        source.steps[tid] = [None if math.isnan(r) else r for r in per_step or ()]


def store_rewards(
    store: Store,
    *,
    trajectories_version: int | None = None,
    rewards_version: int | None = None,
    config_hashes: Sequence[str] | None = None,
    ids: Iterable[str] | None = None,
) -> RewardSource:
    """The rewards a store holds for its trajectories at ``trajectories_version``.

    Args:
        store: the store.
        trajectories_version: the trajectories whose rewards are read (None: the latest).
        rewards_version: the ``rewards`` table version (None: the latest).
        config_hashes: the reward configs to read (None: every config the trajectories were
            scored under, which must then be one per trajectory).
        ids: only these trajectories (None: every one at the version).

    Raises:
        ExportError: a trajectory has no reward under the configs (names how many, one of
            them and the command that scores them), or several configs score one trajectory
            and none was chosen (lists them).
    """
    import polars as pl

    url = store.url
    tv = store.version("trajectories") if trajectories_version is None else trajectories_version
    rv = store.version("rewards") if rewards_version is None else rewards_version
    wanted = store.read("trajectories", version=tv, columns=["id", "domain"])
    if ids is not None:
        wanted = wanted.filter(pl.col("id").is_in(list(set(ids))))
    fix = f"run `knowlyr reward score --store {url}` (or the reward flow) to score them"
    if config_hashes is not None and not config_hashes:
        fix = (
            "no reward config was chosen: give the configs they are scored under "
            f"(`knowlyr reward score --store {url}` prints them)"
        )
    elif config_hashes is not None:
        fix = f"score them under {', '.join(config_hashes)} (`knowlyr reward score --store {url}` with the same options)"
    if rv is None:
        if not wanted.height:
            return RewardSource(info=_store_info(url, tv, None, []), missing=fix)
        raise ExportError(f"the store {url} holds no rewards for its trajectories: {fix}")
    lf = store.scan("rewards", version=rv)
    if config_hashes is not None:
        lf = lf.filter(pl.col("config_hash").is_in(list(config_hashes)))
    rows = (
        lf.select("trajectory_id", "config_hash", "total", "per_step")
        .collect()
        .join(wanted.select("id"), left_on="trajectory_id", right_on="id", how="semi")
    )
    several = rows.group_by("trajectory_id").agg(pl.col("config_hash").n_unique().alias("n"))
    if several.filter(pl.col("n") > 1).height:
        counts = rows.group_by("config_hash").len().sort("config_hash")
        listed = ", ".join(f"{h} ({n} trajectories)" for h, n in counts.iter_rows())
        raise ExportError(
            f"the trajectories of {url} are scored under several reward configs ({listed}): "
            "choose one per domain with --reward-config HASH (repeatable)"
        )
    lacking = wanted.join(rows, left_on="id", right_on="trajectory_id", how="anti")
    if lacking.height:
        raise ExportError(
            f"{lacking.height} of the {wanted.height} trajectories of {url} "
            f"(trajectories@{tv}) have no reward in rewards@{rv}"
            + (
                f" under {', '.join(config_hashes) or 'no config'}"
                if config_hashes is not None
                else ""
            )
            + f", e.g. {lacking['id'][0][:16]}: {fix}"
        )
    source = RewardSource(
        info=_store_info(url, tv, rv, sorted(set(rows["config_hash"].to_list()))), missing=fix
    )
    _add_rows(source, rows)
    return source


def _store_info(url: str, tv: int | None, rv: int | None, hashes: list[str]) -> dict[str, Any]:
    return {
        "source": "store",
        "store": url,
        "trajectories_version": tv,
        "rewards_version": rv,
        "config_hashes": hashes,
    }


def file_rewards(path: str | Path) -> RewardSource:
    """The rewards of a document ``knowlyr reward score ... -o FILE`` wrote (or a JSON list /
    JSONL of reward dicts).

    Raises:
        ConfigError: the file is missing or not a rewards document (names the file).
    """
    import hashlib

    from knowlyr.reward.engine import load_rewards

    p = Path(path)
    rewards = load_rewards(p)
    fix = f"score the same trajectories into it: `knowlyr reward score FILES -o {p}`"
    source = RewardSource(
        info={
            "source": "file",
            "path": str(p.resolve()),
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            "config_hashes": sorted({r.config_hash for r in rewards}),
        },
        missing=fix,
    )
    for r in rewards:
        if r.total is not None:
            source.totals[r.trajectory_id] = r.total
        source.steps[r.trajectory_id] = list(r.step_rewards)
    return source


#: Documents scored at once by :func:`rule_rewards` (per domain).
RULE_BATCH = 1000


def rule_rewards(
    documents: Callable[[], Iterable[dict[str, Any]]], *, profile: str | None = None
) -> RewardSource:
    """The rule layer's rewards of trajectories given as JSON documents, each scored with
    its domain's profile (``profile``: one for all) and efficiency's batch medians taken over
    all of the domain's trajectories: the numbers of ``knowlyr reward score`` on the same
    trajectories with ``--domain`` their domain.

    ``documents`` is called twice (the first pass takes each domain's task lengths, the
    second scores :data:`RULE_BATCH` documents at a time), so memory holds one batch.

    Example:
        >>> source = rule_rewards(lambda: jsonl_documents(["runs.jsonl"]))  # doctest: +SKIP
    """
    import polars as pl

    from knowlyr.reward.store_io import engine_for

    columns: dict[str, tuple[list[str], list[int], list[bool | None]]] = {}
    for d in documents():
        tasks, lengths, success = columns.setdefault(_domain(d), ([], [], []))
        tasks.append(d["task"]["task_id"])
        lengths.append(len(d.get("steps") or ()))
        success.append((d.get("outcome") or {}).get("success"))
    schema = {"task": pl.String, "n_steps": pl.UInt32, "success": pl.Boolean}
    population = {
        dom: pl.DataFrame({"task": t, "n_steps": n, "success": s}, schema=schema)
        for dom, (t, n, s) in columns.items()
    }
    del columns
    engines = {dom: engine_for(dom, profile=profile) for dom in population}
    source = RewardSource(
        info={
            "source": "rules",
            "profiles": {dom: e.profile.domain for dom, e in sorted(engines.items())},
            "config_hashes": sorted({e.config_hash for e in engines.values()}),
        },
        missing="the input changed while it was read: export again",
    )
    batches: dict[str, list[dict[str, Any]]] = {}
    for d in documents():
        batch = batches.setdefault(_domain(d), [])
        batch.append(d)
        if len(batch) >= RULE_BATCH:
            dom = _domain(d)
            _add_rows(source, engines[dom].score_documents(batch, population=population[dom]))
            batches[dom] = []
    for dom, batch in batches.items():
        if batch:
            _add_rows(source, engines[dom].score_documents(batch, population=population[dom]))
    return source


def _domain(doc: dict[str, Any]) -> str:
    return doc["task"].get("domain") or "generic"
