"""The frontier curriculum: a night's attempts split by the champion's held-out success per
family, read from a real store's ``evaluations`` table."""

from __future__ import annotations

import logging

import pytest

from flows.collect import CollectParams
from knowlyr.store import Store
from knowlyr.train.curriculum import family_success, frontier_weights, split_by_weight
from knowlyr.train.evaluation import EvalResult
from knowlyr.train.promotion import compare_and_record


@pytest.mark.parametrize("n", [0, 1, 7, 13, 200, 201])
@pytest.mark.parametrize("k", [1, 3, 13])
def test_equal_weights_split_as_evenly_as_before(n: int, k: int) -> None:
    assert split_by_weight(n, [1.0] * k) == [n // k + (j < n % k) for j in range(k)]


def test_weights_share_tasks_by_largest_remainder() -> None:
    assert split_by_weight(200, [0.1, 1.0, 0.64]) == [11, 115, 74]
    assert sum(split_by_weight(199, [0.3, 0.3, 0.4, 0.17])) == 199
    with pytest.raises(ValueError, match="weights must be positive"):
        split_by_weight(10, [1.0, 0.0])


def test_half_solved_families_weigh_most_and_none_is_dropped() -> None:
    w = frontier_weights({"solved": (23, 23), "half": (12, 24), "fifth": (1, 5), "never": (0, 9)})
    assert w == {"solved": 0.1, "half": 1.0, "fifth": 0.64, "never": 0.1}
    assert frontier_weights({"solved": (4, 4)}, floor=0.25) == {"solved": 0.25}
    with pytest.raises(ValueError, match="floor"):
        frontier_weights({}, floor=0)


def _eval(agent: str, blob: str | None, outcomes: dict[str, list[bool]]) -> EvalResult:
    ids = [f"conversation-{fam}-{i:05d}" for fam, ok in outcomes.items() for i in range(len(ok))]
    ok = [x for v in outcomes.values() for x in v]
    return EvalResult(agent=agent, env_id="knowlyr/conversation", task_ids=ids, successes=ok,
                      rewards=[float(x) for x in ok], steps=[2] * len(ok), checkpoint=blob)  # fmt: skip


@pytest.fixture
def store(tmp_path) -> Store:
    return Store.open(str(tmp_path / "store"))


def test_the_champions_latest_evaluation_gives_its_family_rates(store: Store) -> None:
    champ, other = "c" * 64, "d" * 64
    assert family_success(store, champ) == {}  # no evaluations table yet
    compare_and_record(
        store,
        [_eval("candidate", champ, {"refund": [True, False], "order_status": [True]}),
         _eval("untrained", other, {"refund": [False, False], "order_status": [False]})],
        baseline="untrained", eval_id="night0",
    )  # fmt: skip
    assert family_success(store, champ) == {"refund": (1, 2), "order_status": (1, 1)}
    # a later evaluation of the same checkpoint (as the champion, on another sample) wins
    compare_and_record(
        store,
        [_eval("champion", champ, {"refund": [True, True, False, False], "order_status": [True]}),
         _eval("candidate", other, {"refund": [True] * 4, "order_status": [True]})],
        baseline="champion", eval_id="night1",
    )  # fmt: skip
    assert family_success(store, champ) == {"refund": (2, 4), "order_status": (1, 1)}
    assert family_success(store, "e" * 64) == {}


def test_a_night_on_the_frontier_collects_most_where_the_champion_half_succeeds(
    store: Store,
) -> None:
    from flows.iterate import NIGHTLY_MIX, _on_the_frontier
    from tasks.train import Checkpoint

    champ = Checkpoint(name="c", path="/nowhere", blob="c" * 64, store=store.root)
    collect = CollectParams(mix=NIGHTLY_MIX, episodes=800, attempts=4)
    log = logging.getLogger("test")
    assert _on_the_frontier(collect, store.root, champ, log) is collect  # never evaluated

    rates = {f.family: [True] * 23 for f in NIGHTLY_MIX}
    rates["refund"] = [True] * 11 + [False] * 12
    rates["return_policy"] = [False] * 23
    untrained = {f: [False] * len(v) for f, v in rates.items()}
    compare_and_record(store, [_eval("candidate", champ.blob, rates),
                               _eval("untrained", None, untrained)],
                       baseline="untrained", eval_id="e")  # fmt: skip
    focused = _on_the_frontier(collect, store.root, champ, log)
    weights = {s.family: s.weight for s in focused.sources()}
    assert weights["refund"] == 0.998 and weights["return_policy"] == weights["order_status"] == 0.1
    tasks = dict(zip(weights, split_by_weight(200, list(weights.values())), strict=True))
    assert tasks["refund"] == 91 and sum(tasks.values()) == 200
    # the evaluation's sources are untouched: only the collection is weighted
    assert all(s.weight == 1.0 for s in collect.sources())
