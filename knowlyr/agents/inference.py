"""The inference bridge: a local Hugging Face causal LM as an :class:`~knowlyr.agents.base.Agent`.

The model sees exactly the conversation format it was trained on (the chat template applied
to messages built by :mod:`knowlyr.agents.action_format`), decodes greedily one turn at a time,
and its text is parsed back into an env action by the same module. History resets every
episode.

Example:
    >>> from knowlyr.agents.inference import AgentInference
    >>> bridge = AgentInference.from_pretrained("runs/sft/final")  # doctest: +SKIP
    >>> agent = bridge.create_agent(system_prompt="You are a support agent.")  # doctest: +SKIP
    >>> agent.reset({"task": {"instruction": "Where is order K3Z9Q?"}})  # doctest: +SKIP
    >>> agent.act("Where is order K3Z9Q?", {})  # doctest: +SKIP
    {'tool': 'query_stats', 'params': {'order_id': 'K3Z9Q'}, 'thought': ''}
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from knowlyr._progress import quiet_progress
from knowlyr._threads import one_thread, small_cpu_model
from knowlyr.agents.action_format import (
    INVALID_ACTION_TOOL,
    action_to_message,
    parse_action_text,
)
from knowlyr.agents.base import Agent
from knowlyr.core.env import Action
from knowlyr.errors import ConfigError

__all__ = ["MARKER_FILE", "MODEL_LOAD_LOCK", "AgentInference", "ModelAgent", "load_tokenizer"]

#: transformers builds a model under process-wide settings (the default device is ``meta``
#: while weights load), so two threads of one process must not load models at the same time:
#: two collection shards loading one checkpoint at once left one with garbage weights and the
#: process's default device stuck on ``meta``. Every knowlyr model load holds this lock.
MODEL_LOAD_LOCK = threading.RLock()

#: Written next to a checkpoint by :func:`knowlyr.train.models.save_model`: how to reload the
#: tokenizer, and the tool schemas and system prompt the model was trained with.
MARKER_FILE = "knowlyr_model.json"


def read_marker(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The :data:`MARKER_FILE` of a checkpoint folder (``{}`` when there is none)."""
    f = Path(path) / MARKER_FILE
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """Load a tokenizer from a local folder.

    Folders saved with a ``PreTrainedTokenizerFast`` (the tiny models) are reloaded as that
    class: ``AutoTokenizer`` would build a ``Qwen2Tokenizer`` that drops the custom
    pre-tokenizer and changes the ids.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"model path {path} is not a folder; pass a local checkpoint folder")
    if read_marker(path).get("tokenizer_class") == "PreTrainedTokenizerFast":
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


#: Sampling seeds the global torch RNG right before ``generate``; this keeps that pair atomic
#: across threads, so a sampled episode depends only on its seed.
_SAMPLING_LOCK = threading.Lock()


class AgentInference:
    """Turn-by-turn generation with a local causal LM: greedy, or sampled with a seed.

    Args:
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer, with a chat template that renders ``tool_calls``.
        tools: OpenAI function schemas shown to the model (the ones it was trained with).
        system_prompt: default system prompt of the agents it creates.
        max_new_tokens: generation limit per turn.
        temperature: 0 decodes greedily; above 0 samples at this temperature (what collection
            with k attempts per task needs: the attempts differ).
        top_p: nucleus sampling mass when sampling.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        tools: list[dict[str, Any]] | None = None,
        system_prompt: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ):
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be positive, got {max_new_tokens}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
        if not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = temperature
        self.top_p = top_p
        self.model = model
        self._small = small_cpu_model(model)
        self.tokenizer = tokenizer
        self.tools = tools
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.model.eval()
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        eos = [tokenizer.eos_token_id]
        if isinstance(end, int) and end != tokenizer.unk_token_id and end not in eos:
            eos.append(end)  # chat models end a turn with <|im_end|>
        self._eos = [t for t in eos if t is not None]
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._eos[0]

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        max_new_tokens: int = 256,
        device: str | None = None,
        dtype: Any = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> AgentInference:
        """Load a checkpoint folder; its tools and system prompt come from :data:`MARKER_FILE`."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"{path} is not a model folder (no config.json); pass a folder written by save_pretrained"
            )
        kwargs: dict[str, Any] = {"local_files_only": True}
        if dtype is not None:
            kwargs["dtype"] = dtype
        with MODEL_LOAD_LOCK, quiet_progress():
            # the import too: transformers' lazy module fails a first import racing another
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        if device is not None:
            model.to(device)
        marker = read_marker(path)
        return cls(
            model,
            load_tokenizer(path),
            tools=marker.get("tools"),
            system_prompt=marker.get("system_prompt"),
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
        )

    def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        seed: int | None = None,
    ) -> str:
        """The model's next assistant turn for ``messages``, decoded with special tokens.

        Greedy when ``temperature`` is 0; otherwise sampled, with the torch RNG seeded from
        ``seed`` (default 0) right before generating, so a turn is reproducible.
        """
        import torch

        enc = self.tokenizer.apply_chat_template(
            messages,
            tools=tools if tools is not None else self.tools,
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        kwargs: dict[str, Any] = {"do_sample": False}
        if self.temperature > 0:
            kwargs = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
        with torch.inference_mode(), one_thread() if self._small else nullcontext():
            if self.temperature > 0:
                with _SAMPLING_LOCK:
                    torch.manual_seed(seed or 0)
                    out = self._generate(enc, kwargs)
            else:
                out = self._generate(enc, kwargs)
        return self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=False)

    def _generate(self, enc: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        return self.model.generate(
            **enc,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self._eos,
            pad_token_id=self._pad,
            **kwargs,
        )

    def create_agent(
        self,
        system_prompt: str | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        text_tool: str | None = None,
        name: str = "local-model",
        seed: int = 0,
    ) -> ModelAgent:
        """An :class:`Agent` driven by this model.

        Args:
            system_prompt: the system message (default: the one saved with the model).
            tools: tool schemas shown to the model (default: the ones saved with it).
            text_tool: tool that plain-text answers are sent to (see
                :func:`~knowlyr.agents.action_format.parse_action_text`).
            name: the agent's name on trajectories.
            seed: when sampling, turn ``t`` of the agent's ``e``-th episode is sampled with a
                seed derived from (``seed``, ``e``, ``t``): episodes are reproducible and
                repeated attempts at one task differ.
        """
        return ModelAgent(
            self,
            system_prompt=system_prompt if system_prompt is not None else self.system_prompt,
            tools=tools if tools is not None else self.tools,
            text_tool=text_tool,
            name=name,
            seed=seed,
        )


class ModelAgent(Agent):
    """An agent that asks an :class:`AgentInference` for each action; one history per episode."""

    def __init__(
        self,
        inference: AgentInference,
        *,
        system_prompt: str | None,
        tools: list[dict[str, Any]] | None,
        text_tool: str | None = None,
        name: str = "local-model",
        seed: int = 0,
    ):
        self.inference = inference
        self.seed = seed
        self._episode = -1
        self.system_prompt = system_prompt
        self.tools = tools
        self.text_tool = text_tool
        self.name = name
        self.model = (
            getattr(getattr(inference.model, "config", None), "_name_or_path", None) or None
        )
        self.messages: list[dict[str, Any]] = []
        self.last_text: str = ""
        self._instruction: str | None = None
        self._last_tool: str | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        self._episode += 1
        self.messages = []
        self.last_text = ""
        self._last_tool = None
        task = (info or {}).get("task") or {}
        self._instruction = (
            task.get("instruction")
            if isinstance(task, dict)
            else getattr(task, "instruction", None)
        )

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if not self.messages:
            if self.system_prompt:
                self.messages.append({"role": "system", "content": self.system_prompt})
            self.messages.append({"role": "user", "content": self._instruction or observation})
        else:
            self.messages.append(
                {"role": "tool", "name": self._last_tool or "", "content": observation}
            )
        turn_seed = (self.seed * 1_000_003 + self._episode * 1_009 + len(self.messages)) % 2**63
        self.last_text = self.inference.generate(self.messages, tools=self.tools, seed=turn_seed)
        action = parse_action_text(self.last_text, text_tool=self.text_tool)
        if action["tool"] == INVALID_ACTION_TOOL:
            self.messages.append({"role": "assistant", "content": action["params"]["raw"]})
        else:
            self.messages.append(action_to_message(action))
        self._last_tool = action["tool"]
        return action
