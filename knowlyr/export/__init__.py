"""Export scored trajectories as training datasets (Hugging Face ``datasets``).

- :func:`export_sft`: multi-turn tool-calling conversations + ``tools`` for TRL's SFTTrainer;
- :func:`export_dpo`: conversational ``prompt`` / ``chosen`` / ``rejected`` for DPOTrainer;
- :func:`export_grpo`: trajectories grouped per task with rewards, advantages and step-level
  advantages;
- :func:`export_benchmark`: held-out tasks with reference outcomes;
- :func:`split_by_task`: train / test by task id (no task in two splits).

Each returns an :class:`ExportResult` (``.dataset``, ``.card``, ``.rejected``, ``.save()``,
``.to_store()``). :func:`save_sft` streams an SFT export straight into the folder
``.save()`` writes (memory: one batch); :func:`save_sft_files` and :func:`save_sft_store` do
it for JSONL files and for a store, reading on every core. The conversation format is owned by
:mod:`knowlyr.agents.action_format`.
"""

from __future__ import annotations

from knowlyr.export.benchmark import export_benchmark, split_by_task
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    DatasetCard,
    ExportResult,
    infer_tool_schemas,
    normalized_step_weights,
    step_weights,
    trajectory_reward,
)
from knowlyr.export.folder import SavedExport, save_sft
from knowlyr.export.grpo import export_grpo, group_advantages, step_advantages
from knowlyr.export.preference import export_dpo, pairs_from_trajectories
from knowlyr.export.sft import chunk_steps, export_sft
from knowlyr.export.sft_parallel import save_sft_files, save_sft_store

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "DatasetCard",
    "ExportResult",
    "SavedExport",
    "chunk_steps",
    "export_benchmark",
    "export_dpo",
    "export_grpo",
    "export_sft",
    "group_advantages",
    "infer_tool_schemas",
    "normalized_step_weights",
    "pairs_from_trajectories",
    "save_sft",
    "save_sft_files",
    "save_sft_store",
    "split_by_task",
    "step_advantages",
    "step_weights",
    "trajectory_reward",
]
