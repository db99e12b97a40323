"""The converted-model cache (what smollm2_checkpoint uses) is safe under concurrency."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyr.train.models import cached_folder


def _complete(path: Path) -> bool:
    return (path / "config.json").is_file()


# A separate interpreter per converter (not fork: a forked pytest worker inherits its threads
# and exit handlers), each building the folder as a slow conversion would.
_CONVERTER = """
import json, os, sys, time
from pathlib import Path
from knowlyr.train.models import cached_folder

target, log = Path(sys.argv[1]), Path(sys.argv[2])

def build(tmp):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    (tmp / "weights.bin").write_bytes(b"w" * 100_000)
    time.sleep(0.3)  # a slow conversion: the others arrive while it runs
    (tmp / "config.json").write_text("{}")

path = cached_folder(target, build, is_complete=lambda p: (p / "config.json").is_file())
print(json.dumps([str(path), sorted(p.name for p in path.iterdir())]))
"""


def test_processes_converting_at_once_build_once_and_see_a_complete_folder(tmp_path):
    target, log = tmp_path / "models" / "m", tmp_path / "builds.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERTER, str(target), str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out) == [str(target), ["config.json", "weights.bin"]]
    assert len(log.read_text().split()) == 1  # one conversion, the others waited for it
    assert sorted(p.name for p in target.parent.iterdir()) == ["m", "m.lock"]  # no temp left


def test_a_failed_conversion_leaves_no_cache_and_the_next_call_builds(tmp_path):
    target = tmp_path / "m"

    def broken(tmp: Path) -> None:
        (tmp / "weights.bin").write_bytes(b"half")
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        cached_folder(target, broken, is_complete=_complete)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lock"]
    cached_folder(target, lambda tmp: (tmp / "config.json").write_text("{}"), is_complete=_complete)
    assert _complete(target)


def test_an_incomplete_or_older_cache_is_replaced(tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    (target / "stale.bin").write_bytes(b"old")  # no config.json: an older layout
    cached_folder(target, lambda tmp: (tmp / "config.json").write_text("{}"), is_complete=_complete)
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    # a complete cache is returned as it is, without building
    cached_folder(target, lambda tmp: pytest.fail("built again"), is_complete=_complete)
