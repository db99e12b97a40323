"""The browser suite: size, seeded splits, deterministic tasks; expert, noisy and random agents."""

from __future__ import annotations

from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.browser.server import get_site
from knowlyr.browser.suite import FAMILY_SITES, BrowserSuite
from knowlyr.rollout import collect
from knowlyr.taskset import get_suite, sample, split_of


def test_the_suite_has_seeded_train_and_heldout_splits_over_every_family():
    suite = get_suite("browser")
    assert len(suite) >= 150 and set(suite.families) == set(FAMILY_SITES)
    held = suite.select(split="heldout")
    assert 0.15 * len(suite) <= len(held) <= 0.25 * len(suite)
    for family in suite.families:
        assert suite.select(split="heldout", family=family)
        assert suite.select(split="train", family=family)
    # a fresh suite object (another process) builds the same tasks and the same splits
    again = BrowserSuite()
    assert again.select(split="heldout") == held
    assert again.get(held[0]) == suite.get(held[0])
    assert all(split_of(tid) == "heldout" for tid in held)
    by_text: dict[str, set[str]] = {}
    for tid in suite.ids:  # the same question (on another seed's site) is never on both sides
        by_text.setdefault(suite.get(tid).instruction, set()).add(suite.split_of(tid))
    assert all(len(splits) == 1 for splits in by_text.values())
    assert [t.task_id for t in sample("browser", 3, seed=4, split="heldout")] == [
        t.task_id for t in sample("browser", 3, seed=4, split="heldout")
    ]


def test_a_site_state_is_a_function_of_its_seed():
    for name in ("shop", "docs", "admin"):
        a, b = get_site(name), get_site(name)
        a.reset(7)
        b.reset(7)
        assert a.state == b.state
        b.reset(8)
        assert a.state != b.state


def test_expert_succeeds_noisy_works_and_random_fails(chromium, browser_store):
    tasks = sample("browser", 3, seed=1, split="heldout")
    kw = {"browser": chromium, "store": browser_store}
    expert = collect("knowlyr/browser", ExpertAgent, len(tasks), tasks=tasks, env_kwargs=kw)
    assert [t.outcome.success for t in expert] == [True] * len(tasks)
    noisy = collect(
        "knowlyr/browser",
        lambda: NoisyExpert(0.5, seed=3, min_noise=1),
        3,
        tasks=tasks[:3],
        env_kwargs=kw,
    )
    assert all(not (t.outcome.reason or "").startswith("error") for t in noisy)
    assert all(len(n.steps) > len(e.steps) for n, e in zip(noisy, expert, strict=False))
    rand = collect(
        "knowlyr/browser",
        lambda: RandomAgent(seed=2),
        3,
        tasks=tasks[:3],
        max_steps=6,
        env_kwargs=kw,
    )
    assert [t.outcome.success for t in rand] == [False] * 3
    assert all(not (t.outcome.reason or "").startswith("error") for t in rand)
