"""``knowlyr view export IDS -o DIR``: the viewer's pages as files that open without a server.

The folder holds ``index.html`` (the exported trajectories and pairs), one
``t-<id>.html`` per trajectory, one ``pair-<chosen>-<rejected>.html`` per pair, and
``blobs/`` with the raw logs and screenshots the pages show. Links are relative and stay
inside the folder; a link to a page the export does not hold is plain text.

Pairs exported: every ``A:B`` argument (two trajectories of one task), every stored
preference pair whose two sides are both exported, and every two exported trajectories of
one task (side by side).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

from knowlyr.errors import ConfigError
from knowlyr.view.pages import PairView, TrajectoryView, pair_view, trajectory_view
from knowlyr.view.reader import StoreReader, blob_type
from knowlyr.view.render import StaticLinks, render

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ExportResult", "export_pages"]


@dataclass
class ExportResult:
    """What :func:`export_pages` wrote under ``out_dir``."""

    out_dir: Path
    trajectories: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def index(self) -> Path:
        return self.out_dir / "index.html"


def export_pages(
    store: str | os.PathLike[str] | StoreReader,
    ids: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    version: int | None = None,
) -> ExportResult:
    """Write the pages of trajectories ``ids`` (and their pairs) into ``out_dir``.

    Args:
        store: a store path / URL, or an open :class:`StoreReader`.
        ids: trajectory ids (unique prefixes of >= 8 characters work), or ``A:B`` for the
            pair page of two trajectories of one task (both pages are exported too).
        out_dir: the folder to write (created; existing files of the same names are replaced).
        version: the ``trajectories`` version to read (default: latest).

    Raises:
        ConfigError: no ids, a malformed id, or an ``A:B`` of two tasks.
        NotFoundError: the store or a trajectory does not exist.

    Example:
        >>> res = export_pages(".knowlyr/store", ["3f2a9c1e", "3f2a9c1e:77b0d2aa"], "out")  # doctest: +SKIP
        >>> res.index                                                                     # doctest: +SKIP
        PosixPath('out/index.html')
    """
    if not ids:
        raise ConfigError("export needs at least one trajectory id (or A:B pair)")
    reader = store if isinstance(store, StoreReader) else StoreReader(store)
    views: dict[str, TrajectoryView] = {}
    asked_pairs: list[tuple[str, str]] = []
    for arg in ids:
        parts = arg.split(":")
        if len(parts) > 2 or not all(parts):
            raise ConfigError(f"export argument {arg!r}: expected ID or ID:ID")
        full = []
        for part in parts:
            v = trajectory_view(reader, part, version=version)
            views.setdefault(v.traj.id, v)
            full.append(v.traj.id)
        if len(full) == 2:
            asked_pairs.append((full[0], full[1]))

    pairs: dict[frozenset[str], PairView] = {}
    pair_ids: dict[str, tuple[str, str]] = {}

    def add(a: str, b: str) -> PairView:
        key = frozenset((a, b))
        if key not in pairs:
            pairs[key] = pair_view(reader, a, b)
        return pairs[key]

    for a, b in asked_pairs:
        add(a, b)
    for v in views.values():
        for p in v.preferences:
            if p["chosen_id"] in views and p["rejected_id"] in views:
                pv = add(p["chosen_id"], p["rejected_id"])
                pair_ids[p["pair_id"]] = (pv.chosen.traj.id, pv.rejected.traj.id)
    for a, b in combinations(list(views), 2):
        if views[a].traj.task.task_id == views[b].traj.task.task_id:
            add(a, b)

    out = Path(out_dir)
    (out / "blobs").mkdir(parents=True, exist_ok=True)
    result = ExportResult(out_dir=out, trajectories=list(views))
    blobs: dict[str, str] = {}
    shown = [*views.values(), *(s for p in pairs.values() for s in (p.chosen, p.rejected))]
    for digest in dict.fromkeys(h for v in shown for h in v.blobs):
        data = reader.blob(digest)
        blobs[digest] = f"{digest}{blob_type(data)[1]}"
        path = out / "blobs" / blobs[digest]
        path.write_bytes(data)
        result.files.append(path)

    ordered = [(p.chosen.traj.id, p.rejected.traj.id) for p in pairs.values()]
    links = StaticLinks(views, ordered, pair_ids, blobs)
    common = {"store_url": reader.url, "version": version}

    def write(name: str, html: str) -> None:
        path = out / name
        path.write_text(html, encoding="utf-8")
        result.files.append(path)

    for id, v in views.items():
        same = [
            {
                "id": o.traj.id,
                "agent": o.traj.agent.name,
                "n_steps": len(o.steps),
                "success": o.traj.outcome.success,
                "reward": o.reward.total if o.reward else None,
            }
            for o in views.values()
            if o.traj.id != id and o.traj.task.task_id == v.traj.task.task_id
        ]
        write(
            links.trajectory_file(id),
            render("trajectory.jinja", links, view=v, same_task=same, **common),
        )
    for (c, r), p in zip(ordered, pairs.values(), strict=True):
        write(links.pair_file(c, r), render("pair.jinja", links, pair=p, **common))
        result.pairs.append((c, r))
    write(
        "index.html",
        render(
            "index.jinja", links, views=list(views.values()), pairs=list(pairs.values()), **common
        ),
    )
    return result
