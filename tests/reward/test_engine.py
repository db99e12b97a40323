"""RewardEngine, config hash, store rows, preference pairs, leaderboard, expert vs noisy expert."""

from __future__ import annotations

import dataclasses
import math

import orjson
import pytest

from knowlyr.core import get_profile
from knowlyr.errors import ConfigError
from knowlyr.reward.calibration import CalibrationMap
from knowlyr.reward.engine import RewardEngine, TrajectoryReward, rewards_frame
from knowlyr.reward.judge import LLMJudge, make_backend
from knowlyr.reward.preferences import build_preferences, leaderboard, preferences_frame
from knowlyr.reward.rubrics import RULE_RUBRICS
from knowlyr.reward.testing import JudgeServer, Reply
from knowlyr.trajectory import AgentInfo, Outcome
from tests.reward.helpers import call, load_fixture, traj


def _clean_and_sloppy():
    # the clean run reproduces the failure, edits, checks the edit with the tests, submits
    clean = traj([call("read_file", path="a.py", output="def f(): pass"),
                  call("bash", command="python -m pytest -q", output="1 failed", exit_code=1),
                  call("edit_file", path="a.py", old="pass", new="return 1"),
                  call("bash", command="python -m pytest -q", output="1 passed"),
                  call("submit")], task_id="t1", agent=AgentInfo(name="good"),
                 outcome=Outcome(success=True))  # fmt: skip
    sloppy = traj([call("read_file", path="a.py", output="def f(): pass"),
                   call("read_file", path="a.py", output="def f(): pass"),
                   call("edit_file", path="a.py", old="pass", new="return 1"),
                   call("edit_file", path="a.py", old="return 1", new="pass"),
                   call("edit_file", path="a.py", old="pass", new="return 1"),
                   call("submit")], task_id="t1", agent=AgentInfo(name="bad"),
                  outcome=Outcome(success=False))  # fmt: skip
    return clean, sloppy


def test_rules_only_scores_without_network():
    clean, sloppy = _clean_and_sloppy()
    rc, rs = RewardEngine("coding").score([clean, sloppy])
    assert rc.total == pytest.approx(1.0) and rc.total > rs.total
    assert len(rs.step_rewards) == 6 and rs.step_rewards[1] < 1.0  # the re-read
    assert rs.rubric_scores["non_redundancy"] < 1.0 and rs.rubric_scores["non_regression"] < 1.0
    assert rs.step_rubrics[3]["non_regression"] == 0.0
    assert rc.rationales == [None] * 5 and rc.success is True


def test_total_formula_counts_shortfall_against_reference():
    clean, sloppy = _clean_and_sloppy()
    eng = RewardEngine("coding", outcome_weight=0.0)  # the process reward alone
    _, rs = eng.score([clean, sloppy])
    w = eng.weights
    # the reference length of task t1 is the median length of its runs that succeeded: the
    # clean run's 5 steps (the failed sloppy run does not count)
    for r, d in zip(rs.step_rewards, rs.step_rubrics, strict=True):
        num = sum(w[k] * v for k, v in d.items() if v is not None)
        den = sum(w[k] for k, v in d.items() if v is not None)
        assert r == pytest.approx(num / den)
    expected = 1 - sum(1 - r for r in rs.step_rewards) / 5
    assert rs.total == pytest.approx(expected)


def test_outcome_weight_and_weights_from_profile():
    clean, sloppy = _clean_and_sloppy()
    eng = RewardEngine("coding")  # the profile's outcome weight
    assert eng.outcome_weight == get_profile("coding").outcome_weight == 0.5
    rc, rs = eng.score([clean, sloppy])
    assert rc.total == pytest.approx(1.0)
    base = RewardEngine("coding", outcome_weight=0.0).score([clean, sloppy])[1].total
    assert rs.total == pytest.approx(0.5 * base)  # failed: outcome term is 0
    assert sum(eng.weights.values()) == pytest.approx(1.0)
    assert set(eng.weights) == set(RULE_RUBRICS)  # rules only: the judge's are left out


def test_config_hash_changes_with_weights_layers_and_calibration():
    a = RewardEngine("coding")
    assert a.config_hash == RewardEngine("coding").config_hash
    b = RewardEngine("coding", weights={"non_redundancy": 1.0, "efficiency": 1.0})
    c = RewardEngine("browser")
    cal = CalibrationMap.fit([0.0, 1.0], [0.2, 0.9])
    d = RewardEngine("coding", calibration=cal)
    assert len({a.config_hash, b.config_hash, c.config_hash, d.config_hash}) == 4
    clean, _ = _clean_and_sloppy()
    assert b.score([clean])[0].config_hash == b.config_hash


def test_engine_config_errors():
    with pytest.raises(ConfigError, match="needs judge="):
        RewardEngine("coding", layers=("rules", "judge"))
    with pytest.raises(ConfigError, match="layers"):
        RewardEngine("coding", layers=("vibes",))
    with pytest.raises(ConfigError, match="unknown rubric"):
        RewardEngine("coding", weights={"speed": 1.0})
    with pytest.raises(ConfigError, match="total weight 0"):
        RewardEngine("coding", weights={"goal_progress": 1.0})  # a judge rubric, rules only


def test_rules_and_judge_layers_combined():
    clean, sloppy = _clean_and_sloppy()
    with JudgeServer() as server:
        server.script(*[Reply.scores({"goal_progress": 10, "tool_selection": 10,
                                      "param_correctness": 10}, "fine")] * 5,
                      *[Reply.scores({"goal_progress": 2, "tool_selection": 3,
                                      "param_correctness": 4}, "meh")] * 4,
                      Reply.malformed(), Reply.malformed())  # fmt: skip
        backend = make_backend("openai:j", base_url=server.openai_url, api_key="k")
        judge = LLMJudge(backend, profile="coding", concurrency=1, max_retries=1)
        eng = RewardEngine("coding", layers=("rules", "judge"), judge=judge)
        rc, rs = eng.score([clean, sloppy])
        # sloppy's first step is the same prompt as clean's first step: judged once
        assert len(server.requests) == 5 + 4 + 2
    assert eng.config["judge_model"] == "openai:j"
    assert rc.rubric_scores["goal_progress"] == 1.0 and rc.rationales == ["fine"] * 5
    # the last step's judge answer was unparsable twice: a failure, its judge rubrics absent
    assert rs.step_rubrics[5]["goal_progress"] is None and "unparsable" in rs.judge_errors[5]
    assert rs.step_rewards[5] is not None  # the rules still score it
    # and the total says it lacks the judge layer there; the clean run's is complete
    assert rs.missing_layers == ["judge"] and rc.missing_layers == []
    assert rc.total > rs.total
    assert sum(eng.weights.values()) == pytest.approx(1.0)
    assert len(eng.weights) == 3 + len(RULE_RUBRICS)


def test_calibration_applies_to_trajectory_totals():
    clean, sloppy = _clean_and_sloppy()
    cal = CalibrationMap.fit([0.0, 0.5, 1.0], [0.0, 0.1, 0.3], level="trajectory")
    rc, rs = RewardEngine("coding", calibration=cal).score([clean, sloppy])
    assert rc.total_raw == pytest.approx(1.0) and rc.total == pytest.approx(0.3)
    assert rs.total == pytest.approx(cal.apply_one(rs.total_raw))


def test_store_rows_and_frame():
    clean, sloppy = _clean_and_sloppy()
    rewards = RewardEngine("coding").score([clean, sloppy])
    df = rewards_frame(rewards)
    assert df.height == 2
    assert {"trajectory_id", "config_hash", "total", "per_step", "per_rubric"} <= set(df.columns)
    assert df["per_step"].to_list()[1][1] < 1.0


def _scored_batch():
    clean, sloppy = _clean_and_sloppy()
    return RewardEngine("coding").score([clean, sloppy] * 50)  # one block for 100 rewards


def test_step_rubrics_read_once_become_the_rewards_own_dicts():
    r = _scored_batch()[1]
    first = r.step_rubrics
    assert type(first) is list and all(type(d) is dict for d in first)
    assert r.step_rubrics is first  # kept: the same list on the next read
    first[1]["non_redundancy"] = 0.25
    assert r.step_rubrics[1]["non_redundancy"] == 0.25
    assert first[1]["non_redundancy"] == 0.25 and first[0]["info_utilization"] is None


def test_to_dict_and_to_row_give_asdicts_values_without_keeping_dicts():
    r = _scored_batch()[1]
    d, row = r.to_dict(), r.to_row()
    assert type(vars(r)["step_rubrics"]) is not list  # read for them, not kept
    assert d == dataclasses.asdict(r)  # asdict reads the field: now it is kept
    assert type(vars(r)["step_rubrics"]) is list
    assert orjson.loads(row["step_rubrics"]) == d["step_rubrics"]
    d["step_rubrics"][0]["efficiency"] = -1.0  # a copy, like asdict's
    assert r.step_rubrics[0]["efficiency"] != -1.0


def test_a_copied_or_pickled_reward_holds_its_own_rows_only():
    import copy
    import pickle

    rewards = _scored_batch()
    r = rewards[3]
    alone = pickle.dumps(TrajectoryReward(**r.to_dict()))
    data = pickle.dumps(r)
    assert len(data) <= len(alone) + 64  # not the batch's block of 100 trajectories
    back = pickle.loads(data)
    assert back == r and type(vars(back)["step_rubrics"]) is list
    assert copy.deepcopy(rewards[4]) == rewards[4]
    assert dataclasses.replace(rewards[5], total=0.0).step_rubrics == rewards[5].step_rubrics


def test_a_reward_kept_alone_keeps_its_runs_rows_not_the_batchs():
    clean, sloppy = _clean_and_sloppy()
    batch = [clean, sloppy] * 600
    rewards = RewardEngine("coding").score(batch)
    shared = vars(rewards[1100])["step_rubrics"].block  # rewards 1024..1199 share a copy
    assert shared.scores.base is None and shared.scored.base is None
    assert len(shared.scores) == sum(len(t.steps) for t in batch[1024:])
    # each reward reads its own rows of the shared copy: those of the pair scored alone
    pair = RewardEngine("coding").score([clean, sloppy])
    for i in (0, 1, 1022, 1023, 1024, 1025, 1198, 1199):
        assert rewards[i].step_rubrics == pair[i % 2].step_rubrics, i


def test_store_round_trip(tmp_path):
    import knowlyr.store as store_mod

    store = store_mod.Store(str(tmp_path / "store"))
    clean, sloppy = _clean_and_sloppy()
    eng = RewardEngine("coding")
    eng.save(store, eng.score([clean, sloppy]))
    eng.save(store, eng.score([clean, sloppy]))  # the same config again: nothing new
    other = RewardEngine("coding", weights={"non_redundancy": 1.0})
    other.save(store, other.score([clean, sloppy]))  # new weights: a new config hash
    df = store.read("rewards")
    assert df.height == 4 and df["config_hash"].n_unique() == 2
    pairs = build_preferences(eng.score([clean, sloppy]))
    store.append("preferences", preferences_frame(pairs))
    assert store.read("preferences")["chosen_id"].to_list() == [clean.id]


def test_preferences_margin_and_reason():
    clean, sloppy = _clean_and_sloppy()
    other = traj([call("read_file", path="b.py"), call("submit")], task_id="t2")
    rewards = RewardEngine("coding").score([clean, sloppy, other, other])
    pairs = build_preferences(rewards, min_margin=0.05)
    assert len(pairs) == 1
    p = pairs[0]
    assert (p.chosen_id, p.rejected_id, p.task_id) == (clean.id, sloppy.id, "t1")
    assert p.margin == pytest.approx(p.chosen_reward - p.rejected_reward) and p.margin >= 0.05
    assert "chosen succeeded, rejected failed" in p.reason and "edit_tested" in p.reason
    assert build_preferences(rewards, min_margin=0.99) == []
    with pytest.raises(ConfigError, match="min_margin"):
        build_preferences(rewards, min_margin=-1)


def test_leaderboard_by_agent():
    clean, sloppy = _clean_and_sloppy()
    goods = [traj([call("bash", command=f"echo {i}")], task_id=f"g{i}", agent=AgentInfo(name="good"),
                  outcome=Outcome(success=i % 4 != 0)) for i in range(8)]  # fmt: skip
    rewards = RewardEngine("coding").score([clean, sloppy, *goods])
    rows = leaderboard(rewards, by=("agent",), n_boot=200)
    assert [r.key["agent"] for r in rows] == ["good", "bad"]
    good = rows[0]
    assert good.n == 9 and good.n_outcomes == 9
    assert good.success_rate == pytest.approx(7 / 9)
    assert good.success_low < good.success_rate < good.success_high
    assert good.reward_low <= good.mean_reward <= good.reward_high
    assert rows[1].n == 1 and math.isclose(rows[1].reward_low, rows[1].mean_reward)
    with pytest.raises(ConfigError, match="leaderboard by"):
        leaderboard(rewards, by=("colour",))


def test_fixture_logs_score_end_to_end():
    trajs = load_fixture("openhands/resolver_output.jsonl") + load_fixture(
        "swe_agent/pydicom__pydicom-1458.traj"
    )
    rewards = RewardEngine("coding").score(trajs)
    assert all(r.total is not None and 0 <= r.total <= 1 for r in rewards)
    dark = rewards[1]
    assert dark.step_rubrics[14]["non_redundancy"] == 0.0  # the re-open named in test_rules


@pytest.mark.parametrize(
    ("env_id", "domain", "n"),
    [
        ("knowlyr/sandbox", "coding", 16),
        ("knowlyr/advisory", "advisory", 30),
        ("knowlyr/discussion", "discussion", 30),
        ("knowlyr/conversation", "conversation", 40),
    ],
)
def test_expert_outranks_noisy_expert(env_id, domain, n):
    from knowlyr import agents, rollout

    expert = rollout.collect(env_id, agents.ExpertAgent, n, seed=0, concurrency=2)
    noisy = rollout.collect(env_id, lambda: agents.NoisyExpert(noise=0.3, seed=1), n, seed=0,
                            concurrency=2)  # fmt: skip
    rewards = RewardEngine(domain).score(expert + noisy)
    pairs = [
        (rewards[i].total, rewards[n + i].total)
        for i in range(n)
        if expert[i].id != noisy[i].id  # noise actually changed the episode
    ]
    assert expert[0].task.task_id == noisy[0].task.task_id
    assert len(pairs) >= 5
    wins = sum(e > o for e, o in pairs)
    assert wins >= 0.95 * len(pairs), f"expert ahead in {wins}/{len(pairs)} pairs"
