"""Training on TRL (SFT / DPO / GRPO with agent enhancements), offline models, evaluation.

Submodules import torch / transformers / trl lazily: ``import knowlyr.train`` is cheap and
the names below load on first use.

- :mod:`knowlyr.train.induction`: :func:`induction_pretrain` (teach a tiny model built from
  scratch to copy from its context before it sees task data);
- :mod:`knowlyr.train.models`: :func:`build_tiny_model`, :func:`load_model`,
  :func:`save_model`, :func:`smollm2_checkpoint`;
- :mod:`knowlyr.train.chat_templates`: :func:`training_chat_template` (a template with
  ``{% generation %}`` markers for SmolLM2 / ChatML, Qwen2.5/3 and Llama 3 tokenizers);
- :mod:`knowlyr.train.sft_config` / :mod:`~knowlyr.train.sft_trainer`,
  :mod:`~knowlyr.train.dpo_config` / :mod:`~knowlyr.train.dpo_trainer`,
  :mod:`~knowlyr.train.grpo_config` / :mod:`~knowlyr.train.grpo_trainer`;
- :mod:`knowlyr.train.run`: :func:`train_sft`, :func:`train_dpo`, :func:`train_grpo`;
- :mod:`knowlyr.train.evaluation`: :func:`evaluate_agent`, :func:`compare_agents`;
- :mod:`knowlyr.train.rewards`: :func:`tool_call_reward` (a verifiable GRPO reward function);
- :func:`estimate_training_memory` / :class:`MemoryEstimate`: the device memory of one
  training step (parameters, gradients, optimizer states, activations), what the SFT
  trainer checks against the free GPU memory before training.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_tiny_model": "knowlyr.train.models",
    "build_tiny_tokenizer": "knowlyr.train.models",
    "induction_pretrain": "knowlyr.train.induction",
    "load_model": "knowlyr.train.models",
    "save_model": "knowlyr.train.models",
    "smollm2_checkpoint": "knowlyr.train.models",
    "training_chat_template": "knowlyr.train.chat_templates",
    "KnowlyrSFTConfig": "knowlyr.train.sft_config",
    "KnowlyrSFTTrainer": "knowlyr.train.sft_trainer",
    "KnowlyrDPOConfig": "knowlyr.train.dpo_config",
    "KnowlyrDPOTrainer": "knowlyr.train.dpo_trainer",
    "KnowlyrGRPOConfig": "knowlyr.train.grpo_config",
    "KnowlyrGRPOTrainer": "knowlyr.train.grpo_trainer",
    "TrainResult": "knowlyr.train.run",
    "train_sft": "knowlyr.train.run",
    "train_dpo": "knowlyr.train.run",
    "train_grpo": "knowlyr.train.run",
    "EvalResult": "knowlyr.train.evaluation",
    "ComparisonReport": "knowlyr.train.evaluation",
    "evaluate_agent": "knowlyr.train.evaluation",
    "compare_agents": "knowlyr.train.evaluation",
    "tool_call_reward": "knowlyr.train.rewards",
    "MemoryEstimate": "knowlyr.train._defaults",
    "estimate_training_memory": "knowlyr.train._defaults",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'knowlyr.train' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
