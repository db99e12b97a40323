"""Rubrics: the named dimensions a step is scored on, and which layer scores each.

Rule rubrics (``non_redundancy``, ``non_regression``, ``info_utilization``, ``efficiency``) are
computed by :mod:`knowlyr.reward.rules`; every other rubric is scored by the LLM judge
(:mod:`knowlyr.reward.judge`): the three defaults ``goal_progress``, ``tool_selection`` and
``param_correctness``, plus any rubric a :class:`~knowlyr.core.profile.DomainProfile` adds to
its ``rubric_weights``. Weights come from the profile and are normalised to sum to 1.

Example:
    >>> from knowlyr.core import get_profile
    >>> [r.name for r in judge_rubrics(get_profile("coding"))]
    ['goal_progress', 'tool_selection', 'param_correctness']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowlyr.core.profile import DomainProfile
from knowlyr.errors import ConfigError

__all__ = [
    "JUDGE_RUBRICS",
    "RUBRIC_VERSION",
    "RULE_RUBRICS",
    "Rubric",
    "all_rubrics",
    "judge_rubrics",
    "resolve_weights",
]

#: Bumped whenever a rubric's wording or a rule's definition changes: part of the config hash.
RUBRIC_VERSION = "3"


@dataclass(frozen=True)
class Rubric:
    """One scored dimension. Scores are in [0, 1], higher is better."""

    name: str
    description: str
    layer: Literal["rules", "judge"]


RULE_RUBRICS: dict[str, Rubric] = {
    r.name: r
    for r in (
        Rubric(
            "non_redundancy",
            "0 when the step repeats an identical earlier call (or re-reads a file) with no "
            "state change in between, else 1.",
            "rules",
        ),
        Rubric(
            "non_regression",
            "0 when the step undoes an earlier applied edit of the same file, else 1.",
            "rules",
        ),
        Rubric(
            "info_utilization",
            "1 when the action uses a path, identifier or value the instruction or an earlier "
            "observation revealed, 0 when it ignores everything revealed so far; not scored "
            "when nothing was revealed yet or the action has no salient parameters.",
            "rules",
        ),
        Rubric(
            "efficiency",
            "1 for steps within the task's reference length (TaskInfo reference_steps, else "
            "the median length of the batch's trajectories for the same task, of those "
            "that succeeded when any did), "
            "reference/(index+1) for steps beyond it.",
            "rules",
        ),
        Rubric(
            "command_success",
            "0 when the action failed (a non-zero exit code, an error, a write that wrote "
            "nothing, a traceback in its output), else 1; not scored for message steps, "
            "searches, invalid actions and runs before the first edit (a reproduction is "
            "expected to fail).",
            "rules",
        ),
        Rubric(
            "no_repeated_failure",
            "Scored when an identical call failed earlier in the run: 0 when it fails again, "
            "1 when it now succeeds.",
            "rules",
        ),
        Rubric(
            "edit_tested",
            "Scored on edits (a write tool, or a shell command that writes a file): 1 when "
            "code is run afterwards (a test suite or a script), 0 when the edit is never "
            "checked.",
            "rules",
        ),
        Rubric(
            "last_test_passed",
            "Scored on the run's last execution of a test suite or script: 1 when it passed "
            "(exit code 0, no failure or traceback in its output), else 0.",
            "rules",
        ),
        Rubric(
            "reproduced_first",
            "Scored on the first edit: 1 when the agent ran code (a reproduction or the "
            "tests) before it, else 0.",
            "rules",
        ),
        Rubric(
            "within_limits",
            "Scored on the last step: 0 when the run was stopped by a limit (steps, cost, "
            "time, context window) instead of ending by itself, else 1.",
            "rules",
        ),
        Rubric(
            "valid_format",
            "0 for an action the agent's output did not express validly (no command, two "
            "commands, an unclosed block, an unparseable tool call), else 1.",
            "rules",
        ),
        Rubric(
            "no_setback",
            "0 when the agent's next thought says this step went wrong (the fix still fails, "
            "an unexpected result, a mistake, something broke), else 1; not scored on the "
            "last step.",
            "rules",
        ),
    )
}

JUDGE_RUBRICS: dict[str, Rubric] = {
    r.name: r
    for r in (
        Rubric(
            "goal_progress",
            "How much this step moves the agent toward completing the task.",
            "judge",
        ),
        Rubric(
            "tool_selection",
            "Whether this tool is the right one to call at this point.",
            "judge",
        ),
        Rubric(
            "param_correctness",
            "Whether the parameters are correct and well-formed for what the step is trying "
            "to do (right file, right string, valid syntax).",
            "judge",
        ),
    )
}


def judge_rubrics(profile: DomainProfile) -> list[Rubric]:
    """The rubrics the LLM judge scores for ``profile``: the defaults plus profile additions.

    A rubric the profile weights that is neither a rule rubric nor a default judge rubric is
    an addition; it is judged with its name as description.
    """
    out = list(JUDGE_RUBRICS.values())
    for name in profile.rubric_weights:
        if name not in JUDGE_RUBRICS and name not in RULE_RUBRICS:
            out.append(Rubric(name, name.replace("_", " ").capitalize() + ".", "judge"))
    return out


def all_rubrics(profile: DomainProfile) -> list[Rubric]:
    """Every rubric known for ``profile``: rule rubrics then judge rubrics."""
    return list(RULE_RUBRICS.values()) + judge_rubrics(profile)


def resolve_weights(
    profile: DomainProfile, weights: dict[str, float] | None, rubrics: list[str]
) -> dict[str, float]:
    """Normalised weights over ``rubrics``.

    ``weights`` (if given) overrides the profile's ``rubric_weights``; rubrics without a weight
    get 0; the result sums to 1 over the active rubrics.

    Raises:
        ConfigError: a negative weight, an unknown rubric name, or all active weights zero.
    """
    base = dict(profile.rubric_weights if weights is None else weights)
    known = set(RULE_RUBRICS) | {r.name for r in judge_rubrics(profile)}
    for k, w in base.items():
        if k not in known:
            raise ConfigError(
                f"weights: unknown rubric {k!r}; known rubrics: {', '.join(sorted(known))}"
            )
        if w < 0:
            raise ConfigError(f"weights: rubric {k!r} must be >= 0, got {w}")
    active = {r: float(base.get(r, 0.0)) for r in rubrics}
    total = sum(active.values())
    if total <= 0:
        raise ConfigError(
            f"weights: the active rubrics {rubrics} have total weight {total}; give at least "
            "one of them a positive weight (or add the 'judge' layer for judge rubrics)"
        )
    return {k: v / total for k, v in active.items()}
