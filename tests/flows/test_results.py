"""Result storage on an fsspec location: with the server's default result storage set by
``deployments.results`` to a ``memory://`` filesystem, a stage's result and its artifact
record are written there, and a re-run is a cache hit read from there."""

from __future__ import annotations

import fsspec
import pytest
from prefect import flow, task

from deployments.results import clear_result_storage, result_storage_block, use_result_storage
from tasks._artifacts import publish_table, republish_cached
from tasks._cache import STAGE_CACHE
from tests.flows.helpers import artifacts, task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")


@task(cache_policy=STAGE_CACHE, task_run_name="square-{x}", on_completion=[republish_cached])
def square(x: int) -> int:
    publish_table("square-counts", [{"x": x, "square": x * x}], "x and its square")
    return x * x


@flow
def squares(x: int) -> int:
    return square(x)


def test_results_live_on_the_fsspec_location_and_a_rerun_reads_them_from_there():
    base = "memory://knowlyr-results-test"
    use_result_storage(base)
    try:
        first = squares(7, return_state=True)
        assert first.result() == 49
        memory = fsspec.filesystem("memory")
        stored = {p.rsplit("/", 1)[-1] for p in memory.ls("/knowlyr-results-test", detail=False)}
        key = next(n for n in stored if n.startswith("square-") and "." not in n)
        assert f"{key}.artifacts.json" in stored

        again = squares(7, return_state=True)
        assert again.result() == 49
        assert set(task_states(again.state_details.flow_run_id).values()) == {"Cached"}
        [art] = [a for a in artifacts(again.state_details.flow_run_id) if a.key == "square-counts"]
        assert art.description.startswith("Cached from run ")
    finally:
        clear_result_storage()


def test_a_path_is_a_local_filesystem_and_an_empty_url_is_refused(tmp_path):
    assert type(result_storage_block(str(tmp_path))).__name__ == "LocalFileSystem"
    assert type(result_storage_block("s3://bucket/prefix")).__name__ == "RemoteFileSystem"
    with pytest.raises(ValueError, match="s3://bucket/prefix or a path"):
        result_storage_block("")
