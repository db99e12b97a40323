"""TRL's DPOTrainer on exported preference pairs, with LoRA from the config.

A :func:`~knowlyr.export.export_dpo` dataset is conversational ``prompt`` / ``chosen`` /
``rejected`` with a ``tools`` column: the completion is the whole multi-turn continuation
(assistant turns and the tool answers between them), so the preference is over trajectories.

Example:
    >>> trainer = KnowlyrDPOTrainer(model=model, args=KnowlyrDPOConfig(output_dir="out"),
    ...                             train_dataset=export_dpo(trajs).dataset,
    ...                             processing_class=tok)  # doctest: +SKIP
    >>> trainer.train()  # doctest: +SKIP
"""

from __future__ import annotations

import copy
from typing import Any

from trl import DPOTrainer

from knowlyr.agents.inference import MODEL_LOAD_LOCK
from knowlyr.errors import TrainError
from knowlyr.train._defaults import lora_config
from knowlyr.train.dpo_config import KnowlyrDPOConfig

__all__ = ["KnowlyrDPOConfig", "KnowlyrDPOTrainer"]

_DPO_COLUMNS = ("prompt", "chosen", "rejected")


class KnowlyrDPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` that checks the dataset up front and builds LoRA from ``lora_r``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        ds = kwargs.get("train_dataset")
        if ds is not None and hasattr(ds, "column_names"):
            missing = [c for c in _DPO_COLUMNS if c not in ds.column_names]
            if missing:
                raise TrainError(
                    f"the DPO dataset lacks columns {missing}; export it with knowlyr.export.export_dpo"
                )
            if len(ds) == 0:
                raise TrainError(
                    "the DPO dataset is empty: no preference pair passed the export filters"
                )
        if getattr(config, "lora_r", None) and kwargs.get("peft_config") is None:
            kwargs["peft_config"] = lora_config(
                config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout
            )
        model = kwargs.get("model", args[0] if args else None)
        if (
            kwargs.get("ref_model") is None
            and kwargs.get("peft_config") is None
            and not isinstance(model, str)
        ):
            # TRL reloads the reference from the model's path; an in-memory model (e.g. a tiny
            # one built on the fly) has none, so the reference is a frozen copy of it.
            with MODEL_LOAD_LOCK:  # no other thread's model load may patch construction meanwhile
                ref = copy.deepcopy(model).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            kwargs["ref_model"] = ref
        super().__init__(*args, **kwargs)
