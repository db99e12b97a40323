"""The three-layer process reward model: rules, LLM judge, human calibration.

Layer 1 (:mod:`knowlyr.reward.rules`) scores every step with deterministic, vectorised rules;
layer 2 (:mod:`knowlyr.reward.judge`) asks an LLM to score each step on rubrics; layer 3
(:mod:`knowlyr.reward.calibration`) maps automatic scores onto human ones.
:class:`~knowlyr.reward.engine.RewardEngine` combines them with the DomainProfile's weights.
"""

from __future__ import annotations

from knowlyr.reward.rubrics import RUBRIC_VERSION, Rubric, all_rubrics, judge_rubrics
from knowlyr.reward.rules import score_rules, step_table

__all__ = [
    "RUBRIC_VERSION",
    "Rubric",
    "all_rubrics",
    "judge_rubrics",
    "score_rules",
    "step_table",
]
