"""Export from the store and back: scored trajectories of one version -> a stored dataset.

- :func:`train_filter`: the polars filter of a split (by task id), suite and task family;
- :func:`dataset_name`: the name a stored dataset gets from its inputs;
- :func:`export_from_store`: read trajectories + reward totals, export, write the ``datasets``
  table and record the run;
- :func:`load_dataset`: a stored dataset back as a Hugging Face ``datasets.Dataset``.

Usable without any orchestrator: the Prefect export task is a thin wrapper around
:func:`export_from_store`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from knowlyr._gc import paused
from knowlyr.export.common import DEFAULT_SYSTEM_PROMPT, ExportResult

if TYPE_CHECKING:
    import datasets
    import polars as pl

    from knowlyr.store import Manifest, Store

__all__ = ["StoreExport", "dataset_name", "export_from_store", "load_dataset", "train_filter"]

KINDS = ("sft", "dpo", "grpo")


@dataclass
class StoreExport:
    """What :func:`export_from_store` wrote.

    Attributes:
        name: the dataset's name in the ``datasets`` table.
        result: the export itself (``.dataset``, ``.card``, ``.rejected``).
        manifest: the ``datasets`` table version holding the rows.
        n_in: trajectories read (after the split / suite / family filter).
        reward_config_hashes: the reward configs whose totals were used, sorted.
    """

    name: str
    result: ExportResult
    manifest: Manifest
    n_in: int
    reward_config_hashes: list[str]

    @property
    def rows(self) -> int:
        """Rows exported."""
        return len(self.result)

    @property
    def rejected(self) -> int:
        """Trajectories rejected by the exporter."""
        return len(self.result.rejected)


def train_filter(
    *,
    split: str | None = "train",
    suite: str | None = None,
    family: str | None = None,
    agent_prefix: str | None = None,
) -> pl.Expr:
    """The trajectories of ``split`` (by task id), of ``suite`` and of its task ``family``,
    and of agents whose name starts with ``agent_prefix``.

    ``family`` only applies with a ``suite`` (task ids are ``<suite>-<family>-<n>``).

    Example:
        >>> trajs = store.read_trajectories(filter=train_filter(suite="conversation"))  # doctest: +SKIP
    """
    import polars as pl

    from knowlyr.taskset import split_of

    expr = pl.lit(True)
    if split is not None:
        expr = pl.col("task_id").map_elements(split_of, return_dtype=pl.String) == split
    if suite:
        expr &= pl.col("suite") == suite
        if family:
            expr &= pl.col("task_id").str.starts_with(f"{suite}-{family}-")
    if agent_prefix:
        expr &= pl.col("agent").str.starts_with(agent_prefix)
    return expr


def dataset_name(
    kind: str,
    *,
    trajectories_version: int,
    reward_config_hashes: list[str],
    suite: str | None = None,
    family: str | None = None,
) -> str:
    """The stored name of a dataset: kind, scope, trajectories version and reward configs.

    Example:
        >>> dataset_name("sft", trajectories_version=3, reward_config_hashes=["ab12cd34ef"],
        ...              suite="conversation", family="order_status")
        'sft-conversation-order_status-t3-ab12cd34'
    """
    scope = "-".join(x for x in (suite, family) if x) or "all"
    hashes = "-".join(h[:8] for h in sorted(reward_config_hashes))
    return f"{kind}-{scope}-t{trajectories_version}-{hashes}"


@paused()
def export_from_store(
    store: Store,
    *,
    trajectories_version: int | None,
    reward_config_hashes: list[str],
    kind: Literal["sft", "dpo", "grpo"] = "sft",
    suite: str | None = None,
    family: str | None = None,
    split: str | None = "train",
    only_success: bool = True,
    min_reward: float | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    agent_prefix: str | None = None,
    since_version: int | None = None,
    record: bool = True,
) -> StoreExport:
    """Export the trajectories at a version, with their reward totals, into the store.

    Trajectories are those of ``split`` / ``suite`` / ``family`` (see :func:`train_filter`);
    each gets the ``total`` and step rewards of its reward row under one of
    ``reward_config_hashes`` at the latest ``rewards`` version (see
    :func:`~knowlyr.export.rewards.store_rewards`: the card's ``params.rewards`` and the
    run's inputs name it; a trajectory without one is an error). The rows go to the
    ``datasets`` table under :func:`dataset_name`,
    and, with ``record``, an ``export`` run is added to the lineage.

    Args:
        store: the store to read from and write to.
        trajectories_version: the ``trajectories`` table version (None: the latest).
        reward_config_hashes: reward configs whose totals are used.
        kind: ``"sft"``, ``"dpo"`` or ``"grpo"``.
        suite: only this suite (None: all).
        family: only this task family of ``suite`` (None: all).
        split: only tasks of this split (None: every split).
        only_success: SFT: keep successful trajectories only.
        min_reward: SFT: keep rewards >= this.
        system_prompt: the system message of every row.
        agent_prefix: only trajectories of agents whose name starts with this (the nightly
            loop trains on its own rollouts: ``checkpoint:``).
        since_version: only trajectories added to the table after this version (the
            nightly loop's bounded replay window; None: every trajectory at the version).
        record: record the run in the store's lineage.

    Returns:
        The dataset's name, the export result and the ``datasets`` manifest.

    Raises:
        ValueError: ``kind`` is not one of sft / dpo / grpo.

    Example:
        >>> out = export_from_store(store, trajectories_version=3,
        ...                         reward_config_hashes=["ab12..."], kind="sft")  # doctest: +SKIP
        >>> load_dataset(store, out.name, version=out.manifest.version)  # doctest: +SKIP
    """
    import polars as pl

    from knowlyr.export.grpo import export_grpo
    from knowlyr.export.preference import export_dpo
    from knowlyr.export.rewards import store_rewards
    from knowlyr.export.sft import export_sft

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    hashes = sorted(set(reward_config_hashes))
    where = train_filter(split=split, suite=suite, family=family, agent_prefix=agent_prefix)
    if since_version is not None and since_version >= 0:
        before = store.read("trajectories", version=since_version, columns=["id"])["id"]
        where &= ~pl.col("id").is_in(before.implode())
    # the totals and step rewards of the chosen configs, at the latest rewards version
    ids = store.scan("trajectories", version=trajectories_version).filter(where).select("id")
    source = store_rewards(
        store,
        trajectories_version=trajectories_version,
        config_hashes=hashes,
        ids=ids.collect()["id"].to_list(),
    )
    kw = {"rewards": source.totals, "reward_source": source.info, "validated": True}
    # The table's physical row order depends on how concurrent writers' commits interleaved;
    # the dataset must not (row order changes what a model learns from it): content-hash order.
    # the stored JSON documents, no models (see knowlyr.store._documents)
    documents = source.documents(_documents(store, trajectories_version, where))
    if kind == "sft":
        result = export_sft(
            documents,
            system_prompt=system_prompt,
            only_success=only_success,
            min_reward=min_reward,
            **kw,
        )
    elif kind == "dpo":
        result = export_dpo(documents, system_prompt=system_prompt, **kw)
    else:
        result = export_grpo(documents, system_prompt=system_prompt, **kw)
    n_in = result.card.params["input_trajectories"]
    version = trajectories_version
    if version is None:
        version = store.version("trajectories") or 0
    name = dataset_name(
        kind, trajectories_version=version, reward_config_hashes=hashes, suite=suite, family=family
    )
    if agent_prefix:
        name += f"-by-{agent_prefix.rstrip(':')}"
    if since_version is not None and since_version >= 0:
        name += f"-after{since_version}"
    manifest = result.to_store(store, name=name)
    if record:
        params: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "suite": suite,
            "family": family,
            "only_success": only_success,
            "min_reward": min_reward,
            "system_prompt": system_prompt,
            "agent_prefix": agent_prefix,
            "since_version": since_version,
            "reward_configs": hashes,
        }
        rv = source.info["rewards_version"]
        store.record_run(
            "export",
            inputs={"trajectories": version, **({"rewards": rv} if rv is not None else {})},
            outputs={"datasets": manifest.version},
            params=params,
        )
    return StoreExport(
        name=name, result=result, manifest=manifest, n_in=n_in, reward_config_hashes=hashes
    )


def _documents(store: Store, version: int | None, where: pl.Expr) -> Iterator[dict[str, Any]]:
    """The JSON documents of the trajectories at ``version`` that ``where`` keeps, in
    content-hash order, decoded a batch at a time."""
    import orjson

    frame = store.scan("trajectories", version=version).filter(where).select("id", "data")
    data = frame.sort("id").collect().get_column("data")
    for i in range(0, len(data), 2000):
        yield from map(orjson.loads, data.slice(i, 2000).to_list())


def load_dataset(store: Store, name: str, *, version: int | None = None) -> datasets.Dataset:
    """A dataset of the store's ``datasets`` table as a Hugging Face ``datasets.Dataset``.

    Rows come back in export order with the column types the exporter made: lists of dicts
    (messages, tools) stay ``list<json>`` so every message keeps its own keys (a plain Arrow
    struct would merge them into ``{"order_id", "text": null}``).

    Args:
        store: the store holding the dataset.
        name: the dataset's name (see :func:`dataset_name`).
        version: the ``datasets`` table version (None: the latest).

    Raises:
        NotFoundError: no dataset ``name`` at that version.

    Example:
        >>> ds = load_dataset(Store.open("./store"), "sft-conversation-t3-ab12cd34")  # doctest: +SKIP
        >>> ds[0]["messages"][0]["role"]  # doctest: +SKIP
        'system'
    """
    import orjson
    import polars as pl
    import pyarrow as pa
    from datasets import Dataset

    from knowlyr._arrow import table_fingerprint
    from knowlyr.errors import NotFoundError
    from knowlyr.export.sft import json_list_array

    frame = store.read("datasets", version=version, filter=pl.col("dataset") == name)
    if frame.height == 0:
        known = sorted(set(store.read("datasets", version=version, columns=["dataset"])["dataset"]))
        at = "latest" if version is None else f"version {version}"
        raise NotFoundError(
            f"no dataset {name!r} in the store's datasets table ({at}); "
            f"known: {', '.join(known[:10]) or 'none'}"
        )
    rows = [orjson.loads(data) for data in _row_documents(store, name, frame)]
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {}
    for col in names:
        values = [r.get(col) for r in rows]
        if any(isinstance(v, list) and v and isinstance(v[0], dict) for v in values):
            columns[col] = json_list_array([[orjson.dumps(x) for x in v or []] for v in values])
        else:
            columns[col] = pa.array(values)
    table = pa.table(columns)
    return Dataset(table, fingerprint=table_fingerprint(table))


def _row_documents(store: Store, name: str, frame: pl.DataFrame) -> list[str]:
    """The JSON rows of dataset ``name`` in export order, from its ``datasets`` rows.

    A manifest names its rows by hash in ``dataset_rows`` (when one name was exported twice
    with different rows, the newest manifest is the dataset); a store written before
    manifests holds the rows themselves, ordered by their ``row_id`` index."""
    import polars as pl

    from knowlyr.errors import StoreError

    if "row_hashes" in frame.columns and frame["row_hashes"].is_not_null().any():
        hashes = (
            frame.filter(pl.col("row_hashes").is_not_null())
            .sort("created_at", nulls_last=False)["row_hashes"][-1]
            .to_list()
        )
        docs = store.read(
            "dataset_rows",
            filter=pl.col("row_hash").is_in(list(set(hashes))),
            columns=["row_hash", "data"],
        )
        by_hash = dict(zip(docs["row_hash"], docs["data"], strict=True))
        lost = [h for h in hashes if h not in by_hash]
        if lost:
            raise StoreError(
                f"dataset {name!r} names {len(lost)} row(s) missing from the store's "
                f"dataset_rows table (e.g. {lost[0][:16]}): export it again"
            )
        return [by_hash[h] for h in hashes]
    ordered = sorted(
        frame.select("row_id", "data").iter_rows(), key=lambda r: int(r[0].split(":", 1)[0])
    )
    return [data for _, data in ordered]
