"""knowlyr-gym: train LLM tool-use agents.

Gymnasium-style environments with a real sandbox, a recorder for other agents' logs, a
content-addressed versioned store, a three-layer process reward model, and SFT / DPO / GRPO
export and training on TRL. This package never imports Prefect; ``tasks/`` and ``flows/``
orchestrate it.

The names below load on first use (PEP 562), so ``import knowlyr`` and the ``knowlyr``
command start fast; importing :mod:`knowlyr.core` registers the built-in ``knowlyr/*``
environments. Once ``gymnasium`` is imported too (before or after this package), they are in
its registry as ``knowlyr/<name>-v0``: ``gymnasium.make("knowlyr/conversation-v0")``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
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


# Gymnasium registration. Gymnasium 1.x loads no plugin entry points: a package registers its
# envs when it is imported. Importing gymnasium here would import numpy into every `knowlyr`
# command, so the ids (string entry points, nothing built) go into its registry when both are
# imported: now if gymnasium already is, else right after gymnasium's own import.
# tests/core/test_gym_adapter.py checks this list against knowlyr.envs.
GYMNASIUM_ENVS = ("advisory", "browser", "conversation", "discussion", "engineering", "sandbox")


def _register_gymnasium_envs() -> None:
    import gymnasium

    for name in GYMNASIUM_ENVS:
        gid = f"knowlyr/{name}-v0"
        if gid not in gymnasium.registry:
            gymnasium.register(
                id=gid,
                entry_point="knowlyr.core.gym_adapter:GymnasiumEnv",
                kwargs={"env": f"knowlyr/{name}"},
                disable_env_checker=True,
            )


class _AfterGymnasiumImport:
    """A one-shot import hook: lets ``gymnasium`` import as usual, then registers our ids."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _register_gymnasium_envs()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


if "gymnasium" in sys.modules:
    _register_gymnasium_envs()
elif not any(isinstance(f, _AfterGymnasiumImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterGymnasiumImport())
