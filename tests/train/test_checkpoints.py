"""Checkpoints in a real store: deterministic archives, unpacking, init and SFT of a tiny policy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from knowlyr.agents.inference import MARKER_FILE
from knowlyr.errors import NotFoundError
from knowlyr.export import export_sft
from knowlyr.store import Store
from knowlyr.train.checkpoints import (
    archive_checkpoint,
    checkpoint_root,
    init_policy,
    train_sft_checkpoint,
    unpack_checkpoint,
)
from knowlyr.train.models import load_model


@pytest.fixture
def store(tmp_path) -> Store:
    return Store.open(str(tmp_path / "store"))


def test_archive_is_content_addressed_and_unpacks(store: Store, tmp_path) -> None:
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "w.bin").write_bytes(b"\x00" * 10)
    blob = archive_checkpoint(store, folder)
    (folder / "config.json").touch()  # a new mtime is the same archive
    assert archive_checkpoint(store, folder) == blob
    assert unpack_checkpoint(store, blob, path=folder) == str(folder)
    shutil.rmtree(folder)
    out = unpack_checkpoint(store, blob, path=folder)
    assert out.startswith(str(checkpoint_root(store)))
    assert (tmp_path / "store").as_posix() in out
    assert (Path(out) / "sub" / "w.bin").read_bytes() == b"\x00" * 10
    with pytest.raises(NotFoundError):
        unpack_checkpoint(store, "0" * 64)


def test_tiny_policy_is_built_for_the_dataset_and_trained(store: Store, expert_and_random) -> None:
    good, _ = expert_and_random
    ds = export_sft(good[:8]).dataset
    init = init_policy(store, ds, dataset_name="sft-x", hidden_size=32, num_layers=1, seed=1)
    assert init.name == "init-tiny-1x32" and init.path.name == "sft-x-init-tiny-1x32-s1"
    saved = json.loads((init.path / MARKER_FILE).read_text())
    assert saved["tools"] == ds[0]["tools"]
    again = init_policy(store, ds, dataset_name="sft-x", hidden_size=32, num_layers=1, seed=1)
    assert again.blob == init.blob  # same data and seed: the same weights, the same address
    out = train_sft_checkpoint(
        store, ds, init=init.path, output_dir=store.root + "/run", epochs=1, batch_size=4
    )
    assert out.blob != init.blob and out.seconds > 0
    assert out.metrics["train_loss"] > 0 and "eval_loss" not in out.metrics
    # With held-back rows the final model is evaluated on them (what restarts are picked by).
    held = train_sft_checkpoint(
        store,
        ds.select(range(6)),
        init=init.path,
        output_dir=store.root + "/run-val",
        epochs=1,
        batch_size=4,
        eval_dataset=ds.select(range(6, 8)),
    )
    assert held.metrics["eval_loss"] > 0 and "eval_mean_token_accuracy" in held.metrics
    model, tok = load_model(unpack_checkpoint(store, out.blob))
    assert model.config.hidden_size == 32 and tok.chat_template
    base = init_policy(store, ds, dataset_name="sft-x", model=str(out.path))
    assert base.name == f"init-{out.path.name}" and base.blob != init.blob


def test_trainer_logs_go_to_the_logger_not_stdout_and_dpo_trains_from_a_checkpoint(
    store: Store, expert_and_random, capsys, caplog
) -> None:
    import logging

    from knowlyr.export import export_dpo
    from knowlyr.train.checkpoints import train_dpo_checkpoint

    good, bad = expert_and_random
    ds = export_sft(good[:8]).dataset
    init = init_policy(store, ds, dataset_name="sft-q", hidden_size=32, num_layers=1, seed=1)
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="knowlyr.train"):
        train_sft_checkpoint(
            store, ds, init=init.path, output_dir=store.root + "/q", epochs=2, batch_size=4
        )
    out = capsys.readouterr()
    # no trainer dicts, no tokenizing / weight-loading bars
    assert "{'loss'" not in out.out and "it/s]" not in out.err and "examples/s" not in out.err
    lines = [r.getMessage() for r in caplog.records if r.name == "knowlyr.train"]
    assert any(m.startswith("step 2/4: loss=") for m in lines) and any(
        "train_loss=" in m for m in lines
    )

    pairs = export_dpo(good[:8] + bad[:8]).dataset
    dpo = train_dpo_checkpoint(
        store, pairs, init=init.path, output_dir=store.root + "/dpo", epochs=1, batch_size=4
    )
    assert dpo.blob != init.blob and dpo.metrics["train_loss"] > 0
    assert load_model(dpo.path)[0].config.hidden_size == 32


def test_grpo_trains_a_checkpoint_online_in_the_env(store: Store, expert_and_random) -> None:
    from knowlyr.export import export_grpo
    from knowlyr.train.checkpoints import train_grpo_checkpoint

    good, _ = expert_and_random
    init = init_policy(store, export_sft(good[:8]).dataset, dataset_name="g", hidden_size=32,
                       num_layers=1, seed=1)  # fmt: skip
    prompts = export_grpo(good[:4]).dataset
    out = train_grpo_checkpoint(
        store, prompts, init=init.path, output_dir=store.root + "/grpo", env_id="knowlyr/conversation",
        env_kwargs={"family": "order_status"}, batch_size=4, num_generations=2, epochs=1,
        max_steps=2, max_completion_length=64,
    )  # fmt: skip
    assert out.blob != init.blob and (out.path / "config.json").is_file()
    assert "train_loss" in out.metrics
