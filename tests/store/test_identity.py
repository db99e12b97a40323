"""A store's identity: stable while it exists, new when it is deleted and re-created."""

from __future__ import annotations

from knowlyr.store import Store


def test_identity_is_stable_and_new_for_a_recreated_store(tmp_path) -> None:
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "s"
    with ThreadPoolExecutor(8) as pool:  # first use from many threads at once: one id
        ids = set(pool.map(lambda _: Store.open(str(root)).identity, range(16)))
    assert len(ids) == 1 and len(next(iter(ids))) == 32
    assert Store.open(str(root)).identity in ids
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]
    shutil.rmtree(root)
    assert Store.open(str(root)).identity not in ids
