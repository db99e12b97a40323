"""`knowlyr rollout` shows a progress bar on a terminal: episodes, successes, rate and ETA;
none under --quiet, in CI or when stderr is not a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

ARGV = ["rollout", "knowlyr/conversation", "-n", "6", "--concurrency", "2"]


def _on_a_terminal(*args: str, **env: str) -> str:
    """Run ``knowlyr ARGS`` with a pseudo-terminal as stdout and stderr; its whole output."""
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    environ.update({"COLUMNS": "200", "LINES": "40", **env})
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowlyr", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=environ,
        close_fds=True,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def test_a_terminal_gets_a_bar_with_counts_rate_and_eta():
    out = _on_a_terminal(*ARGV)
    assert "6/6" in out and "episodes, 6 successful" in out, out[-2000:]
    assert "/s" in out and "ETA" in out
    assert "knowlyr/conversation: 6 episodes, 6 successful" in out  # the summary still comes


@pytest.mark.parametrize(("extra", "env"), [(["--quiet"], {}), ([], {"CI": "true"})])
def test_no_bar_when_quiet_or_in_ci(extra, env):
    out = _on_a_terminal(*ARGV, *extra, **env)
    assert "ETA" not in out and "knowlyr/conversation: 6 episodes, 6 successful" in out


def test_no_bar_when_stderr_is_not_a_terminal():
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    r = subprocess.run(
        [sys.executable, "-m", "knowlyr", *ARGV], capture_output=True, text=True, env=environ
    )
    assert r.returncode == 0 and "ETA" not in r.stderr and "6 episodes" in r.stdout


def test_training_shows_a_bar_with_steps_loss_and_eta_then_names_its_losses(tmp_path):
    from knowlyr.agents import ExpertAgent
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect

    trajs = collect("knowlyr/conversation", ExpertAgent, 16, env_kwargs={"family": "order_status"})
    export_sft(trajs).save(tmp_path / "sft")
    argv = ["train", "sft", str(tmp_path / "sft"), "-o", str(tmp_path / "run"), "--epochs", "2",
            "--induction-steps", "0"]  # fmt: skip
    out = _on_a_terminal(*argv)
    assert "training" in out and "steps, loss" in out and "steps/s" in out and "ETA" in out
    assert "trained 4 steps in" in out and "mean train loss" in out  # TRL's train_loss named
    assert "{'train_runtime'" not in out and "it/s]" not in out  # no HF dicts, no tqdm bar
    quiet = _on_a_terminal(*argv, "--quiet")
    assert "ETA" not in quiet and "trained 4 steps in" in quiet and "it/s]" not in quiet
    piped = subprocess.run(
        [sys.executable, "-m", "knowlyr", *argv],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )
    assert piped.returncode == 0, piped.stderr
    assert "step 4/4: train_runtime=" in piped.stderr  # a log file gets the logger's lines
    assert "ETA" not in piped.stderr and "trained 4 steps in" in piped.stderr
