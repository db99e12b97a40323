"""One exit-code convention and one error style across the CLI (issue #39).

Exit 2: a usage error (bad option or argument, unknown name, missing input file), with
"Did you mean ...?" where a name is looked up. Exit 1: the work itself failed. Every error is
an ``error: ...`` line (click's own usage errors too), never "Error:" or a rich panel, and a
command that fails on its input writes no output file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowlyr.cli import EXIT_FAILURE, EXIT_USAGE, app

runner = CliRunner()
ENV = {"COLUMNS": "100", "TERMINAL_WIDTH": "100", "NO_COLOR": "1"}

# (argv with {missing} / {out} / {junk} / {store} placeholders, exit code, text the output must hold;
# an env id's suggestions may go on: other tests of the same process register envs such as
# tests/slow-conversation)
CASES = [
    # click's own usage errors, in our style
    (["reawrd"], 2, "No such command 'reawrd'. Did you mean 'reward'"),
    (["rollout"], 2, "Missing argument"),
    (["rollout", "knowlyr/conversation", "--bogus"], 2, "No such option: --bogus"),
    # names that are looked up
    (["rollout", "knowlyr/conversatoin"], 2, "Did you mean 'knowlyr/conversation'"),
    (["rollout", "conversation"], 2, "Did you mean 'knowlyr/conversation'"),
    (["rollout", "knowlyr/conversation", "--agent", "expret"], 2, "Did you mean 'expert'?"),
    (["tasks", "conversaton"], 2, "Did you mean 'conversation'?"),
    (["tasks", "conversation", "--family", "order_stat"], 2, "Did you mean 'order_status'?"),
    (["task", "nope-1"], 2, "no task 'nope-1'"),
    (["profiles", "codng"], 2, "Did you mean 'coding'?"),
    (["reward", "rubrics", "conversatoin"], 2, "Did you mean 'conversation'?"),
    (["reward", "score", "{junk}", "-d", "codng"], 2, "Did you mean 'coding'?"),
    (["reward", "score", "{junk}", "--judge", "antropic:m"], 2, "Did you mean 'anthropic'?"),
    (["export", "benchmark", "conversaton", "-o", "{out}"], 2, "Did you mean 'conversation'?"),
    (
        ["export", "benchmark", "conversation", "-o", "{out}", "--env", "knowlyr/conversaton"],
        2,
        "Did you mean 'knowlyr/conversation'",
    ),
    (["train", "sft", "{missing}", "--chat-template", "chatml_trainng"], 2, "'chatml_training'"),
    (["sandbox", "run", "--backend", "contaner", "true"], 2, "Did you mean 'container'?"),
    (["sandbox", "gc", "--backend", "locl"], 2, "Did you mean 'local'?"),
    (["sandbox", "exec", "no-such-sandbox", "--tool", "bsh"], 2, "Did you mean 'bash'?"),
    (["serve", "{missing}", "--backend", "vlm"], 2, "Did you mean 'vllm'?"),
    # missing input files
    (
        ["rollout", "knowlyr/conversation", "--tasks", "{missing}"],
        2,
        "missing.jsonl does not exist",
    ),
    (["reward", "score", "{missing}", "-o", "{out}"], 2, "missing.jsonl does not exist"),
    (["reward", "leaderboard", "{missing}"], 2, "missing.jsonl does not exist"),
    (["reward", "preferences", "{missing}", "-o", "{out}"], 2, "missing.jsonl does not exist"),
    (["export", "sft", "{missing}", "-o", "{out}"], 2, "missing.jsonl does not exist"),
    (["train", "sft", "{missing}"], 2, "missing.jsonl does not exist"),
    (["record", "convert", "{missing}", "-o", "{out}"], 2, "no such file or directory"),
    (["mcp", "serve", "--root", "{missing}"], 2, "is not an existing directory"),
    (["reward", "score", "--store", "{junk}"], 2, "is a file, not a store folder"),
    # the work failed: exit 1
    (["reward", "score", "{junk}", "-o", "{out}"], 1, "nothing was scored"),
    (["reward", "score", "--store", "{store}"], 1, "has no trajectories yet"),
]


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("this is no agent log\n")
    names = {
        "missing": tmp_path / "missing.jsonl",
        "out": tmp_path / "out",
        "junk": junk,
        "store": tmp_path / "store",
    }
    return [a.format(**{k: str(v) for k, v in names.items()}) for a in argv]


@pytest.mark.parametrize(("argv", "code", "text"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_exit_code_and_message(argv, code, text, tmp_path):
    r = runner.invoke(app, _argv(argv, tmp_path), env=ENV)
    assert r.exit_code == code, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert text in r.output
    lines = r.output.splitlines()
    assert any(line.startswith("error: ") for line in lines), r.output
    assert not any(line.lstrip().startswith("Error") for line in lines), r.output
    assert "Traceback" not in r.output and "╭" not in r.output
    assert not (tmp_path / "out").exists()  # no output file, folder or store on a failure
    assert not list(tmp_path.glob("*.rejected.jsonl"))


def test_the_codes_are_named_and_documented():
    assert (EXIT_FAILURE, EXIT_USAGE) == (1, 2)
    r = runner.invoke(app, ["--help"], env=ENV)
    assert r.exit_code == 0
    assert "Exit status: 0 done, 1 the work failed, 2 a usage error" in " ".join(r.output.split())


def test_a_real_process_gets_the_code_and_one_error_line_on_stderr():
    out = subprocess.run(
        [sys.executable, "-m", "knowlyr", "profiles", "codng"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        check=False,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: unknown domain profile 'codng'")
    assert out.stderr.rstrip().endswith("Did you mean 'coding'?")
    assert len(out.stderr.strip().splitlines()) == 1
