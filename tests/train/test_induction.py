"""Induction pretraining: synthetic copy sequences teach a model built from scratch to copy."""

from __future__ import annotations

import random

import pytest

from knowlyr.errors import ConfigError
from knowlyr.train.induction import copy_batch, copy_vocabulary, induction_pretrain
from knowlyr.train.models import TOOL_TOKENS, build_tiny_model

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_copy_batch_labels_only_the_second_copy_of_the_span() -> None:
    _, tok = build_tiny_model(None, hidden_size=16, num_layers=1, num_heads=2)
    vocab = copy_vocabulary(tok)
    assert not set(tok.all_special_ids) & set(vocab) and len(vocab) > 200
    assert {tok.convert_tokens_to_ids(t) for t in TOOL_TOKENS} <= set(vocab)  # tags are copied
    b = copy_batch(random.Random(0), vocab, batch_size=8, span=6, gap=5)
    assert b["input_ids"].shape == (8, 2 * 6 + 5)  # every row as long: no padding
    assert b["attention_mask"].eq(1).all()
    starts = set()
    for ids, labels in zip(b["input_ids"], b["labels"], strict=True):
        row, lab = ids.tolist(), labels.tolist()
        span = row[-6:]
        assert lab[-6:] == span and set(lab[:-6]) == {-100}  # loss on the repeat only
        first = max(i for i in range(len(row) - 6) if row[i : i + 6] == span)  # earlier copy
        assert first <= 5  # at most `gap` random tokens before it
        starts.add(first)
    assert len(starts) > 1  # the first copy is not at a fixed position


def test_induction_pretraining_trains_in_place_and_records_its_curve() -> None:
    model, tok = build_tiny_model(None, hidden_size=16, num_layers=1, num_heads=2, seed=0)
    model.eval()
    first = next(model.parameters()).detach().clone()
    seen = []
    done = induction_pretrain(model, tok, steps=25, span=4, gap=2, batch_size=8,
                              log_every=10, on_log=lambda *a: seen.append(a))  # fmt: skip
    assert [s for s, _, _ in done.curve] == [10, 20, 25] == [s for s, _, _ in seen]
    assert done.curve[-1][1] < done.curve[0][1]  # the loss went down
    assert not next(model.parameters()).detach().equal(first) and not model.training
    assert 0 <= done.copy_accuracy <= 1 and done.steps == 25 and done.seconds > 0


@pytest.mark.slow
def test_induction_pretraining_teaches_copying_by_content() -> None:
    model, tok = build_tiny_model(None, hidden_size=64, seed=0)
    before = induction_pretrain(model, tok, steps=1, span=8, gap=8, learning_rate=1e-9)
    assert before.copy_accuracy < 0.1  # an untrained model does not copy
    done = induction_pretrain(model, tok, steps=900, span=8, gap=8, learning_rate=3e-3)
    # the random gaps leave copying by content the only way (measured on a fresh batch)
    assert done.copy_accuracy > 0.8, done.curve
    assert done.curve[0][2] < 0.2  # it was learned, not there from the start
    # it stopped at the first logged batch copied at the target accuracy
    assert done.steps < 900 and done.curve[-1] == (done.steps, *done.curve[-1][1:])
    assert done.curve[-1][2] >= 0.98 and all(a < 0.98 for _, _, a in done.curve[:-1])


def test_induction_pretraining_checks_its_settings() -> None:
    model, tok = build_tiny_model(None, hidden_size=16, num_layers=1, num_heads=2)
    with pytest.raises(ConfigError, match="span >= 2"):
        induction_pretrain(model, tok, steps=10, span=1)
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match="target_accuracy must be in"):
            induction_pretrain(model, tok, steps=10, target_accuracy=bad)
