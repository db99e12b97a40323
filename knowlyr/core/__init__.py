"""The MDP protocol: environments, time steps, wrappers, the registry and domain profiles."""

from __future__ import annotations

from knowlyr.core.env import Action, AgentEnv, EnvWrapper, TimeStep, error_timestep, parse_action
from knowlyr.core.profile import (
    BUILTIN_PROFILES,
    DomainProfile,
    OutcomeSpec,
    ToolCategory,
    ToolSpec,
    get_profile,
    list_profiles,
    load_profile,
)
from knowlyr.core.registry import EnvSpec, list_envs, make, register, spec
from knowlyr.core.wrappers import (
    ActionCheckWrapper,
    EpisodeStatisticsWrapper,
    MaxStepsWrapper,
    ObservationTruncateWrapper,
    RecorderWrapper,
    RewardWrapper,
    TimeoutWrapper,
)

__all__ = [
    "BUILTIN_PROFILES",
    "Action",
    "ActionCheckWrapper",
    "AgentEnv",
    "DomainProfile",
    "EnvSpec",
    "EnvWrapper",
    "EpisodeStatisticsWrapper",
    "MaxStepsWrapper",
    "ObservationTruncateWrapper",
    "OutcomeSpec",
    "RecorderWrapper",
    "RewardWrapper",
    "TimeStep",
    "TimeoutWrapper",
    "ToolCategory",
    "ToolSpec",
    "error_timestep",
    "get_profile",
    "list_envs",
    "list_profiles",
    "load_profile",
    "make",
    "parse_action",
    "register",
    "spec",
]

from knowlyr import envs as _envs  # noqa: F401  registers the built-in knowlyr/* envs
