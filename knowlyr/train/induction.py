"""Induction pretraining: teach a model built from scratch to copy from its context.

A tool-using agent copies all the time: the order id of the question into the call, the
status of the tool's answer into the reply, the service name into the file path. A tiny model
trained from scratch on demonstrations has to discover that skill (the two-layer *induction
head* circuit: find the earlier occurrence of the current token, predict the token that
followed it) from a few copies per row, and often does not: it learns the format and guesses
the values. Here the circuit is trained first, on synthetic sequences where copying is the
only way to lower the loss:

    [a random tokens][span S][gap - a random tokens][span S again]    loss on the second S

Tokens are drawn uniformly from the tokenizer's vocabulary (special tokens left out) and
``a`` is random, so the model cannot copy by position or by unigram statistics, only by
content. Every row has the same length (``2 * span + gap``), so a batch has no padding: with
the gaps drawn apart (rows of 48-128 tokens padded to the longest), a step took 1.37x as
long and the circuit came 100-150 steps later (measured on this project's 2-core machine,
2x128 model, batch 32: 0.26 s vs 0.19 s a step; copy accuracy past 0.5 at step 700-750 vs
600 on two seeds each). A 2x128 tiny model goes through the usual plateau and learns the
circuit abruptly (copy accuracy 0.05 -> 0.9 within ~50 steps around step 600 at learning
rate 1e-3); training stops once a logged batch is copied at ``target_accuracy`` (the rest of
``steps`` is room for seeds that take longer), and the curve is returned so a caller can see
whether it learned.

Example:
    >>> model, tok = build_tiny_model(texts, hidden_size=128)  # doctest: +SKIP
    >>> result = induction_pretrain(model, tok, steps=1000)  # doctest: +SKIP
    >>> result.copy_accuracy  # doctest: +SKIP
    0.95
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from knowlyr._threads import one_thread, small_cpu_model
from knowlyr.errors import ConfigError

__all__ = [
    "DEFAULT_STEPS",
    "InductionResult",
    "copy_batch",
    "copy_vocabulary",
    "induction_pretrain",
]

log = logging.getLogger("knowlyr.train")

#: Most induction pretraining steps of a tiny model by default: a 2x128 model learns to copy
#: at ~600 steps (learning rate 1e-3) and stops there; 1000 leaves room for seeds that take
#: longer (0.19 s a step on one thread here).
DEFAULT_STEPS = 1000


@dataclass
class InductionResult:
    """What induction pretraining did: steps, time, and loss / copy accuracy by step."""

    steps: int
    seconds: float
    copy_accuracy: float
    """Share of the repeated span's tokens (the first one excepted) predicted right on a
    held-out synthetic batch after training."""
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    """``(step, loss, copy accuracy)`` of the training batches, every ``log_every`` steps."""


def copy_vocabulary(tokenizer: Any) -> list[int]:
    """The token ids sequences are drawn from: the whole vocabulary but the special tokens
    (end of turn, padding).

    The added tool-call tags stay in. Measured on the nightly mix (2x128 model, 1000 steps,
    then the same SFT): with them, SFT afterwards fit the demonstrations (training loss
    0.01-0.03 after 300-500 steps, 49% held-out success); without them, twice, it did not
    (0.37-0.43, as without induction pretraining).
    """
    skip = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in skip]
    if len(vocab) < 64:
        raise ConfigError(
            f"induction pretraining needs a vocabulary of at least 64 ordinary tokens to draw "
            f"from, the tokenizer has {len(vocab)}"
        )
    return vocab


def copy_batch(
    rng: random.Random, vocab: list[int], *, batch_size: int, span: int, gap: int
) -> dict[str, Any]:
    """One batch of ``[random a][S][random gap - a][S]`` rows (``a`` uniform in ``0..gap``,
    ``S`` ``span`` tokens), all ``2 * span + gap`` long: ``input_ids``, ``attention_mask``
    (all ones: nothing is padded) and ``labels`` (``-100`` except on the second ``S``)."""
    import torch

    rows, labels = [], []
    for _ in range(batch_size):
        a = rng.randint(0, gap)
        s = rng.choices(vocab, k=span)
        rows.append(rng.choices(vocab, k=a) + s + rng.choices(vocab, k=gap - a) + s)
        labels.append([-100] * (span + gap) + s)
    ids = torch.tensor(rows, dtype=torch.long)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": torch.tensor(labels, dtype=torch.long),
    }


def _accuracy(logits: Any, labels: Any) -> float:
    """Next-token accuracy on the labelled positions but each span's first token (which
    nothing in the context predicts)."""
    target = labels[:, 1:]
    pred = logits[:, :-1].argmax(-1)
    first = (target != -100) & (labels[:, :-1] == -100)
    keep = (target != -100) & ~first
    return float((pred[keep] == target[keep]).float().mean()) if keep.any() else 0.0


def induction_pretrain(
    model: Any,
    tokenizer: Any,
    *,
    steps: int = DEFAULT_STEPS,
    span: int = 24,
    gap: int = 40,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    warmup_steps: int = 50,
    seed: int = 0,
    target_accuracy: float | None = 0.98,
    log_every: int = 50,
    on_log: Callable[[int, float, float], None] | None = None,
) -> InductionResult:
    """Train ``model`` in place on synthetic copy sequences (see the module docstring).

    Args:
        model: a causal LM built from scratch (``transformers``), on its device.
        tokenizer: its tokenizer (the vocabulary sequences are drawn from).
        steps: most optimizer steps (AdamW, linear warm-up then constant).
        span: length of the copied span.
        gap: most random tokens before the span and between its two copies.
        batch_size: rows per step.
        learning_rate: AdamW learning rate (1e-3 learns the circuit in ~650 steps for a
            2x128 model; 3e-3 had not after 900).
        warmup_steps: linear learning-rate warm-up.
        seed: sequence seed (the model's weights come as they are).
        target_accuracy: stop once a logged training batch's copy accuracy reaches this
            (``None``: train all ``steps``). The batch is a fresh draw, never seen before.
        log_every: record (and log to ``knowlyr.train``) loss and accuracy this often.
        on_log: called with ``(step, loss, accuracy)`` at each record.

    Returns:
        An :class:`InductionResult` (``steps`` is the steps taken); ``copy_accuracy`` is
        measured on a fresh batch.
    """
    import torch

    if target_accuracy is not None and not 0 < target_accuracy <= 1:
        raise ConfigError(f"target_accuracy must be in (0, 1] or None, got {target_accuracy}")
    if steps < 1 or span < 2 or gap < 0 or batch_size < 1:
        raise ConfigError(
            f"induction pretraining needs steps >= 1, span >= 2, gap >= 0 and batch_size >= 1 "
            f"(got steps={steps}, span={span}, gap={gap}, batch_size={batch_size})"
        )
    vocab = copy_vocabulary(tokenizer)
    rng = random.Random(seed)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup_steps))
    )
    was_training = model.training
    model.train()
    curve: list[tuple[int, float, float]] = []
    done = steps
    t0 = time.perf_counter()
    # a tiny model's products are too small to split over threads (knowlyr._threads)
    with one_thread() if small_cpu_model(model) else nullcontext():
        for step in range(1, steps + 1):
            batch = copy_batch(rng, vocab, batch_size=batch_size, span=span, gap=gap)
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if step % log_every == 0 or step == steps:
                acc = _accuracy(out.logits.detach(), batch["labels"])
                curve.append((step, float(out.loss.detach()), acc))
                log.info(
                    f"induction step {step}/{steps}: loss={out.loss.item():.4g} copy_acc={acc:.3f}"
                )
                if on_log is not None:
                    on_log(step, float(out.loss.detach()), acc)
                if target_accuracy is not None and acc >= target_accuracy:
                    done = step
                    log.info(f"induction: copy accuracy {acc:.3f} at step {step}, stopping")
                    break
    model.eval()
    with torch.no_grad():
        held = copy_batch(random.Random(seed + 1_000_003), vocab, batch_size=64, span=span, gap=gap)
        held = {k: v.to(device) for k, v in held.items()}
        accuracy = _accuracy(model(**held).logits, held["labels"])
    model.train(was_training)
    return InductionResult(
        steps=done, seconds=time.perf_counter() - t0, copy_accuracy=accuracy, curve=curve
    )
