"""Comparison, promotion and the champion in a real store; a real checkpoint evaluated."""

from __future__ import annotations

import math

import orjson
import pytest

from knowlyr.export import export_sft
from knowlyr.store import Store
from knowlyr.train.checkpoints import init_policy
from knowlyr.train.evaluation import EvalResult
from knowlyr.train.promotion import (
    champion_json,
    compare_and_record,
    decide_promotion,
    evaluate_checkpoint,
    json_safe,
    record_promotion,
)


def _result(agent: str, wins: int, n: int = 40, checkpoint: str | None = None) -> EvalResult:
    ok = [i < wins for i in range(n)]
    return EvalResult(
        agent=agent,
        env_id="knowlyr/conversation",
        task_ids=[f"t{i}" for i in range(n)],
        successes=ok,
        rewards=[float(x) for x in ok],
        steps=[2] * n,
        checkpoint=checkpoint,
    )


@pytest.fixture
def store(tmp_path) -> Store:
    return Store.open(str(tmp_path / "store"))


def test_comparison_is_recorded_per_episode_and_json_safe(store: Store) -> None:
    rec = compare_and_record(
        store,
        [_result("sft", 36, checkpoint="c" * 64), _result("base", 10)],
        baseline="base",
        eval_id="e1",
    )
    rows = store.read("evaluations")
    assert rows.height == 80 and rec.evaluations.version == store.version("evaluations")
    sft = rows.filter(rows["agent"] == "sft")
    assert sft["seed"].to_list() == list(range(40)) and set(sft["checkpoint"]) == {"c" * 64}
    assert orjson.loads(sft["metrics"][0]) == {"baseline": "base", "env_id": "knowlyr/conversation"}
    assert [r["agent"] for r in rec.leaderboard] == ["sft", "base"]
    orjson.dumps(rec.leaderboard + rec.comparisons)  # no NaN / inf / tuples left
    (c,) = [c for c in rec.comparisons if c["agent"] == "sft"]
    assert c["significant"] and c["success_diff"] == pytest.approx(0.65)


@pytest.mark.parametrize(
    ("wins", "min_improvement", "promoted", "reason"),
    [
        (36, 0.0, True, "success 25.0% -> 90.0%, McNemar p="),
        (36, 0.7, False, "no improvement: success diff +65.0% <= 70.0%"),
        (14, 0.0, False, "not significant: McNemar p="),
        (6, 0.0, False, "no improvement: success diff -10.0% <= 0.0%"),
    ],
)
def test_promotion_needs_a_significant_improvement(store, wins, min_improvement, promoted, reason):
    rec = compare_and_record(
        store, [_result("sft", wins), _result("base", 10)],
        baseline="base", eval_id="e",
    )  # fmt: skip
    (c,) = [c for c in rec.comparisons if c["agent"] == "sft"]
    d = decide_promotion(c, alpha=0.01, min_improvement=min_improvement)
    assert d.promoted is promoted and d.reason.startswith(reason)
    assert (d.success_before, d.success_after) == (0.25, wins / 40)


def _flips(agent: str, before: list[bool], after_flips: tuple[int, int]) -> EvalResult:
    """``before`` with the first ``gained`` failures solved and the first ``lost`` successes
    failed."""
    gained, lost = after_flips
    ok, g, lo = list(before), 0, 0
    for i, x in enumerate(before):
        if not x and g < gained:
            ok[i], g = True, g + 1
        elif x and lo < lost:
            ok[i], lo = False, lo + 1
    return EvalResult(agent=agent, env_id="knowlyr/conversation",
                      task_ids=[f"t{i}" for i in range(len(ok))], successes=ok,
                      rewards=[float(x) for x in ok], steps=[2] * len(ok))  # fmt: skip


def test_a_candidate_on_the_champions_tasks_is_judged_on_the_tasks_that_changed(store):
    """The same 300 tasks, 60% -> 70%: 32 solved anew, 2 lost. Fisher's test treats the two
    samples as independent (p ~ 0.01 two-sided, not below alpha); McNemar's reads the 34 tasks
    that changed (p ~ 1e-7) and promotes. The same rates on other tasks stay with Fisher."""
    from scipy.stats import binomtest, fisher_exact

    before = [i % 10 < 6 for i in range(300)]
    champion = EvalResult(agent="champion", env_id="knowlyr/conversation",
                          task_ids=[f"t{i}" for i in range(300)], successes=before,
                          rewards=[float(x) for x in before], steps=[2] * 300)  # fmt: skip
    cand = _flips("candidate", before, (32, 2))
    assert sum(cand.successes) == 210
    rec = compare_and_record(store, [cand, champion], baseline="champion", eval_id="paired")
    (c,) = rec.comparisons
    fisher = fisher_exact([[210, 90], [180, 120]])[1]
    assert c["success_test"] == "mcnemar" and c["fisher_p"] == pytest.approx(fisher)
    assert c["success_p_adj"] == pytest.approx(binomtest(32, 34, 0.5).pvalue)
    assert fisher > 0.01 and c["significant"]
    d = decide_promotion(c, alpha=0.01)
    assert d.promoted and d.reason.startswith("success 60.0% -> 70.0%, McNemar p=")
    # other tasks (ids differ): not paired, Fisher decides and the same rates do not promote
    other = EvalResult(**{**vars(cand), "task_ids": [f"u{i}" for i in range(300)]})
    rec = compare_and_record(store, [other, champion], baseline="champion", eval_id="unpaired")
    (c,) = rec.comparisons
    assert c["success_test"] == "fisher" and c["mcnemar_p"] is None  # NaN, made JSON-safe
    assert not c["significant"] and c["success_p_adj"] == pytest.approx(fisher)


def test_the_first_champion_needs_a_significant_improvement_too() -> None:
    """0.0% -> 2.7% (p = 0.12) once promoted a warm-up the later nights could not learn from."""
    c = {"success_diff": 0.027, "fisher_p_adj": 0.12, "significant": False, "success_rate": 0.027,
         "baseline_success_rate": 0.0}  # fmt: skip
    first = decide_promotion(c, alpha=0.01, first_champion=True)
    assert not first.promoted
    assert first.reason == (
        "warm-up not promoted (the untrained model is the baseline): not significant: "
        "p=0.12 >= 0.01 (diff +2.7%)"
    )
    won = dict(c, success_diff=0.45, success_rate=0.45, fisher_p_adj=1e-20, significant=True)
    d = decide_promotion(won, alpha=0.01, first_champion=True)
    assert (
        d.promoted and d.reason == "first champion (warm-up): success 0.0% -> 45.0%, p=1e-20 < 0.01"
    )
    assert not decide_promotion(won, alpha=0.01, first_champion=True, min_improvement=0.5).promoted


def test_promotions_are_recorded_and_the_newest_promoted_is_champion(store: Store) -> None:
    assert champion_json(store) is None
    win = decide_promotion(
        {"success_diff": 0.4, "fisher_p_adj": 0.001, "significant": True, "success_rate": 0.9,
         "baseline_success_rate": 0.5}, alpha=0.01,
    )  # fmt: skip
    lose = decide_promotion(
        {"success_diff": 0.1, "fisher_p_adj": None, "significant": False, "success_rate": 0.6,
         "baseline_success_rate": 0.5}, alpha=0.01,
    )  # fmt: skip
    assert lose.p_value == 1.0 and lose.reason == "not significant: p=1 >= 0.01 (diff +10.0%)"
    a = record_promotion(store, win, checkpoint="a" * 64, checkpoint_json='{"n": "a"}',
                         baseline="base", evaluations_version=3)  # fmt: skip
    record_promotion(store, lose, checkpoint="b" * 64, checkpoint_json='{"n": "b"}',
                     baseline="base")  # fmt: skip
    assert a.promotions is not None and store.read("promotions").height == 2
    assert champion_json(store) == '{"n": "a"}'
    assert champion_json(store, excluding="a" * 64) is None
    run = store.runs(stage="promote")[0]
    assert run.params["promoted"] is True and run.params["reason"] == win.reason
    ids = dict(store.read("promotions").select("checkpoint", "promotion_id").iter_rows())
    assert ids == {"a" * 64: "a" * 16 + "-3", "b" * 64: "b" * 16 + "-0"}


def test_json_safe_turns_non_finite_numbers_into_none() -> None:
    assert json_safe({"p": math.nan, "ci": (0.1, math.inf), "n": 3}) == {
        "p": None,
        "ci": [0.1, None],
        "n": 3,
    }


def test_a_checkpoint_folder_is_evaluated_on_held_out_tasks(store: Store, expert_and_random):
    good, _ = expert_and_random
    ckpt = init_policy(store, export_sft(good[:4]).dataset, dataset_name="d", hidden_size=16,
                       num_layers=1)  # fmt: skip
    ids = [t.task.task_id for t in good[:2]]
    res = evaluate_checkpoint(str(ckpt.path), "knowlyr/conversation", ids, 2, name="tiny",
                              max_steps=1, max_new_tokens=4)  # fmt: skip
    assert res.agent == "tiny" and res.task_ids == ids and len(res.successes) == 2
    assert res.trajectories == [] and all(n <= 1 for n in res.steps)
