"""The anchor bench's workload: deterministic 20-step OpenHands coding logs (stdlib only).

One log is one ``.jsonl`` file of OpenHands events, one per line, in the shape both the
original knowlyr recorder (``agentrecorder.adapters.openhands``, which reads ``thought`` and
``model`` from the event, ``exit_code`` from ``extras``, the outcome from the finish action's
``outputs.test_result``) and ours (``knowlyr.recorder`` format ``openhands``, which reads the
thought from the tool call's model response) parse completely:

* a user ``message`` with the instruction and ``task_id`` (500 tasks, several runs each);
* 20 agent actions, each answered by its observation (``cause``): ``read`` a file (35%),
  ``edit`` it (``old_str`` -> ``new_str``, 20%), ``run`` pytest (25%) or grep (15%),
  ``run_ipython`` (5%); every output is 500 characters naming files and identifiers (what
  the rule layer's information-utilisation rubric looks for), thoughts 60-120 characters;
* a ``finish`` action whose ``outputs.test_result`` says whether the run succeeded (3 in 4).

The original keeps the 20 tool steps; ours also keeps the finish as a step (21). A log is
about 20 KB; its trajectory's steps about 14 KB of JSON. The same ``(seed, index)`` always
gives the same bytes.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

STEPS = 20
OUTPUT_CHARS = 500
TASKS = 500
MODEL = "claude-3-5-sonnet-20241022"

_WORDS = [
    *("def", "return", "self", "value", "import", "class", "for", "in", "if", "else"),
    *("parse", "config", "check", "update", "read", "write", "error", "result", "module"),
    *("function", "data", "list", "dict", "assert", "test", "path", "line"),
]


def _rng(seed: int, index: int) -> random.Random:
    return random.Random(seed * 1_000_003 + index)


def _output(rng: random.Random, f: str, i: int) -> str:
    body = " ".join(rng.choice(_WORDS) for _ in range(90))
    ident = "".join(rng.choices(string.ascii_lowercase, k=6))
    text = f"{f}:{rng.randrange(1, 400)}: {body} {ident}_{i} src/{rng.choice(_WORDS)}.py ok"
    return text[:OUTPUT_CHARS].ljust(OUTPUT_CHARS)


def log_events(index: int, *, seed: int = 0, steps: int = STEPS) -> list[dict]:
    """The events of log ``index``: instruction, ``steps`` action/observation pairs, finish."""
    rng = _rng(seed, index)
    task = index % TASKS
    files = [f"src/mod_{rng.randrange(50)}/file_{rng.randrange(1000)}.py" for _ in range(4)]
    t0 = 1_738_000_000 + index * 600
    ts = [t0]

    def stamp() -> str:
        ts[0] += rng.randrange(1, 9)
        s = ts[0]
        return f"2025-01-28T{(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:{s % 60:02d}"

    ev: list[dict] = [
        {
            "id": 0,
            "timestamp": stamp(),
            "source": "user",
            "action": "message",
            "model": MODEL,
            "args": {
                "content": f"Fix the failing test in {files[0]} (issue {task}): "
                + " ".join(rng.choice(_WORDS) for _ in range(30)),
                "task_id": f"task-{task:04d}",
            },
        }
    ]
    eid = 1
    edits: list[tuple[str, str, str]] = []
    for i in range(steps):
        f = rng.choice(files)
        thought = f"Look at {f} for step {i}: " + " ".join(
            rng.choice(_WORDS) for _ in range(rng.randrange(3, 9))
        )
        k = rng.random()
        extras: dict = {"exit_code": 0}
        if k < 0.35:
            action, args, obs = "read", {"path": f}, "read"
            extras = {"path": f}
        elif k < 0.55:
            if edits and rng.random() < 0.2:  # undo an earlier edit (the regression rubric)
                p, old, new = rng.choice(edits)
                f, a, b = p, new, old
            else:
                a, b = rng.sample(_WORDS, 2)
            edits.append((f, a, b))
            action, args, obs = "edit", {"path": f, "old_str": a, "new_str": b}, "edit"
            extras = {"path": f}
        elif k < 0.95:
            cmd = f"python -m pytest {f} -q" if k < 0.8 else f"grep -rn {rng.choice(_WORDS)} src"
            action, args, obs = "run", {"command": cmd}, "run"
            extras = {"exit_code": rng.choice((0, 0, 0, 1))}
        else:
            code = f"print(open({f!r}).read()[:200])"
            action, args, obs = "run_ipython", {"code": code}, "run_ipython"
        ev.append(
            {
                "id": eid,
                "timestamp": stamp(),
                "source": "agent",
                "action": action,
                "thought": thought,
                "args": args,
                "tool_call_metadata": {
                    "model_response": {"choices": [{"message": {"content": thought}}]}
                },
            }
        )
        ev.append(
            {
                "id": eid + 1,
                "timestamp": stamp(),
                "source": "agent",
                "cause": eid,
                "observation": obs,
                "content": _output(rng, f, i),
                "extras": extras,
            }
        )
        eid += 2
    ok = index % 4 != 0
    passed = rng.randrange(1, 30)
    ev.append(
        {
            "id": eid,
            "timestamp": stamp(),
            "source": "agent",
            "action": "finish",
            "args": {
                "thought": "The tests pass now." if ok else "I could not fix it.",
                "outputs": {
                    "test_result": {
                        "success": ok,
                        "tests_passed": passed,
                        "tests_failed": 0 if ok else rng.randrange(1, 5),
                    }
                },
            },
        }
    )
    return ev


def log_bytes(index: int, *, seed: int = 0) -> bytes:
    """Log ``index`` as the bytes of its ``.jsonl`` file."""
    return "".join(json.dumps(e) + "\n" for e in log_events(index, seed=seed)).encode()


def log_name(index: int) -> str:
    """The file name of log ``index`` (sorted names follow the index)."""
    return f"oh_{index:07d}.jsonl"


def write_logs(folder: Path, start: int, stop: int, *, seed: int = 0) -> int:
    """Write logs ``start`` .. ``stop - 1`` into ``folder`` (flat: the original's batch
    converter does not walk subfolders); returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    size = 0
    for i in range(start, stop):
        data = log_bytes(i, seed=seed)
        (folder / log_name(i)).write_bytes(data)
        size += len(data)
    return size
