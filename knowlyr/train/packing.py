"""Padding-free packing for agent SFT: rows packed into fixed token budgets, weights per token.

``KnowlyrSFTConfig(packing=True, max_length=N)`` packs the tokenized rows into bins of at most
``N`` tokens (TRL's best-fit-decreasing ``pack_dataset``) and a batch into one row with no
padding. ``position_ids`` restart at every packed row, and attention never crosses rows:

- ``flash_attention_2`` / ``flash_attention_3`` / a kernels-hub flash kernel (GPU) run the
  varlen kernel on the ``cu_seq_lens_*`` the collator computes;
- ``sdpa``, ``eager`` and ``flex_attention`` (CPU and GPU) get a block-diagonal causal mask
  that transformers (5.x, ``masking_utils.find_packed_sequence_indices``) builds from the
  restarting ``position_ids`` when there is no ``attention_mask`` and no cache, as in training.
  That mask is ``tokens x tokens``: on a GPU prefer a flash kernel for long budgets.

:func:`check_packed_attention` proves it on the model itself before training, so a model
whose attention ignores ``position_ids`` is an error, not rows that silently see each other.

The agent parts stay exact because each row's step weights become a per-token
``loss_weights`` column *before* packing (observation masking is already in ``labels``;
weight-0 turns such as chunk context get label -100 and weight 0), and packing moves
``input_ids``, ``labels`` and ``loss_weights`` together. :class:`PackedDataCollator` joins
them into one padding-free row; the trainer's loss is the same token-weighted sum as on a
padded batch.

Example:
    >>> config = KnowlyrSFTConfig(output_dir="out", packing=True, max_length=4096,
    ...                           step_weighted_loss=True)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from knowlyr.errors import TrainError

__all__ = ["PackedDataCollator", "check_packed_attention", "pack_rows"]

#: Columns that packing moves together (every one a list with one entry per token).
PACKED_COLUMNS = ("input_ids", "labels", "loss_weights")


def pack_rows(
    dataset: Any, budget: int, *, strategy: str = "bfd", map_kwargs: dict[str, Any] | None = None
) -> Any:
    """Pack tokenized rows into rows of at most ``budget`` tokens, per-token columns together.

    Args:
        dataset: a tokenized dataset with ``input_ids``, ``labels`` and optionally
            ``loss_weights`` (other columns are dropped).
        budget: tokens per packed row (``max_length``).
        strategy: TRL's packing strategy: ``"bfd"`` (rows kept whole, longer ones truncated),
            ``"bfd_split"`` (longer rows split) or ``"wrapped"``.
        map_kwargs: passed to ``datasets.Dataset.map`` (``num_proc``, ``desc``).

    Returns:
        The packed dataset, with a ``seq_lengths`` column (the rows in each packed row).
    """
    from trl import pack_dataset

    columns = [c for c in PACKED_COLUMNS if c in dataset.column_names]
    return pack_dataset(dataset.select_columns(columns), budget, strategy, map_kwargs or {})


class PackedDataCollator(DataCollatorForLanguageModeling):
    """TRL's padding-free language-modeling collator that also joins the per-token
    ``loss_weights`` of packed rows.

    Weights are 0 wherever the label is -100 (including each row's first token, which the
    padding-free collator masks). A batch whose trained tokens all weigh 1 gets no
    ``loss_weights``: TRL's own loss then equals the weighted one.

    Example:
        >>> collate = PackedDataCollator(pad_token_id=0, padding_free=True)
        >>> out = collate([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3],
        ...                 "loss_weights": [0.0, 0.5, 2.0]}])
        >>> out["loss_weights"].tolist()
        [[0.0, 0.5, 2.0]]
    """

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        if "loss_weights" not in examples[0]:
            return super().torch_call(examples)
        weights = [torch.tensor(ex["loss_weights"], dtype=torch.float32) for ex in examples]
        out = super().torch_call(
            [{k: v for k, v in ex.items() if k != "loss_weights"} for ex in examples]
        )
        labels = out["labels"]
        rows = [torch.cat(weights)] if self.padding_free else weights
        w = torch.zeros(labels.shape, dtype=torch.float32)
        for i, row in enumerate(rows):
            w[i, : row.numel()] = row
        w = w.masked_fill(labels == -100, 0.0)
        if bool((w[labels != -100] == 1.0).all()):
            return out  # uniform: TRL's loss is the weighted loss
        out["loss_weights"] = w
        return out


def check_packed_attention(model: Any) -> None:
    """Raise :class:`TrainError` when the model's attention lets one packed row see another.

    Runs two tiny packed batches that differ only in their first row and checks that the
    second row's logits do not move. Costs one forward of 18 tokens, without gradients.
    """
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    vocab = getattr(config, "vocab_size", None) or model.get_input_embeddings().num_embeddings
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    first = torch.randint(0, vocab, (5,), generator=gen)
    other = (first + 1) % vocab
    second = torch.randint(0, vocab, (4,), generator=gen)
    position_ids = torch.cat([torch.arange(5), torch.arange(4)])[None].to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = [
                model(
                    input_ids=torch.cat([head, second])[None].to(device),
                    position_ids=position_ids,
                    use_cache=False,
                ).logits[0, 5:]
                for head in (first, other)
            ]
    finally:
        model.train(was_training)
    moved = (logits[0] - logits[1]).abs().max().item()
    if moved > 1e-3 * (1.0 + logits[0].abs().max().item()):
        impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
        raise TrainError(
            f"packing: with attn_implementation={impl!r} this model lets packed rows attend to "
            f"each other (a row's logits moved by {moved:.3g} when the row before it changed). "
            "Load it with attn_implementation='sdpa' or 'flash_attention_2', or set packing=False"
        )
