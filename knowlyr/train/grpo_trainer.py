"""TRL's GRPOTrainer in knowlyr environments: online multi-turn rollouts, step-level advantages.

:func:`environment_factory_for` turns a registered knowlyr env into the class TRL's
``environment_factory`` expects: one method per env tool (schema from the env's tool
schemas), ``reset(**row)`` starting an episode on the row's ``task_id`` (a
:func:`~knowlyr.export.export_grpo` dataset has one), and ``get_reward()`` returning the
episode's outcome score. The trainer then generates, calls the tools in the env, scores and
updates: GRPO in our environments through TRL's own machinery.

**Step-level advantage** (``step_advantage=True``): the completion of a multi-turn rollout is
assistant turns separated by tool results. Each assistant turn's tokens get the trajectory
advantage times the step's weight from its step reward
(:func:`~knowlyr.export.common.normalized_step_weights`, mean 1), instead of one advantage for
the whole completion.

**Reading the logs.** ``reward`` is the mean episode score of a step's rollouts. Besides TRL's
metrics the trainer logs ``env/finished`` (the fraction of rollouts whose episode ended: a
reply was sent or the step limit hit), ``env/success`` and ``env/steps`` (env steps per
rollout). A rollout whose episode never ends scores 0, so ``reward`` 0 with ``env/finished``
0 means the policy never completes an episode (no parseable tool call, or
``max_completion_length`` too small to hold the tool results); the trainer warns about it.
When every rollout of a group scores the same (``frac_reward_zero_std`` 1), the group-relative
advantages are 0 and nothing is learned from it: GRPO needs a policy that is *partly* right.
The logged ``loss`` stays near 0 even while the policy learns: on-policy (``num_iterations=1``)
with ``beta=0`` it is minus the token-weighted mean of group-centred advantages; ``grad_norm``
and ``reward`` show the learning.

Example:
    >>> Env = environment_factory_for("knowlyr/conversation", env_kwargs={"family": "order_status"})
    >>> trainer = KnowlyrGRPOTrainer(model=model, args=KnowlyrGRPOConfig(output_dir="out"),
    ...                              train_dataset=export_grpo(trajs).dataset, processing_class=tok,
    ...                              environment_factory=Env)  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, ClassVar

import torch
from trl import GRPOTrainer

from knowlyr.core.registry import make
from knowlyr.errors import TrainError
from knowlyr.export.common import normalized_step_weights
from knowlyr.train._defaults import lora_config
from knowlyr.train.grpo_config import KnowlyrGRPOConfig

__all__ = [
    "KnowlyrGRPOConfig",
    "KnowlyrGRPOTrainer",
    "KnowlyrToolEnvironment",
    "environment_factory_for",
    "step_level_advantages",
]

logger = logging.getLogger(__name__)

_PY_TYPES = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


class KnowlyrToolEnvironment:
    """Base of the classes :func:`environment_factory_for` builds (one knowlyr env each)."""

    env_id: ClassVar[str] = ""
    env_kwargs: ClassVar[dict[str, Any]] = {}
    max_steps: ClassVar[int] = 8

    def __init__(self) -> None:
        self.env = make(self.env_id, max_steps=self.max_steps, **self.env_kwargs)
        self.step_rewards: list[float] = []
        self.outcome: dict[str, Any] | None = None
        self.done = False

    def reset(self, **row: Any) -> None:
        """Start an episode on ``row["task_id"]`` (the prompt already holds the task)."""
        self.step_rewards = []
        self.outcome = None
        self.done = False
        self.env.reset(task=row.get("task_id"))

    def _call(self, tool: str, params: dict[str, Any]) -> str:
        if self.done:
            return "Error: the episode is over."
        ts = self.env.step(
            {"tool": tool, "params": {k: v for k, v in params.items() if v is not None}}
        )
        self.step_rewards.append(float(ts.reward))
        if ts.done:
            self.done = True
            self.outcome = ts.info.get("outcome") or {"success": False, "score": 0.0}
        return ts.observation

    def get_reward(self) -> float:
        """The episode's outcome score (0 when it did not finish)."""
        if not self.outcome:
            return 0.0
        score = self.outcome.get("score")
        return float(score) if score is not None else float(bool(self.outcome.get("success")))

    @property
    def success(self) -> bool:
        """Whether the episode finished and succeeded."""
        return bool(self.outcome and self.outcome.get("success"))


# names of the environment protocol and of KnowlyrToolEnvironment's own attributes
_RESERVED = frozenset(
    {"reset", "get_reward", "success", "done", "env", "outcome", "step_rewards"}
    | {"env_id", "env_kwargs", "max_steps"}
)


def _tool_method(schema: dict[str, Any]) -> Any:
    fn_schema = schema.get("function", schema)
    name = fn_schema["name"]
    params = fn_schema.get("parameters", {}).get("properties", {})
    required = set(fn_schema.get("parameters", {}).get("required", []))

    def method(self: KnowlyrToolEnvironment, **kwargs: Any) -> str:
        return self._call(name, kwargs)

    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    doc_args = []
    for p, spec in params.items():
        typ = _PY_TYPES.get(spec.get("type", "string"), str)
        if p in required:
            sig.append(
                inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typ)
            )
            annotations[p] = typ
        else:
            sig.append(
                inspect.Parameter(
                    p, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=typ | None
                )
            )
            annotations[p] = typ | None
        doc_args.append(f"    {p}: {spec.get('description') or p}")
    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(sig, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    desc = fn_schema.get("description") or f"The {name} tool."
    method.__doc__ = desc + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
    return method


def environment_factory_for(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    max_steps: int = 8,
) -> type[KnowlyrToolEnvironment]:
    """A class for TRL's ``environment_factory`` that runs episodes of ``env_id``.

    Args:
        env_id: a registered knowlyr env id.
        env_kwargs: arguments for the env (e.g. ``{"family": "order_status"}``).
        tools: tool schemas to expose (default: all of the env's tools; pass the schemas of
            an export to show the model exactly what it was trained with).
        max_steps: step limit of an episode.
    """
    if max_steps < 1:
        raise TrainError(f"max_steps must be positive, got {max_steps}")
    if tools is None:
        probe = make(env_id, **(env_kwargs or {}))
        schemas = getattr(probe.unwrapped, "tool_schemas", None)
        if not callable(schemas):
            raise TrainError(
                f"{env_id} does not expose tool_schemas(); pass tools= (OpenAI function schemas)"
            )
        tools = schemas()
        probe.close()
    members: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs or {}),
        "max_steps": max_steps,
    }
    for schema in tools:
        m = _tool_method(schema)
        if m.__name__ in _RESERVED or m.__name__.startswith("_"):
            raise TrainError(
                f"tool name {m.__name__!r} clashes with the environment protocol; rename the tool"
            )
        members[m.__name__] = m
    name = (
        "".join(part.capitalize() for part in env_id.replace("-", "/").split("/")) + "Environment"
    )
    return type(name, (KnowlyrToolEnvironment,), members)


def step_level_advantages(
    advantages: torch.Tensor,
    token_mask: torch.Tensor,
    step_rewards: list[list[float]],
    *,
    mix: float,
) -> torch.Tensor:
    """Per-token advantages: each assistant turn gets ``advantage * step weight``.

    Args:
        advantages: ``(B,)`` trajectory advantages.
        token_mask: ``(B, T)``, 1 on tokens the model generated (0 on tool results and padding);
            each maximal run of 1s is one assistant turn.
        step_rewards: per row, the reward of each step (tool call) in order.
        mix: see :func:`~knowlyr.export.common.normalized_step_weights`.

    Returns:
        ``(B, T)`` advantages (the trajectory advantage where a row has no step rewards).
    """
    out = advantages[:, None].expand(token_mask.shape).clone().float()
    for i, rewards in enumerate(step_rewards):
        if not rewards:
            continue
        weights = normalized_step_weights(rewards, mix=mix)
        row = token_mask[i].tolist()
        turn, prev = -1, 0
        for t, m in enumerate(row):
            if m and not prev:
                turn += 1
            prev = m
            if m:
                w = weights[turn] if turn < len(weights) else weights[-1]
                out[i, t] = advantages[i] * w
    return out


def _is_compact_template(tok: Any) -> bool:
    from knowlyr.train.models import chat_template

    return getattr(tok, "chat_template", None) == chat_template("compact_tools")


def _vllm_needs_a_folder(config: Any, model: Any) -> None:
    """vLLM colocate loads the model from ``model.name_or_path``: a model built in memory has
    none. ``generation_backend="auto"`` then falls back to continuous batching (logged);
    otherwise it is a :class:`TrainError`."""
    import os

    if model is None or isinstance(model, str):
        return
    name = str(getattr(model, "name_or_path", "") or "")
    if name and (not os.path.isdir(name) or os.path.isfile(os.path.join(name, "config.json"))):
        return  # a hub id or a saved folder
    if getattr(config, "generation_backend", None) != "auto":
        raise TrainError(
            "vLLM colocate loads the model from model.name_or_path, and this model has no saved "
            "folder; save_pretrained it and load it from there, or set "
            "generation_backend='continuous_batching'"
        )
    logger.warning(
        "GRPO generates with continuous_batching instead of vLLM: vLLM loads the model from a "
        "saved folder and this one was built in memory (save_pretrained it to use vLLM)"
    )
    config.use_vllm = False
    config.use_transformers_continuous_batching = True


class KnowlyrGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with step-level advantages and LoRA from the config."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        if getattr(config, "lora_r", None) and kwargs.get("peft_config") is None:
            kwargs["peft_config"] = lora_config(
                config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
            )
        tok = kwargs.get("processing_class")
        if tok is not None and _is_compact_template(tok):
            # compact_tools renders assistant turns exactly like Qwen: parse them the Qwen way
            from trl.chat_template_utils import qwen3_template

            if getattr(tok, "response_template", None) is None:
                tok.response_template = qwen3_template
        if getattr(config, "use_vllm", False) and getattr(config, "vllm_mode", "") == "colocate":
            _vllm_needs_a_folder(config, kwargs.get("model", args[0] if args else None))
        self._step_advantage = bool(getattr(config, "step_advantage", False))
        self._warned_unfinished = False
        self._step_mix = float(getattr(config, "step_advantage_mix", 0.5))
        super().__init__(*args, **kwargs)

    def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
        # TRL's continuous-batching path casts the model to bf16/fp16 in place before
        # generate_batch (accelerate's autocast forward needs a cache in the compute dtype) and
        # never back, which would leave fp32 master weights rounded to bf16 for the rest of
        # training. Keep the fp32 tensors aside and put them back after generating.
        mixed = self.args.bf16 or self.args.fp16
        if not (self.use_transformers_continuous_batching and mixed):
            return super()._generate_single_turn(*args, **kwargs)
        model = self.accelerator.unwrap_model(self.model)
        params = [  # Module.to() swaps .data of a parameter and of its grad
            (p, p.data, p.grad, None if p.grad is None else p.grad.data)
            for p in model.parameters()
            if p.dtype == torch.float32
        ]
        buffers = [
            (m, name, b)
            for m in model.modules()
            for name, b in m._buffers.items()
            if b is not None and b.dtype == torch.float32
        ]
        try:
            return super()._generate_single_turn(*args, **kwargs)
        finally:
            for p, data, grad, grad_data in params:
                p.grad = None  # the cast one: its dtype would not match the fp32 data
                p.data = data
                if grad is not None:
                    grad.data = grad_data
                    p.grad = grad
            for m, name, b in buffers:
                m._buffers[name] = b

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        envs = getattr(self, "environments", None)
        if envs:
            self._log_episodes(envs)
        if not self._step_advantage or not envs or "tool_mask" not in output:
            return output
        adv = output["advantages"]
        if adv.dim() != 1 or len(envs) != adv.shape[0]:
            return output  # multi-process slicing: keep TRL's trajectory-level advantages
        mask = output["completion_mask"] * output["tool_mask"]
        rewards = [list(getattr(e, "step_rewards", [])) for e in envs]
        output["advantages"] = step_level_advantages(adv, mask, rewards, mix=self._step_mix)
        return output

    def _log_episodes(self, envs: list[Any]) -> None:
        """Log how the batch's episodes went; warn once when none of them finished."""
        ours = [e for e in envs if isinstance(e, KnowlyrToolEnvironment)]
        if not ours:
            return
        mode = "train" if self.model.training else "eval"
        n = len(ours)
        finished = sum(e.done for e in ours)
        self._metrics[mode]["env/finished"].append(finished / n)
        self._metrics[mode]["env/success"].append(sum(e.success for e in ours) / n)
        self._metrics[mode]["env/steps"].append(sum(len(e.step_rewards) for e in ours) / n)
        if finished == 0 and not self._warned_unfinished:
            self._warned_unfinished = True
            logger.warning(
                "no rollout of this batch finished its episode, so every reward is 0 and GRPO "
                "learns nothing from it: check that the model emits tool calls the tokenizer's "
                "response_template parses (env/steps is %.2f per rollout) and that "
                "max_completion_length (%s) holds a whole episode with its tool results",
                sum(len(e.step_rewards) for e in ours) / n,
                self.max_completion_length,
            )
