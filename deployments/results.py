"""Where cached stage results live: any fsspec location, for every flow run of a server.

By default a flow run keeps its results (what a cache hit returns) under its machine's
``$PREFECT_HOME/storage``, so the cache is one machine's. Point the server's default result
storage at a shared location and every worker reads and writes the same cache::

    python -m deployments.results s3://bucket/knowlyr/prefect-results   # e.g. the store's bucket
    python -m deployments.results /shared/prefect-results               # a local or mounted path
    python -m deployments.results --clear                               # back to $PREFECT_HOME

A URL with a scheme becomes Prefect's ``RemoteFileSystem`` block (fsspec: ``s3://`` needs
``knowlyr-gym[s3]`` and takes credentials from the environment, as the store does), a path a
``LocalFileSystem`` block; the block is saved as ``knowlyr-results`` and made the server's
default (``prefect result-storage inspect`` shows it). Stage locks stay per machine
(``$PREFECT_HOME/locks``): two machines may compute the same stage at once, and then the
second's result replaces the first's.
"""

from __future__ import annotations

import argparse
import os
import sys
from uuid import UUID

__all__ = ["NAME", "clear_result_storage", "result_storage_block", "use_result_storage"]

NAME = "knowlyr-results"


def result_storage_block(url: str):
    """The Prefect storage block for ``url``: ``RemoteFileSystem`` for ``scheme://...``
    (``file://`` excepted), else ``LocalFileSystem`` at the absolute path."""
    from prefect.filesystems import LocalFileSystem, RemoteFileSystem

    if not url:
        raise ValueError("result storage URL is empty: pass s3://bucket/prefix or a path")
    if "://" in url and not url.startswith("file://"):
        return RemoteFileSystem(basepath=url.rstrip("/"))
    path = url.removeprefix("file://")
    return LocalFileSystem(basepath=os.path.abspath(os.path.expanduser(path)))


def use_result_storage(url: str, *, name: str = NAME) -> UUID:
    """Save the block for ``url`` as ``name`` and make it the server's default result
    storage; returns the block's id."""
    from prefect.client.orchestration import get_client

    block_id = result_storage_block(url).save(name, overwrite=True)
    with get_client(sync_client=True) as client:
        client.update_server_default_result_storage(block_id)
    return block_id


def clear_result_storage() -> None:
    """Back to each machine's ``$PREFECT_HOME/storage``."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.clear_server_default_result_storage()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Set the Prefect server's result storage.")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("url", nargs="?", help="fsspec URL (s3://bucket/prefix) or a path")
    group.add_argument("--clear", action="store_true", help="back to $PREFECT_HOME/storage")
    args = ap.parse_args(argv)
    if args.clear:
        clear_result_storage()
        print("result storage: each machine's $PREFECT_HOME/storage")
    else:
        block = use_result_storage(args.url)
        print(f"result storage: {args.url} (block {NAME}, {block})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
