"""``knowlyr record convert / validate / diff / formats`` through typer's CliRunner."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.recorder import list_formats
from knowlyr.trajectory import Trajectory

runner = CliRunner()


def test_convert_directory_writes_trajectories_and_quarantine(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "trajs.jsonl"
    res = runner.invoke(app, ["record", "convert", str(fixtures_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "read 9  converted 8  rejected 1" in res.output
    assert "swe_agent=3" in res.output and "openhands=2" in res.output
    rows = [Trajectory.from_json(x) for x in out.read_bytes().splitlines()]
    assert len(rows) == 8
    assert {t.source.format for t in rows} == {
        "openhands",
        "openhands_output",
        "swe_agent",
        "knowlyr_legacy",
    }
    side = tmp_path / "out" / "trajs.rejected.jsonl"
    (rej,) = [orjson.loads(x) for x in side.read_bytes().splitlines()]
    assert rej["path"].endswith("browser_profile.json") and "no adapter recognises" in rej["reason"]
    # the quarantined record is kept whole
    assert rej["raw"] == (fixtures_dir / "knowlyr/browser_profile.json").read_text()
    assert "browser_profile.json" in res.output  # the reason is printed too


def test_convert_round_trips_its_own_output(fixtures_dir: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert (
        runner.invoke(
            app, ["record", "convert", str(fixtures_dir / "swe_agent"), "-o", str(a)]
        ).exit_code
        == 0
    )
    res = runner.invoke(app, ["record", "convert", str(a), "-o", str(b)])
    assert res.exit_code == 0 and "(knowlyr=3)" in res.output
    ids_a = [orjson.loads(x)["id"] for x in a.read_bytes().splitlines()]
    ids_b = [orjson.loads(x)["id"] for x in b.read_bytes().splitlines()]
    assert ids_a == ids_b
    assert not (tmp_path / "b.rejected.jsonl").exists()


def test_convert_with_format_and_strict(fixtures_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    res = runner.invoke(
        app,
        [
            "record",
            "convert",
            str(fixtures_dir / "openhands/basic.json"),
            "-f",
            "swe_agent",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 1  # nothing converted
    assert "swe_agent: expected a JSON object" in res.output
    res = runner.invoke(
        app, ["record", "convert", str(fixtures_dir / "knowlyr"), "--strict", "-o", str(out)]
    )
    assert res.exit_code == 1 and "converted 1  rejected 1" in res.output
    res = runner.invoke(app, ["record", "convert", str(fixtures_dir), "-f", "nope", "-o", str(out)])
    assert res.exit_code == 2 and "unknown format 'nope'" in res.output


def test_validate(fixtures_dir: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["record", "validate", str(fixtures_dir / "swe_agent")])
    assert res.exit_code == 0 and "3 record(s), 3 ok, 0 with problems" in res.output
    res = runner.invoke(app, ["record", "validate", str(fixtures_dir / "knowlyr")])
    assert res.exit_code == 1
    assert "REJECTED" in res.output and "browser_profile.json" in res.output
    # a trajectory whose stored id no longer matches its content
    good = tmp_path / "t.jsonl"
    runner.invoke(
        app,
        [
            "record",
            "convert",
            str(fixtures_dir / "knowlyr/browser_trajectory.json"),
            "-o",
            str(good),
        ],
    )
    doc = orjson.loads(good.read_bytes())
    doc["steps"] = []
    bad = tmp_path / "edited.json"
    bad.write_bytes(orjson.dumps(doc))
    res = runner.invoke(app, ["record", "validate", str(bad)])
    assert res.exit_code == 1 and "no steps" in res.output


def test_diff(fixtures_dir: Path, tmp_path: Path) -> None:
    a = fixtures_dir / "swe_agent/6e44b9__sweagenttestrepo-1c2844.traj"
    b = fixtures_dir / "swe_agent/swe-agent__test-repo-i1.traj"
    res = runner.invoke(app, ["record", "diff", str(a), str(b)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "find_file×1" in out and "submitted" in out
    assert "edit(search=def division" in out and "edit(start_line=4, end_line=4)" in out
    assert "first divergence at step 0" in out
    copy = tmp_path / "same.traj"  # task id comes from replay_config, not the file name
    shutil.copy(a, copy)
    res = runner.invoke(app, ["record", "diff", str(a), str(copy)])
    assert "same content (identical content hash)" in res.output
    res = runner.invoke(
        app, ["record", "diff", str(b), str(fixtures_dir / "knowlyr/browser_profile.json")]
    )
    assert res.exit_code == 2 and "no adapter recognises" in res.output


def test_formats_lists_every_adapter() -> None:
    res = runner.invoke(app, ["record", "formats"])
    assert res.exit_code == 0
    names = [line.split()[0] for line in res.output.splitlines() if line.strip()]
    assert names == list_formats()
    assert "claude_code        session" in res.output


def test_schema_command_still_works() -> None:
    res = runner.invoke(app, ["schema"])
    assert res.exit_code == 0 and '"Trajectory"' in res.output
