"""knowlyr-gym: train LLM tool-use agents.

Gymnasium-style environments with a real sandbox, a recorder for other agents' logs, a
content-addressed versioned store, a three-layer process reward model, and SFT / DPO / GRPO
export and training on TRL. This package never imports Prefect; ``tasks/`` and ``flows/``
orchestrate it.

The names below load on first use (PEP 562), so ``import knowlyr`` and the ``knowlyr``
command start fast; importing :mod:`knowlyr.core` registers the built-in ``knowlyr/*``
environments.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# where each public name lives; imported on first access
_HOME = {
    **dict.fromkeys(
        ("AgentEnv", "DomainProfile", "EnvSpec", "EnvWrapper", "TimeStep"), "knowlyr.core"
    ),
    **dict.fromkeys(("get_profile", "list_envs", "make", "register", "spec"), "knowlyr.core"),
    **dict.fromkeys(
        ("AgentInfo", "Observation", "Outcome", "Step", "TaskInfo", "ToolCall", "Trajectory"),
        "knowlyr.trajectory",
    ),
    "KnowlyrError": "knowlyr.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'knowlyr' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
