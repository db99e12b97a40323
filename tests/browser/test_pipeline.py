"""Browser trajectories through the pipeline: record, dedup in the store, score with the
browser profile's rules, export to SFT, and one short training run of the tiny model."""

from __future__ import annotations

import pytest

import knowlyr
from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.export import export_sft
from knowlyr.reward import RewardEngine
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import get_suite


@pytest.fixture(scope="module")
def episodes(chromium, browser_store):
    suite = get_suite("browser")
    tasks = [suite.tasks(split="train", family=f)[0] for f in ("docs_default", "admin_edit")]
    kw = {"browser": chromium, "store": browser_store}
    expert = collect("knowlyr/browser", ExpertAgent, 2, tasks=tasks, env_kwargs=kw)
    noisy = collect(
        "knowlyr/browser",
        lambda: NoisyExpert(0.5, seed=1, min_noise=1),
        2,
        tasks=tasks,
        env_kwargs=kw,
    )
    rand = collect(
        "knowlyr/browser", lambda: RandomAgent(seed=0), 2, tasks=tasks, max_steps=5, env_kwargs=kw
    )
    return expert, noisy, rand


def test_record_dedup_and_score(episodes, tmp_path):
    expert, noisy, rand = episodes
    trajs = expert + noisy + rand
    store = Store.open(tmp_path / "store")
    assert store.add_trajectories(trajs).new == len(trajs)
    assert store.add_trajectories(expert).new == 0  # the same content is one trajectory
    back = {t.id: t for t in store.read_trajectories()}
    assert set(back) == {t.id for t in trajs}
    assert back[expert[0].id].task.domain == "browser"

    engine = RewardEngine("browser")
    scores = {id(t): r for t, r in zip(trajs, engine.score(trajs), strict=True)}
    rubrics = set(scores[id(expert[0])].rubric_scores)
    # the rule rubrics the browser profile weights (the others are the judge's)
    assert {"non_redundancy", "command_success", "within_limits", "valid_format"} <= rubrics
    for e, n, r in zip(expert, noisy, rand, strict=True):
        assert scores[id(e)].total > scores[id(n)].total > scores[id(r)].total


def test_export_sft_and_a_short_training_run(episodes, tmp_path):
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    expert, _, _ = episodes
    schemas = knowlyr.make("knowlyr/browser").unwrapped.tool_schemas()  # starts no browser
    result = export_sft(expert, system_prompt="Use the browser.", tools=schemas)
    ds = result.dataset
    assert len(ds) == len(expert)
    tools = {t["function"]["name"] for t in ds[0]["tools"]}
    assert {"navigate", "click", "type_text", "read_page", "submit"} <= tools
    assert any("Page: " in m["content"] for m in ds[0]["messages"] if m["role"] != "assistant")

    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path / "sft"),
        per_device_train_batch_size=2,
        max_steps=1,
        max_length=4096,
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    trained = train_sft(ds, model, tok, config)
    assert trained.path.exists() and trained.metrics["train_loss"] > 0
