"""A noisy expert and a random agent: worse policies with known flaws, for preference data.

:class:`NoisyExpert` follows an expert but, with probability ``noise`` before each step,
inserts a flawed action instead: a redundant re-read of something already read, a read or
lookup with wrong parameters, an edit that is undone and redone, or a useless tool call.
The expert never sees the noise (it keeps receiving the observations of its own actions),
so the episode still usually succeeds, only less efficiently: the reward engineer's rules
(redundancy, regression, efficiency) should rank it below the expert. Noise is seeded per
``(seed, task_id)``, so a run is reproducible whatever order episodes run in. With
``min_noise=1`` every episode has a flaw (one is inserted before the expert's final action
if chance inserted none): an episode without one is the expert's own, which is what a
comparison of the two needs to leave out.

:class:`RandomAgent` calls random tools of the task's domain with random parameters.

Example:
    >>> import knowlyr
    >>> from knowlyr.agents import NoisyExpert
    >>> env, agent = knowlyr.make("knowlyr/conversation"), NoisyExpert(noise=0.5, seed=1)
    >>> ts = env.reset(seed=0)
    >>> agent.reset(ts.info)
    >>> steps = 0
    >>> while not ts.done:
    ...     ts = env.step(agent.act(ts.observation, ts.info)); steps += 1
    >>> steps >= 2
    True
"""

from __future__ import annotations

import random
import string
from typing import Any

from knowlyr.agents.base import Agent
from knowlyr.agents.scripted import ExpertAgent
from knowlyr.core.env import Action
from knowlyr.core.profile import ToolCategory, get_profile

__all__ = ["GIVE_UP", "NOISE_KINDS", "NoisyExpert", "RandomAgent"]

NOISE_KINDS = ("reread", "wrong_params", "undo_edit", "useless")
#: Opt-in flaw that fails the episode: finishing early (``submit`` before the fix, or a reply
#: without the facts). Not in the default kinds, so the default noisy expert still succeeds.
GIVE_UP = "give_up"
_LOOKS = (ToolCategory.READ, ToolCategory.QUERY, ToolCategory.SEARCH)
_WORDS = (
    "alpha",
    "misc",
    "info",
    "general",
    "notes",
    "zeta",
    "placeholder",
    "other",
    "data",
    "help",
)


def _task_key(info: dict[str, Any] | None) -> tuple[str, str]:
    task = (info or {}).get("task") or {}
    if isinstance(task, dict):
        return str(task.get("task_id", "")), str(task.get("domain", "generic"))
    return str(getattr(task, "task_id", "")), str(getattr(task, "domain", "generic"))


def _corrupt(value: str, rng: random.Random) -> str:
    """A plausible but wrong variant of ``value`` (one character changed, or a wrong path)."""
    if "/" in value or value.endswith((".py", ".yaml", ".md")):
        stem, dot, ext = value.rpartition(".")
        return f"{stem}_old{dot}{ext}" if dot else value + "_old"
    if len(value) < 2:
        return value + rng.choice(string.ascii_uppercase)
    i = rng.randrange(len(value))
    c = value[i]
    pool = (
        string.digits
        if c.isdigit()
        else string.ascii_uppercase
        if c.isupper()
        else string.ascii_lowercase
    )
    repl = rng.choice([x for x in pool if x != c] or ["x"])
    return value[:i] + repl + value[i + 1 :]


class NoisyExpert(Agent):
    """An expert that wastes or fumbles a seeded fraction of its steps.

    Args:
        noise: probability of inserting a flawed action before each expert step.
        seed: with the task id, seeds the noise of an episode.
        expert: the policy to perturb (default :class:`~knowlyr.agents.ExpertAgent`).
        kinds: which flaws to use (subset of ``NOISE_KINDS``, plus the opt-in ``GIVE_UP``
            that ends the episode early and fails it).
        max_noise: at most this many flawed actions per episode (keeps episodes bounded).
        min_noise: at least this many per episode where possible: while fewer were inserted,
            one is inserted before the expert's terminal action (``submit``, ``respond``).
            Not possible before the first expert action, or when no kind is usable.

    Raises:
        ValueError: ``noise`` outside [0, 1], unknown kinds, or ``min_noise`` outside
            ``[0, max_noise]``.

    Example:
        >>> agent = NoisyExpert(noise=0.3, seed=1, min_noise=1)  # a flaw in every episode
    """

    name = "noisy-expert"
    version = "1"

    def __init__(
        self,
        noise: float = 0.3,
        *,
        seed: int = 0,
        expert: Agent | None = None,
        kinds: tuple[str, ...] = NOISE_KINDS,
        max_noise: int = 4,
        min_noise: int = 0,
    ):
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        bad = set(kinds) - {*NOISE_KINDS, GIVE_UP}
        if bad:
            raise ValueError(
                f"unknown noise kinds {sorted(bad)}; choose from {(*NOISE_KINDS, GIVE_UP)}"
            )
        if not 0 <= min_noise <= max_noise:
            raise ValueError(f"min_noise must be in [0, max_noise={max_noise}], got {min_noise}")
        self.noise = noise
        self.seed = seed
        self.expert = expert or ExpertAgent()
        self.kinds = tuple(kinds)
        self.max_noise = max_noise
        self.min_noise = min_noise
        self.reset(None)

    def reset(self, info: dict[str, Any] | None = None) -> None:
        task_id, domain = _task_key(info)
        self.rng = random.Random(f"{self.seed}:{task_id}")
        self.profile = get_profile(domain if domain else "generic")
        self.queue: list[Action] = []
        self.held: Action | None = None  # the expert's next action, held back behind a flaw
        self.history: list[Action] = []
        self.expert_obs = ""
        self.last_was_expert = True
        self.n_noise = 0
        self.noise_log: list[str] = []
        if info is not None:
            self.expert.reset(info)

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if self.last_was_expert:
            self.expert_obs = observation
        if self.queue:
            self.last_was_expert = False
            return self.queue.pop(0)
        if self.held is not None:
            action, self.held = self.held, None
            return self._expert_step(action)
        if self.history and self.n_noise < self.max_noise and self.rng.random() < self.noise:
            actions = self._noise()
            if actions:
                return self._flaw(actions)
        action = self.expert.act(self.expert_obs, info)
        if (
            self.history
            and self.n_noise < self.min_noise
            and self.profile.is_terminal(action["tool"], action.get("params"))
        ):
            actions = self._noise()  # the last chance for the flaws min_noise asks for
            if actions:
                self.held = action
                return self._flaw(actions)
        return self._expert_step(action)

    def _expert_step(self, action: Action) -> Action:
        self.history.append(action)
        self.last_was_expert = True
        return action

    def _flaw(self, actions: list[Action]) -> Action:
        self.n_noise += 1
        self.queue = actions[1:]
        self.last_was_expert = False
        return actions[0]

    def _noise(self) -> list[Action]:
        looks = [
            a for a in self.history if self.profile.category(a["tool"], a.get("params")) in _LOOKS
        ]
        edits = [a for a in self.history if a["tool"] == "edit_file"]
        usable = {
            "reread": bool(looks),
            "wrong_params": bool(looks),
            "undo_edit": bool(edits),
            "useless": True,
            GIVE_UP: True,
        }
        options = [k for k in self.kinds if usable[k]]
        if not options:
            return []
        kind = self.rng.choice(options)
        self.noise_log.append(kind)
        if kind == "reread":
            a = self.rng.choice(looks)
            return [
                {
                    "tool": a["tool"],
                    "params": dict(a.get("params") or {}),
                    "thought": "Let me check that again.",
                }
            ]
        if kind == "wrong_params":
            a = self.rng.choice(looks)
            params = dict(a.get("params") or {})
            keys = [k for k, v in params.items() if isinstance(v, str) and v]
            if not keys:
                return [
                    {"tool": a["tool"], "params": params, "thought": "Let me check that again."}
                ]
            k = self.rng.choice(keys)
            params[k] = _corrupt(params[k], self.rng)
            return [{"tool": a["tool"], "params": params, "thought": a.get("thought", "")}]
        if kind == "undo_edit":
            a = edits[-1]
            p = a["params"]
            undo = {"path": p["path"], "old_str": p["new_str"], "new_str": p["old_str"]}
            return [
                {
                    "tool": "edit_file",
                    "params": undo,
                    "thought": "Maybe the original was right; revert.",
                },
                {
                    "tool": "edit_file",
                    "params": dict(p),
                    "thought": "No, the fix was right; apply it again.",
                },
            ]
        if kind == GIVE_UP:
            return [self._give_up()]
        return [self._useless()]

    def _give_up(self) -> Action:
        tools = self.profile.tool_names
        if "submit" in tools:
            return {"tool": "submit", "params": {}, "thought": "That should be enough; submit."}
        return {
            "tool": "respond",
            "params": {"text": "Sorry, I could not find that information."},
            "thought": "I cannot find it; answer anyway.",
        }

    def _useless(self) -> Action:
        tools = self.profile.tool_names
        if "bash" in tools:
            return {"tool": "bash", "params": {"command": "ls"}, "thought": "List the files."}
        if "knowledge_base" in tools:
            q = self.rng.choice(_WORDS)
            return {
                "tool": "knowledge_base",
                "params": {"query": q},
                "thought": "Search more broadly.",
            }
        if "web_search" in tools:
            q = self.rng.choice(_WORDS)
            return {
                "tool": "web_search",
                "params": {"query": q},
                "thought": "Search the help center.",
            }
        return {"tool": "think", "params": {"thought": "Hmm."}, "thought": "Hmm."}


_TOOL_PARAMS = {
    "read_file": ("path",),
    "write_file": ("path", "content"),
    "edit_file": ("path", "old_str", "new_str"),
    "bash": ("command",),
    "grep": ("pattern",),
    "git": ("args",),
    "think": ("thought",),
    "query_stats": ("order_id",),
    "web_search": ("query",),
    "send_message": ("to", "text"),
    "respond": ("text",),
    "knowledge_base": ("query",),
    "create_note": ("title", "text"),
}
_COMMANDS = ("ls", "pwd", "echo hello", "cat README.md", "python3 --version", "git status")


class RandomAgent(Agent):
    """Random tools of the task's domain with random parameters (a near-zero baseline).

    Args:
        seed: with the task id, seeds each episode.
        tools: OpenAI tool schemas to draw from (default: the domain profile's tools).
    """

    name = "random"
    version = "1"

    def __init__(self, *, seed: int = 0, tools: list[dict[str, Any]] | None = None):
        self.seed = seed
        self.tools = tools
        self.reset(None)

    def reset(self, info: dict[str, Any] | None = None) -> None:
        task_id, domain = _task_key(info)
        self.rng = random.Random(f"random:{self.seed}:{task_id}")
        if self.tools:
            self.params = {
                t["function"]["name"]: tuple(
                    t["function"].get("parameters", {}).get("properties", {})
                )
                for t in self.tools
            }
        else:
            names = get_profile(domain or "generic").tool_names or ["respond"]
            self.params = {n: _TOOL_PARAMS.get(n, ()) for n in names}

    def _value(self, key: str) -> str:
        r = self.rng
        if key == "command":
            return r.choice(_COMMANDS)
        if key == "path":
            return r.choice(("README.md", "main.py", "notes.txt", "src/app.py"))
        if key in ("order_id",):
            return "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(5))
        return " ".join(r.choice(_WORDS) for _ in range(r.randint(1, 4)))

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        tool = self.rng.choice(sorted(self.params))
        params = {k: self._value(k) for k in self.params[tool]}
        return {"tool": tool, "params": params, "thought": "Try something."}
