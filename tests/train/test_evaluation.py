from __future__ import annotations

import math

import pytest
from scipy import stats

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.errors import ConfigError
from knowlyr.train.evaluation import EvalResult, bootstrap_ci, compare_agents, evaluate_agent


def _res(name, successes, rewards=None, tasks=None):
    rewards = rewards if rewards is not None else [float(s) for s in successes]
    return EvalResult(
        agent=name,
        env_id="e",
        task_ids=tasks or [f"t{i}" for i in range(len(successes))],
        successes=list(successes),
        rewards=rewards,
        steps=[2] * len(successes),
    )


def test_evaluate_agent_runs_episodes_in_the_env():
    kw = {"family": "order_status", "split": "heldout"}
    expert = evaluate_agent(
        "knowlyr/conversation", ExpertAgent(), n_episodes=8, seed=3, env_kwargs=kw
    )
    rand = evaluate_agent(
        "knowlyr/conversation", RandomAgent(), n_episodes=8, seed=3, env_kwargs=kw, max_steps=3
    )
    assert expert.success_rate == 1.0 and rand.success_rate == 0.0
    assert expert.task_ids == rand.task_ids  # same seeds, same episodes: paired
    report = compare_agents([rand, expert])
    c = report.comparisons[0]
    assert c.paired and c.fisher_p == pytest.approx(stats.fisher_exact([[8, 0], [0, 8]])[1])
    assert report.leaderboard[0]["agent"] == "expert"


def test_statistics_match_scipy_and_bonferroni_multiplies_by_the_comparisons():
    base = _res(
        "base",
        [0, 1, 0, 0, 1, 0, 0, 0, 1, 0],
        rewards=[0.1, 0.9, 0.2, 0.0, 0.8, 0.3, 0.1, 0.2, 0.7, 0.1],
    )
    a = _res("a", [1] * 10, rewards=[0.9, 0.8, 0.3, 0.7, 0.9, 0.8, 0.2, 0.9, 1.0, 0.6])
    b = _res(
        "b",
        [0, 1, 0, 1, 0, 0, 1, 0, 0, 0],
        rewards=[0.2, 0.7, 0.1, 0.6, 0.3, 0.1, 0.9, 0.2, 0.0, 0.3],
    )
    report = compare_agents([base, a, b])
    ca, cb = report.comparisons
    w = stats.ttest_ind(a.rewards, base.rewards, equal_var=False)
    p = stats.ttest_rel(a.rewards, base.rewards)
    mw = stats.mannwhitneyu(a.rewards, base.rewards, alternative="two-sided")
    assert ca.welch_p == pytest.approx(w.pvalue) and ca.paired_p == pytest.approx(p.pvalue)
    assert ca.mannwhitney_p == pytest.approx(mw.pvalue)
    assert ca.welch_p_adj == pytest.approx(min(1.0, 2 * w.pvalue)) and ca.n_comparisons == 2
    lo, hi = ca.reward_diff_ci
    assert lo < ca.reward_diff < hi and lo > 0
    assert ca.significant and ca.fisher_p_adj < 0.05 and not cb.significant
    assert "| 1 | a |" in report.to_markdown()


def test_degenerate_and_bad_inputs():
    zero = _res("zero", [0] * 5)
    also = _res("also", [0] * 5)
    c = compare_agents([zero, also]).comparisons[0]
    assert c.fisher_p == 1.0 and c.welch_p == 1.0 and math.isnan(c.welch_t) and not c.significant
    with pytest.raises(ConfigError, match="at least two"):
        compare_agents([zero])
    with pytest.raises(ConfigError, match="unique"):
        compare_agents([zero, _res("zero", [1])])
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0])
    assert 1.0 <= lo < 2.5 < hi <= 4.0


def test_evaluations_and_datasets_land_in_the_store(tmp_path, expert_and_random):
    from knowlyr.export import export_sft
    from knowlyr.store import Store
    from knowlyr.train.evaluation import leaderboard_from_store

    store = Store.open(str(tmp_path / "store"))
    kw = {"family": "order_status", "split": "heldout"}
    expert = evaluate_agent(
        "knowlyr/conversation", ExpertAgent(), n_episodes=4, seed=3, env_kwargs=kw
    )
    rand = evaluate_agent(
        "knowlyr/conversation", RandomAgent(), n_episodes=4, seed=3, env_kwargs=kw, max_steps=2
    )
    compare_agents([rand, expert]).to_store(store, eval_id="e1")
    board = leaderboard_from_store(store, eval_id="e1")
    assert board["agent"].to_list() == ["expert", "random"] and board["success_rate"].to_list() == [
        1.0,
        0.0,
    ]
    assert board["episodes"].to_list() == [4, 4]

    good, _ = expert_and_random
    res = export_sft(good)
    m1 = res.to_store(store, name="sft-order-status")
    assert store.count("dataset_rows") == len(good) and store.count("datasets") == 1
    rows = store.read("dataset_rows")
    assert set(rows["kind"].to_list()) == {"sft"} and set(rows["trajectory_id"].to_list()) == {
        t.id for t in good
    }
    m2 = res.to_store(store, name="sft-order-status")  # the same export again adds nothing
    assert store.count("datasets") == 1 and m2.version == m1.version
    res.to_store(store, name="sft-order-status-again")  # another name: its rows are not copied
    assert store.count("dataset_rows") == len(good) and store.count("datasets") == 2


def test_results_split_by_family_and_the_interval_and_test_the_bench_reports():
    from knowlyr.train.evaluation import EvalResult, fisher_greater, wilson_interval

    ids = ["conversation-order_status-00001", "conversation-item_order-00002",
           "conversation-order_status-00003", "not-a-task"]  # fmt: skip
    res = EvalResult("a", "knowlyr/conversation", ids, [True, False, False, True],
                     [1.0, 0.0, 0.0, 1.0], [2, 3, 2, 1], seeds=[5, 6, 7, 8])  # fmt: skip
    parts = res.by_family()
    assert list(parts) == ["order_status", "item_order", "?"]
    assert parts["order_status"].successes == [True, False] and parts["order_status"].seeds == [
        5,
        7,
    ]
    assert parts["?"].task_ids == ["not-a-task"]
    lo, hi = wilson_interval(45, 100)
    assert (round(lo, 3), round(hi, 3)) == (0.356, 0.548)  # the textbook Wilson interval
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert fisher_greater([True] * 30 + [False] * 10, [True] * 10 + [False] * 30) < 1e-4
    assert fisher_greater([True] * 10 + [False] * 30, [True] * 30 + [False] * 10) > 0.99
