"""Suites, the suite registry, splits and seeded sampling.

A :class:`Suite` is an indexed, deterministic collection of tasks: ``suite.task(i)`` builds
the same :class:`~knowlyr.taskset.task.Task` every time, so suites of thousands of
procedurally generated tasks cost nothing until a task is used. Splits are decided by
instruction text (:meth:`Suite.split_of`): tasks that ask the same thing (whitespace
normalised) are always in the same split, so no held-out instruction is ever trained on,
whatever the sample size or seed.

Example:
    >>> from knowlyr.taskset import sample
    >>> tasks = sample("conversation", 3, seed=0, split="heldout", family="order_status")
    >>> {t.split for t in tasks}, {t.family for t in tasks}
    ({'heldout'}, {'order_status'})
"""

from __future__ import annotations

import abc
import hashlib
import importlib
import random
import threading
from collections.abc import Iterable, Sequence
from functools import cached_property

from knowlyr.errors import ConfigError
from knowlyr.taskset.task import Split, Task

__all__ = [
    "HELDOUT_FRACTION",
    "Suite",
    "get_suite",
    "get_task",
    "list_suites",
    "register_suite",
    "register_tasks",
    "sample",
    "split_of",
    "split_text",
]

HELDOUT_FRACTION = 0.2

_BUILTIN: dict[str, str] = {
    "coding": "knowlyr.taskset.coding:CodingSuite",
    "conversation": "knowlyr.taskset.conversation:ConversationSuite",
    "engineering": "knowlyr.taskset.knowledge:EngineeringSuite",
    "advisory": "knowlyr.taskset.knowledge:AdvisorySuite",
    "discussion": "knowlyr.taskset.knowledge:DiscussionSuite",
}
_SUITES: dict[str, Suite] = {}
_LOADED_TASKS: dict[str, Task] = {}
_LOCK = threading.Lock()


def _id_score(task_id: str) -> int:
    """sha256 of ``task_id`` as a number in ``[0, 1_000_000)``: a task's place in the split
    order."""
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") % 1_000_000


def _check_fraction(heldout_fraction: float) -> None:
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ConfigError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}")


def split_text(instruction: str) -> str:
    """What decides a split: ``instruction`` with runs of whitespace made one space."""
    return " ".join(instruction.split())


def split_of(task_id: str, *, heldout_fraction: float = HELDOUT_FRACTION) -> Split:
    """The split of a task, the same in every run, sample and process.

    - A task of a registered suite (``<suite>-<family>-<n>``): the suite's split, decided by
      instruction text (see :meth:`Suite.split_of`).
    - A loaded task (:func:`register_tasks`): the split it carries.
    - Any other id: ``heldout`` for a fixed ``heldout_fraction`` of ids (sha256 of the id).

    Example:
        >>> split_of("conversation-order_status-00000") in ("train", "heldout")
        True
    """
    _check_fraction(heldout_fraction)
    task = _LOADED_TASKS.get(task_id)
    if task is not None and heldout_fraction == HELDOUT_FRACTION:
        return task.split
    prefix = task_id.split("-", 1)[0]
    if prefix in _BUILTIN or prefix in _SUITES:
        suite = get_suite(prefix)
        if task_id in suite._index:
            return suite.split_of(task_id, heldout_fraction=heldout_fraction)
    return "heldout" if _id_score(task_id) < heldout_fraction * 1_000_000 else "train"


class Suite(abc.ABC):
    """An indexed, deterministic collection of tasks.

    Subclasses set ``name``, ``domain`` and ``families`` and implement :meth:`_ids` (all task
    ids, cheap) and :meth:`_build` (one task from its index).

    Splits (:meth:`split_of`) are decided by instruction text: every task is built once, the
    first time a split is asked for (about a second for 20,000 tasks).
    """

    name: str = ""
    domain: str = "generic"
    families: tuple[str, ...] = ()

    @abc.abstractmethod
    def _ids(self) -> list[str]:
        """Every task id, in index order."""

    @abc.abstractmethod
    def _build(self, index: int) -> Task:
        """Task number ``index`` (its split is filled in by :meth:`task`)."""

    @cached_property
    def ids(self) -> list[str]:
        ids = self._ids()
        if len(set(ids)) != len(ids):
            raise ConfigError(f"suite {self.name!r} generates duplicate task ids")
        return ids

    @cached_property
    def _index(self) -> dict[str, int]:
        return {tid: i for i, tid in enumerate(self.ids)}

    def __len__(self) -> int:
        return len(self.ids)

    def family_of(self, task_id: str) -> str:
        """The family encoded in a task id (``<suite>-<family>-...``)."""
        return task_id.split("-")[1]

    def task(self, index: int) -> Task:
        if not 0 <= index < len(self):
            raise ConfigError(
                f"task index {index} out of range for suite {self.name!r} (size {len(self)})"
            )
        t = self._build(index)
        t.split = self._splits(HELDOUT_FRACTION)[index]
        return t

    def split_of(self, task_id: str, *, heldout_fraction: float = HELDOUT_FRACTION) -> Split:
        """``train`` or ``heldout``: tasks whose instructions are the same text (whitespace
        normalised, :func:`split_text`) are always in the same split.

        Such a group of tasks goes to ``heldout`` whole. Each family's groups are taken in
        the order of their first task's id hash (sha256) while they bring the family's
        held-out count closer to ``heldout_fraction`` of its tasks (a family's rounding, up to
        one task, carries over to the next), so every family keeps about that share
        (a family of a few distinct questions asked of many databases gets whole questions
        held out), and a suite whose instructions are all distinct splits as a hash of its
        ids would.

        Raises:
            ConfigError: no such task in this suite.
        """
        try:
            index = self._index[task_id]
        except KeyError:
            raise ConfigError(f"suite {self.name!r} has no task {task_id!r}") from None
        return self._splits(heldout_fraction)[index]

    def _splits(self, heldout_fraction: float) -> list[Split]:
        """Every task's split, in index order (computed once per fraction)."""
        _check_fraction(heldout_fraction)
        cache: dict[float, list[Split]] = self.__dict__.setdefault("_split_cache", {})
        if heldout_fraction not in cache:
            cache[heldout_fraction] = self._assign_splits(heldout_fraction)
        return cache[heldout_fraction]

    def _assign_splits(self, heldout_fraction: float) -> list[Split]:
        groups: dict[str, list[int]] = {}
        for i in range(len(self)):
            groups.setdefault(split_text(self._build(i).instruction), []).append(i)
        by_family: dict[str, list[list[int]]] = {}
        for members in groups.values():
            by_family.setdefault(self.family_of(self.ids[members[0]]), []).append(members)
        splits: list[Split] = ["train"] * len(self)
        order = [f for f in self.families if f in by_family]
        order += sorted(set(by_family) - set(order))
        carry = 0.0  # the last family's rounding (up to one task either way) goes to the next
        for fam in order:
            fam_groups = by_family[fam]
            target = heldout_fraction * sum(len(g) for g in fam_groups) + carry
            held = 0
            for g in sorted(fam_groups, key=lambda g: (_id_score(self.ids[g[0]]), g[0])):
                if abs(held + len(g) - target) < abs(held - target):
                    held += len(g)
                    for i in g:
                        splits[i] = "heldout"
            carry = max(-1.0, min(1.0, target - held))
        return splits

    def get(self, task_id: str) -> Task:
        """The task with this id.

        Raises:
            ConfigError: no such task in this suite.
        """
        try:
            return self.task(self._index[task_id])
        except KeyError:
            raise ConfigError(f"suite {self.name!r} has no task {task_id!r}") from None

    def select(
        self, *, split: Split | None = None, family: str | Sequence[str] | None = None
    ) -> list[str]:
        """Task ids in ``split`` and ``family`` (either may be ``None`` for all)."""
        fams = _families(self, family)
        splits = self._splits(HELDOUT_FRACTION) if split is not None else None
        return [
            tid
            for i, tid in enumerate(self.ids)
            if (fams is None or self.family_of(tid) in fams)
            and (splits is None or splits[i] == split)
        ]

    def tasks(
        self, *, split: Split | None = None, family: str | Sequence[str] | None = None
    ) -> list[Task]:
        return [self.get(tid) for tid in self.select(split=split, family=family)]

    def __repr__(self) -> str:
        fams = list(self.families)
        return f"<{type(self).__name__} {self.name!r}: {len(self)} tasks, families {fams}>"


def _families(suite: Suite, family: str | Sequence[str] | None) -> set[str] | None:
    if family is None:
        return None
    fams = {family} if isinstance(family, str) else set(family)
    unknown = fams - set(suite.families)
    if unknown:
        raise ConfigError(
            f"family {sorted(unknown)} is not in suite {suite.name!r}; "
            f"its families are {list(suite.families)}"
        )
    return fams


def register_suite(name: str, suite: Suite | str, *, override: bool = False) -> None:
    """Register a suite instance or a ``"module:Class"`` entry point under ``name``."""
    with _LOCK:
        if (name in _SUITES or name in _BUILTIN) and not override:
            raise ConfigError(
                f"suite {name!r} is already registered; pass override=True to replace it"
            )
        if isinstance(suite, str):
            _BUILTIN[name] = suite
            _SUITES.pop(name, None)
        else:
            _SUITES[name] = suite


def list_suites() -> list[str]:
    return sorted(set(_BUILTIN) | set(_SUITES))


def get_suite(name: str | Suite) -> Suite:
    """The suite registered as ``name`` (built lazily, then cached).

    Raises:
        ConfigError: unknown suite, listing the known ones.
    """
    if isinstance(name, Suite):
        return name
    with _LOCK:
        if name in _SUITES:
            return _SUITES[name]
        if name not in _BUILTIN:
            raise ConfigError(
                f"unknown task suite {name!r}; known suites: {', '.join(list_suites())}"
            )
        mod, _, cls = _BUILTIN[name].partition(":")
        suite = getattr(importlib.import_module(mod), cls)()
        _SUITES[name] = suite
        return suite


def register_tasks(tasks: Iterable[Task]) -> None:
    """Make loaded tasks (e.g. SWE-bench instances) findable by :func:`get_task`."""
    with _LOCK:
        for t in tasks:
            _LOADED_TASKS[t.task_id] = t


def get_task(task_id: str) -> Task:
    """Any task by id: a loaded task, or one of a built-in suite (``<suite>-<family>-<n>``).

    Raises:
        ConfigError: no suite or loaded task has this id.
    """
    if task_id in _LOADED_TASKS:
        return _LOADED_TASKS[task_id]
    prefix = task_id.split("-", 1)[0]
    if prefix in list_suites():
        return get_suite(prefix).get(task_id)
    raise ConfigError(
        f"no task {task_id!r}: not in a built-in suite ({', '.join(list_suites())}) and not loaded "
        "(load it with knowlyr.taskset.load_swebench or register_tasks)"
    )


def sample(
    suite: str | Suite,
    n: int,
    *,
    seed: int = 0,
    split: Split | None = None,
    family: str | Sequence[str] | None = None,
    replace: bool = False,
) -> list[Task]:
    """``n`` tasks drawn from ``suite`` with a seeded RNG (same arguments, same tasks).

    Args:
        suite: a suite name (``coding``, ``conversation``...) or a :class:`Suite`.
        n: how many tasks.
        seed: RNG seed.
        split: ``train``, ``heldout`` or ``None`` (both).
        family: restrict to one family (e.g. ``order_status``) or several.
        replace: draw with replacement (allows ``n`` larger than the pool).

    Raises:
        ConfigError: ``n`` is negative, or larger than the pool without ``replace``.

    Example:
        >>> [t.task_id for t in sample("coding", 2, seed=1, split="train")]  # doctest: +SKIP
        ['coding-median-0171', 'coding-gcd-0060']
    """
    if not isinstance(n, int) or n < 0:
        raise ConfigError(f"n must be a non-negative int, got {n!r}")
    s = get_suite(suite)
    pool = s.select(split=split, family=family)
    rng = random.Random(seed)
    if replace:
        if not pool and n:
            raise ConfigError(
                f"suite {s.name!r} has no task with split={split!r}, family={family!r}"
            )
        ids = [rng.choice(pool) for _ in range(n)]
    else:
        if n > len(pool):
            raise ConfigError(
                f"n={n} is larger than the {len(pool)} tasks of suite {s.name!r} "
                f"with split={split!r}, "
                f"family={family!r}; lower n or pass replace=True"
            )
        ids = rng.sample(pool, n)
    return [s.get(tid) for tid in ids]
