"""The three-layer process reward model: rules, LLM judge, human calibration.

Layer 1 (:mod:`knowlyr.reward.rules`) scores every step with deterministic rules vectorised
over whole batches; layer 2 (:mod:`knowlyr.reward.judge`) asks an LLM (Anthropic, OpenAI or a
local Hugging Face model) to score each step on rubrics; layer 3
(:mod:`knowlyr.reward.calibration`) maps automatic scores onto human ones.
:class:`RewardEngine` combines them with the DomainProfile's rubric weights;
:mod:`knowlyr.reward.preferences` builds preference pairs and leaderboards;
:mod:`knowlyr.reward.testing` is a local server speaking the judge APIs, for tests.

Heavy modules (polars, scipy, the SDKs) load on first use: importing this package is cheap.

Example:
    >>> from knowlyr.reward import RewardEngine
    >>> engine = RewardEngine("coding")             # rules only: no network
    >>> rewards = engine.score(trajectories)       # doctest: +SKIP
"""

from __future__ import annotations

from knowlyr.reward.engine import RewardEngine, TrajectoryReward, load_rewards, rewards_frame
from knowlyr.reward.rubrics import RUBRIC_VERSION, Rubric, all_rubrics, judge_rubrics

__all__ = [
    "RUBRIC_VERSION",
    "AgreementReport",
    "CalibrationMap",
    "LLMJudge",
    "PreferencePair",
    "RewardEngine",
    "Rubric",
    "StepJudgement",
    "TrajectoryReward",
    "all_rubrics",
    "build_preferences",
    "calibrate",
    "judge_rubrics",
    "leaderboard",
    "load_annotations",
    "load_rewards",
    "make_backend",
    "rewards_frame",
    "score_rules",
    "step_table",
]

_LAZY = {
    "AgreementReport": "knowlyr.reward.calibration",
    "CalibrationMap": "knowlyr.reward.calibration",
    "calibrate": "knowlyr.reward.calibration",
    "load_annotations": "knowlyr.reward.calibration",
    "LLMJudge": "knowlyr.reward.judge",
    "StepJudgement": "knowlyr.reward.judge",
    "make_backend": "knowlyr.reward.judge",
    "PreferencePair": "knowlyr.reward.preferences",
    "build_preferences": "knowlyr.reward.preferences",
    "leaderboard": "knowlyr.reward.preferences",
    "score_rules": "knowlyr.reward.rules",
    "step_table": "knowlyr.reward.rules",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'knowlyr.reward' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
