"""Policies named by a short string: what CLIs, configs and orchestrators pass around."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["agent_factory", "recorded_prefix"]

#: The name an agent kind's trajectories are recorded under (its ``Agent.name``).
_RECORDED = {"expert": "expert", "noisy": "noisy-expert", "random": "random",
             "checkpoint": "checkpoint:", "openai": "openai", "anthropic": "anthropic"}  # fmt: skip


def agent_factory(
    agent: str, *, seed: int = 0, temperature: float = 0.0, max_new_tokens: int = 96
) -> Callable[[], Any]:
    """A zero-argument factory for the policy named by ``agent``.

    Args:
        agent: ``expert`` (the suite's scripted expert), ``noisy`` or ``noisy:<p>`` (an expert
            that fumbles a fraction ``p`` of its steps, default 0.3), ``noisy:<p>:<kinds>``
            (only these flaws, ``+``-separated, e.g. ``noisy:0.25:give_up``: logs of mixed
            quality), ``random``,
            ``checkpoint:<path>`` (a local Hugging Face checkpoint through the inference
            bridge), ``openai:<model>[@<base_url>]`` (:class:`~knowlyr.agents.OpenAIAgent`:
            OpenAI, or any OpenAI-compatible server such as vLLM at
            ``http://host:8000/v1``) or ``anthropic:<model>[@<base_url>]``
            (:class:`~knowlyr.agents.AnthropicAgent`; the server also from
            ``ANTHROPIC_BASE_URL``).
        seed: the seed of the noisy / random agents, and of a sampling checkpoint.
        temperature: a checkpoint's sampling temperature (0: greedy; collection with several
            attempts per task samples, e.g. 1.0); an API agent's ``temperature`` when above 0.
        max_new_tokens: a checkpoint's generation limit per turn.

    A ``checkpoint:`` factory loads the model once, on its first call; every agent it makes
    shares it (their turns are decoded in one batch), and its ``close()`` frees it.

    Raises:
        ValueError: ``agent`` names none of these.
        ConfigError: an API agent without its API key (checked once, here).

    Example:
        >>> from knowlyr.rollout import collect
        >>> trajs = collect("knowlyr/conversation", agent_factory("noisy:0.5", seed=1), 2)
        >>> len(trajs)
        2
    """
    from knowlyr.agents.noisy import NOISE_KINDS, NoisyExpert, RandomAgent
    from knowlyr.agents.scripted import ExpertAgent

    kind, _, arg = agent.partition(":")
    if kind == "expert":
        return ExpertAgent
    if kind == "noisy":
        p, _, kinds = arg.partition(":")
        try:
            noise = float(p) if p else 0.3
        except ValueError:
            raise ValueError(f"noisy:<p> needs a number p, got {agent!r}") from None
        flaws = tuple(kinds.split("+")) if kinds else NOISE_KINDS
        NoisyExpert(noise, kinds=flaws)  # unknown kinds fail here, naming the valid ones
        return lambda: NoisyExpert(noise, seed=seed, kinds=flaws)
    if kind == "random":
        return lambda: RandomAgent(seed=seed)
    if kind == "checkpoint" and arg:
        import threading

        from knowlyr.agents.inference import AgentInference

        folder = Path(arg)
        name = folder.parent.name if folder.name == "final" else folder.name
        lock, bridge = threading.Lock(), []

        def model_agent() -> Any:
            # one model for every agent of this factory: concurrent episodes' turns are
            # decoded in one batch by its generator
            with lock:
                if not bridge:
                    bridge.append(
                        AgentInference.from_pretrained(
                            arg, max_new_tokens=max_new_tokens, temperature=temperature
                        )
                    )
            return bridge[0].create_agent(name=f"checkpoint:{name}", seed=seed)

        def close() -> None:
            with lock:
                if bridge:
                    bridge.pop().close()

        model_agent.close = close  # type: ignore[attr-defined]
        return model_agent
    if kind in ("openai", "anthropic") and arg:
        from knowlyr.agents.api import split_base_url

        if kind == "openai":
            from knowlyr.agents.openai_agent import OpenAIAgent as api_agent
        else:
            from knowlyr.agents.anthropic_agent import AnthropicAgent as api_agent
        model, base_url = split_base_url(arg)
        api_agent(model, base_url=base_url).close()  # a missing key fails here, not per episode
        # a sampling temperature goes to the API; 0 leaves the server's default decoding
        kwargs = {"temperature": temperature} if temperature > 0 else {}
        return lambda: api_agent(model, base_url=base_url, **kwargs)
    raise ValueError(
        "agent must be 'expert', 'noisy[:p[:kind+kind]]', 'random', 'checkpoint:<path>', "
        f"'openai:<model>[@<base_url>]' or 'anthropic:<model>[@<base_url>]', got {agent!r}"
    )


def recorded_prefix(agent: str) -> str:
    """The prefix of the agent name that ``agent``'s trajectories are recorded under: what an
    export filters them by.

    Example:
        >>> recorded_prefix("noisy:0.25:give_up"), recorded_prefix("checkpoint:runs/a/final")
        ('noisy-expert', 'checkpoint:')
    """
    kind = agent.partition(":")[0]
    if kind not in _RECORDED:
        agent_factory(agent)  # raises the ValueError that names the valid specs
    return _RECORDED[kind]
