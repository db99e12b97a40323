"""save_sft streams an SFT export into the folder ExportResult.save writes, without datasets:
the same files (dataset_info, state, card, README byte for byte; the same Arrow and parquet
content), across many spilled batches, and nothing at all for an export of no rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_from_disk

from knowlyr.export import export_dpo, export_sft, save_sft
from knowlyr.export import sft as sft_module
from tests.export.test_documents import _nan
from tests.export.test_sft_columns import generated_corpus


@pytest.mark.parametrize(
    "kw", [{}, {"only_success": False, "max_steps_per_row": 2}, {"system_prompt": None}], ids=str
)
def test_the_streamed_folder_is_the_saved_folder(tmp_path, monkeypatch, kw):
    monkeypatch.setattr(sft_module, "_SPILL_BATCH_ROWS", 7)  # many batches through the spill
    trajs = generated_corpus(11, n=60)
    want = export_sft(trajs, **kw)
    want.save(tmp_path / "saved")
    got = save_sft(iter(trajs), tmp_path / "streamed", **kw)
    assert got.card.to_dict() == want.card.to_dict() and got.rejected == want.rejected
    a, b = tmp_path / "streamed", tmp_path / "saved"
    for name in ("README.md", "card.json", "dataset/dataset_info.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # the fingerprints hash the data each wrote (the Arrow file; the table in memory)
    states = [json.loads((x / "dataset/state.json").read_text()) for x in (a, b)]
    assert {len(st.pop("_fingerprint")) for st in states} == {32} and states[0] == states[1]
    assert _nan(load_from_disk(str(a / "dataset")).to_list()) == _nan(want.dataset.to_list())
    stream = pa.ipc.open_stream(pa.memory_map(str(a / "dataset/data-00000-of-00001.arrow")))
    saved = pa.ipc.open_stream(pa.memory_map(str(b / "dataset/data-00000-of-00001.arrow")))
    assert stream.schema.equals(saved.schema, check_metadata=True)
    assert stream.read_all().equals(saved.read_all())
    assert pq.read_table(a / "data.parquet").equals(pq.read_table(b / "data.parquet"))
    assert not list(tmp_path.glob(".knowlyr-sft-*"))  # the spill file is gone


def test_no_rows_writes_nothing(tmp_path):
    trajs = [t for t in generated_corpus(12, n=20) if not t.outcome.success]
    got = save_sft(trajs, tmp_path / "out")
    assert got.path is None and got.card.rows == 0 and len(got.rejected) == len(trajs)
    assert list(tmp_path.iterdir()) == []


def test_unknown_options_are_refused(tmp_path):
    with pytest.raises(TypeError, match="min_rewards"):
        save_sft([], tmp_path / "out", min_rewards=0.5)


def _reward_seen_by_map(folder) -> float:
    """The first row's reward as ``Dataset.map`` gives it (TRL tokenizes with ``map``): from
    the cache file datasets keeps beside the data, named after the dataset's fingerprint."""
    from knowlyr.train.run import load_dataset_dir

    ds = load_dataset_dir(folder)
    return ds.map(lambda row: {"seen": row["reward"]})[0]["seen"]


@pytest.mark.parametrize("how", ["streamed", "saved"])
def test_a_new_export_into_the_same_folder_is_not_served_from_the_old_ones_cache(tmp_path, how):
    trajs = [t for t in generated_corpus(12, n=20) if t.steps]
    out = tmp_path / "sft"
    for reward in (0.1, 0.9):  # the same trajectories and rows, other rewards and weights
        rewards = {t.id: reward for t in trajs}
        if how == "streamed":
            save_sft(trajs, out, only_success=False, rewards=rewards)
        else:
            export_sft(trajs, only_success=False, rewards=rewards).save(out)
        assert not list((out / "dataset").glob("cache-*.arrow"))  # the old export's are gone
        assert _reward_seen_by_map(out) == reward


def test_dpo_exports_differing_only_in_margins_have_other_fingerprints(tmp_path):
    trajs = [t for t in generated_corpus(13, n=40) if t.steps]
    prints = set()
    for scale in (1.0, 2.0):
        rewards = {t.id: scale * (i % 4) for i, t in enumerate(trajs)}
        res = export_dpo(trajs, rewards=rewards)
        assert res.card.rows
        prints.add(res.dataset._fingerprint)
    assert len(prints) == 2
