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
import logging
import os
import threading
from pathlib import Path
from typing import Any

from knowlyr._progress import quiet_progress
from knowlyr.agents.action_format import (
    INVALID_ACTION_TOOL,
    action_to_message,
    parse_action_text,
)
from knowlyr.agents.base import Agent
from knowlyr.agents.batching import (
    BatchedGenerator,
    check_sampling,
    resolve_device,
    resolve_dtype,
)
from knowlyr.core.env import Action
from knowlyr.errors import ConfigError

__all__ = ["MARKER_FILE", "MODEL_LOAD_LOCK", "AgentInference", "ModelAgent", "load_tokenizer"]

#: transformers builds a model under process-wide settings (the default device is ``meta``
#: while weights load), so two threads of one process must not load models at the same time:
#: two collection shards loading one checkpoint at once left one with garbage weights and the
#: process's default device stuck on ``meta``. Every knowlyr model load holds this lock.
MODEL_LOAD_LOCK = threading.RLock()

_log = logging.getLogger("knowlyr.agents")

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


class AgentInference:
    """Turn-by-turn generation with a local causal LM: greedy, or sampled with a seed.

    Every turn goes through one :class:`~knowlyr.agents.batching.BatchedGenerator`, so the
    agents it creates can run in concurrent episodes (``collect(..., concurrency=32)``) and
    their turns are decoded as one batch; a turn's output does not depend on its batch.

    Args:
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer, with a chat template that renders ``tool_calls``.
        tools: OpenAI function schemas shown to the model in every episode (the ones it was
            trained with); ``None``: each episode's env tools (the reset ``info["tools"]``).
        system_prompt: default system prompt of the agents it creates.
        max_new_tokens: generation limit per turn.
        temperature: 0 decodes greedily; above 0 samples at this temperature (what collection
            with k attempts per task needs: the attempts differ).
        top_p: nucleus sampling mass when sampling.
        max_batch: most turns decoded together.
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
        max_batch: int = 32,
    ):
        check_sampling(max_new_tokens, temperature, top_p)
        self.temperature = temperature
        self.top_p = top_p
        self.model = model
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
        self.batcher = BatchedGenerator(
            model, eos_token_ids=self._eos, pad_token_id=self._pad, max_batch=max_batch
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        max_new_tokens: int = 256,
        device: str | None = "auto",
        dtype: Any = "auto",
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_batch: int = 32,
    ) -> AgentInference:
        """Load a checkpoint folder; its tools and system prompt come from :data:`MARKER_FILE`
        (a checkpoint trained on several tool sets saves none: its agents show each episode
        the env's tools).

        ``device="auto"`` puts the model on the GPU when torch sees one; ``"cpu"`` or
        ``"cuda:1"`` choose one. ``dtype="auto"`` acts in bf16 on a GPU that supports it, fp16
        on an older GPU and fp32 on the CPU, whatever dtype the checkpoint was saved in (see
        :func:`~knowlyr.agents.batching.resolve_dtype`); a ``torch.dtype`` or a name chooses
        one. Both choices are logged to ``knowlyr.agents``.
        """
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"{path} is not a model folder (no config.json); pass a folder written by save_pretrained"
            )
        where = resolve_device(device)
        kwargs: dict[str, Any] = {"local_files_only": True, "dtype": resolve_dtype(dtype, where)}
        with MODEL_LOAD_LOCK, quiet_progress():
            # the import too: transformers' lazy module fails a first import racing another
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        if where != "cpu":
            model.to(where)
        _log.info(
            "acting with %s on %s in %s", path, where, str(model.dtype).removeprefix("torch.")
        )
        marker = read_marker(path)
        return cls(
            model,
            load_tokenizer(path),
            tools=marker.get("tools"),
            system_prompt=marker.get("system_prompt"),
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            max_batch=max_batch,
        )

    def close(self) -> None:
        """Stop the generation thread (the agents it created can no longer act)."""
        self.batcher.close()

    def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        seed: int | None = None,
    ) -> str:
        """The model's next assistant turn for ``messages``, decoded with special tokens.

        Greedy when ``temperature`` is 0; otherwise sampled from a generator seeded with
        ``seed`` (default 0), so a turn is reproducible whatever it is batched with.
        """
        ids = self.tokenizer.apply_chat_template(
            messages,
            tools=tools if tools is not None else self.tools,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        out = self.batcher.generate(
            ids,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=seed or 0,
        )
        return self.tokenizer.decode(out, skip_special_tokens=False)

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
            tools: tool schemas shown to the model (default: the ones saved with it; when it
                has none, each episode's env tools, the reset ``info["tools"]``).
            text_tool: tool that plain-text answers are sent to (see
                :func:`~knowlyr.agents.action_format.parse_action_text`).
            name: the agent's name on trajectories.
            seed: when sampling, turn ``t`` of an episode is sampled with a seed derived
                from (``seed``, the episode's seed, ``t``): the episode seed is the one
                :func:`~knowlyr.rollout.collect` resets it with (``info["seed"]``), else the
                agent's episode count. Episodes are reproducible at any concurrency, and
                repeated attempts at one task (other episode seeds) differ.
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
    """An agent that asks an :class:`AgentInference` for each action; one history per episode.

    The tools in its prompts are its fixed ``tools`` when it has them, else the ones the env
    gives at reset (``info["tools"]``, see :func:`~knowlyr.rollout.run_episode`).
    """

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
        self._episode_seed = 0
        self.system_prompt = system_prompt
        self.tools = tools
        #: the tools of the current episode's prompts (see :meth:`reset`)
        self.episode_tools: list[dict[str, Any]] | None = tools
        self.text_tool = text_tool
        self.name = name
        self.model = (
            getattr(getattr(inference.model, "config", None), "_name_or_path", None) or None
        )
        self.messages: list[dict[str, Any]] = []
        self.last_text: str = ""
        self._instruction: str | None = None
        self._last_tool: str | None = None
        self._last_error: str | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        self._episode += 1
        given = (info or {}).get("seed")
        self._episode_seed = int(given) if given is not None else self._episode
        self.messages = []
        self.last_text = ""
        given_tools = (info or {}).get("tools")
        self.episode_tools = self.tools if self.tools is not None else given_tools
        self._last_tool = None
        self._last_error = None
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
        elif self._last_error is not None:
            # a reply that was no tool call: tell the model what was wrong, not the env's
            # "unknown tool invalid_action"
            self.messages.append({"role": "user", "content": self._correction()})
        else:
            self.messages.append(
                {"role": "tool", "name": self._last_tool or "", "content": observation}
            )
        turn_seed = (
            self.seed * 1_000_003 + self._episode_seed * 1_009 + len(self.messages)
        ) % 2**63
        self.last_text = self.inference.generate(
            self.messages, tools=self.episode_tools, seed=turn_seed
        )
        action = parse_action_text(self.last_text, text_tool=self.text_tool)
        self._last_error = None
        if action["tool"] == INVALID_ACTION_TOOL:
            self.messages.append({"role": "assistant", "content": action["params"]["raw"]})
            self._last_error = action["params"]["error"]
        else:
            self.messages.append(action_to_message(action))
        self._last_tool = action["tool"]
        return action

    def _correction(self) -> str:
        names = [
            (t.get("function") or t).get("name")
            for t in self.episode_tools or []
            if isinstance(t, dict) and isinstance(t.get("function") or t, dict)
        ]
        names = [n for n in names if n]
        how = f" Reply with a call to one of the tools: {', '.join(names)}." if names else ""
        return f"Error: {self._last_error}.{how}"
