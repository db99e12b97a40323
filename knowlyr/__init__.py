"""knowlyr-gym: train LLM tool-use agents.

Gymnasium-style environments with a real sandbox, a recorder for other agents' logs, a
content-addressed versioned store, a three-layer process reward model, and SFT / DPO / GRPO
export and training on TRL. This package never imports Prefect; ``tasks/`` and ``flows/``
orchestrate it.
"""

from __future__ import annotations

from knowlyr import envs as _envs  # noqa: F401  registers the built-in knowlyr/* environments
from knowlyr.core import (
    AgentEnv,
    DomainProfile,
    EnvSpec,
    EnvWrapper,
    TimeStep,
    get_profile,
    list_envs,
    make,
    register,
    spec,
)
from knowlyr.errors import KnowlyrError
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)

__version__ = "0.1.0"

__all__ = [
    "AgentEnv",
    "AgentInfo",
    "DomainProfile",
    "EnvSpec",
    "EnvWrapper",
    "KnowlyrError",
    "Observation",
    "Outcome",
    "Step",
    "TaskInfo",
    "TimeStep",
    "ToolCall",
    "Trajectory",
    "__version__",
    "get_profile",
    "list_envs",
    "make",
    "register",
    "spec",
]
