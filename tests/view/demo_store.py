"""A small real store for the viewer's tests and the docs' screenshots.

- the real agent logs of ``tests/data/fixtures`` (SWE-agent, OpenHands, the knowlyr browser
  example) and the three real mini-swe-agent runs of ``tests/recorder/data/mini_swe_agent``
  (13 to 31 steps, with per-step tokens and cost) through one ``ingest``: runs, sightings and
  raw-log blobs;
- three attempts at one coding task (``calc-add``: a fix with a file edit that passes, a
  whole-file rewrite that fails, and one that gives up) and a browser episode whose
  ``screenshot`` step names a PNG blob, added by one ``collect`` run;
- rewards: the rule layer for everything (``score_unscored``), then rules + an LLM judge for
  the ``calc-add`` attempts, the judge being the real OpenAI SDK against
  :class:`knowlyr.reward.testing.JudgeServer` on loopback (its rationales are per step);
- preference pairs from those rewards, and an SFT dataset exported from the store.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from knowlyr.store import Store
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)

CALC_TASK = "calc-add"
#: real mini-swe-agent runs (see their README)
MINI_SWE_AGENT = Path(__file__).resolve().parents[1] / "recorder" / "data" / "mini_swe_agent"
_FAILING = (
    "F                                                                        [100%]\n"
    "=================================== FAILURES ===================================\n"
    "___________________________________ test_add ___________________________________\n"
    "\n    def test_add():\n>       assert add(2, 3) == 5\nE       assert -1 == 5\n"
    "E        +  where -1 = add(2, 3)\n\ntest_calc.py:4: AssertionError\n"
    + "".join(f"  note {i}: rerun with -vv for the full comparison\n" for i in range(30))
    + "=========================== short test summary info ============================\n"
    "FAILED test_calc.py::test_add - assert -1 == 5\n1 failed in 0.02s\n"
)


def png(width: int, height: int) -> bytes:
    """A small PNG (a browser-like frame: a title bar and three result rows)."""

    def pixel(x: int, y: int) -> bytes:
        if y < 14:
            return b"\x24\x29\x2f"
        if 24 <= y < 34 and 10 <= x < width - 10:
            return b"\xd0\xd7\xde"
        for k in range(3):
            top = 44 + 22 * k
            if top <= y < top + 12 and 10 <= x < (width - 10) * (3 - k) // 3:
                return b"\x09\x69\xda" if x < 60 else b"\x57\x60\x6a"
        return b"\xff\xff\xff"

    raw = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _task() -> TaskInfo:
    return TaskInfo(
        task_id=CALC_TASK,
        domain="coding",
        suite="demo",
        instruction="test_calc.py::test_add fails: add(2, 3) returns -1. Fix calc.py.",
    )


def _step(i: int, thought: str, tool: str, params: dict, output: str, code: int = 0) -> Step:
    return Step(
        index=i,
        thought=thought,
        action=ToolCall(tool=tool, params=params),
        observation=Observation(output=output, exit_code=code),
    )


def calc_attempts() -> tuple[Trajectory, Trajectory, Trajectory]:
    """Three attempts at ``calc-add``: fixed, wrong rewrite, gave up."""
    start = _step(0, "Run the failing test first.", "bash", {"command": "pytest -q"}, _FAILING, 1)
    read = _step(
        1,
        "Look at add().",
        "read_file",
        {"path": "calc.py"},
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
    )
    fixed = Trajectory(
        task=_task(),
        agent=AgentInfo(name="expert", model="scripted"),
        steps=[
            start,
            read,
            _step(
                2,
                "add() subtracts: replace the operator.",
                "edit_file",
                {
                    "path": "calc.py",
                    "old_str": "def add(a, b):\n    return a - b",
                    "new_str": "def add(a, b):\n    return a + b",
                },
                "Edited calc.py",
            ),
            _step(3, "Check the fix.", "bash", {"command": "pytest -q"}, "1 passed in 0.01s\n"),
            _step(4, "Tests pass.", "submit", {"answer": "add() now adds"}, "submitted"),
        ],
        outcome=Outcome(
            success=True,
            score=1.0,
            terminated=True,
            label_source="env",
            tests_passed=1,
            tests_failed=0,
            submission="--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n",
        ),
    )
    rewrite = Trajectory(
        task=_task(),
        agent=AgentInfo(name="gpt", model="gpt-4o-mini"),
        steps=[
            start,
            _step(
                1,
                "Rewrite calc.py so add is never negative.",
                "write_file",
                {"path": "calc.py", "content": "def add(a, b):\n    return abs(a - b)\n"},
                "Wrote calc.py",
            ),
            _step(2, "Check.", "bash", {"command": "pytest -q"}, _FAILING.replace("-1", "1"), 1),
            _step(3, "Good enough.", "submit", {"answer": "done"}, "submitted"),
        ],
        outcome=Outcome(
            success=False,
            score=0.0,
            terminated=True,
            label_source="env",
            tests_passed=0,
            tests_failed=1,
        ),
    )
    gave_up = Trajectory(
        task=_task(),
        agent=AgentInfo(name="random", model=None),
        steps=[start, Step(index=1, message="I cannot fix this.")],
        outcome=Outcome(success=False, score=0.0, truncated=True, label_source="env"),
    )
    return fixed, rewrite, gave_up


def browser_episode(shot: str) -> Trajectory:
    """A browser episode whose ``screenshot`` step names blob ``shot``."""
    return Trajectory(
        task=TaskInfo(
            task_id="docs-search",
            domain="browser",
            suite="demo",
            instruction="Find the README of knowlyr-gym.",
        ),
        agent=AgentInfo(name="browser-agent", model="claude-sonnet-4-5"),
        steps=[
            _step(0, "Open the search page.", "navigate", {"url": "https://example.org"}, "loaded"),
            Step(
                index=1,
                thought="Look at the results.",
                action=ToolCall(tool="screenshot", params={}),
                observation=Observation(output="3 results", exit_code=0),
                metadata={"screenshot": shot},
            ),
            _step(2, "Open the first result.", "click", {"element_id": "result-0"}, "README"),
        ],
        outcome=Outcome(success=True, score=1.0, terminated=True, label_source="env"),
        source=Source(format="knowlyr"),
    )


@dataclass
class DemoStore:
    """The store and the ids the tests look for."""

    store: Store
    fixed: Trajectory
    rewrite: Trajectory
    gave_up: Trajectory
    browser: Trajectory
    screenshot: str
    collect_run: str
    ingest_run: str
    dataset: str
    mini_swe_agent: dict[str, Trajectory]  # the mini-swe-agent runs by task id


#: what the demo judge says about a step, by a text its CURRENT STEP holds (first match)
JUDGEMENTS = [
    (
        "return a + b",
        9.0,
        "Replaces the wrong operator in add(): the fix the failing test asks for.",
    ),
    ("abs(a - b)", 2.0, "Rewrites add() with abs(): hides the sign instead of fixing it."),
    ("1 passed", 9.0, "Re-runs the tests after the edit, and they pass."),
    ("1 failed", 5.0, "Runs the failing test: it shows what is wrong, but nothing changed yet."),
    ("submit", 7.0, "Submits; whether that was right depends on the tests above."),
    ("", 6.0, "Reads the code the failing test points at."),
]


def _judge_answer(prompt: str) -> str:
    """A judgement of the prompt's current step by :data:`JUDGEMENTS`."""
    import json

    from knowlyr.reward.testing import default_answer

    names = json.loads(default_answer(prompt))["scores"]
    current = prompt.split("CURRENT STEP", 1)[-1]
    score, why = next((s, w) for needle, s, w in JUDGEMENTS if needle in current)
    return json.dumps({"scores": dict.fromkeys(names, score), "rationale": why})


def build_demo_store(path: str | Path, fixtures: Path) -> DemoStore:
    """Build the demo store at ``path`` from the real logs under ``fixtures``."""
    from knowlyr.export.store_io import export_from_store
    from knowlyr.reward.backends import make_backend
    from knowlyr.reward.engine import RewardEngine
    from knowlyr.reward.judge import LLMJudge
    from knowlyr.reward.store_io import preferences_from_store, score_unscored
    from knowlyr.reward.testing import JudgeServer
    from knowlyr.store.ingest import ingest

    store = Store.open(str(path))
    ingested = ingest(store, [fixtures, MINI_SWE_AGENT])
    mini_ids = store.read("trajectories", columns=["id", "source_format"])
    mini = {
        t.task.task_id: t
        for t in (store.get_trajectory(i) for i, f in mini_ids.iter_rows() if f == "mini_swe_agent")
    }
    fixed, rewrite, gave_up = calc_attempts()
    shot = store.put_blob(png(240, 120))
    browser = browser_episode(shot)
    collected = store.add_trajectories([fixed, rewrite, gave_up, browser], run_id="collect-demo-1")
    store.record_run("collect", outputs={"trajectories": collected}, run_id="collect-demo-1")
    rules = score_unscored(store)
    with JudgeServer(responder=_judge_answer) as server:
        backend = make_backend("openai:demo-judge", base_url=server.openai_url, api_key="k")
        judge = LLMJudge(backend, profile="coding", concurrency=4, max_retries=1)
        engine = RewardEngine("coding", layers=("rules", "judge"), judge=judge)
        judged = engine.score([fixed, rewrite, gave_up])
    engine.save(store, judged)
    preferences_from_store(
        store, reward_config_hashes=[*rules.config_hashes, engine.config_hash], min_margin=0.0
    )
    exported = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=rules.config_hashes,
        kind="sft",
        split=None,
        only_success=True,
    )
    return DemoStore(
        store=store,
        fixed=fixed,
        rewrite=rewrite,
        gave_up=gave_up,
        browser=browser,
        screenshot=shot,
        collect_run="collect-demo-1",
        ingest_run=ingested.run_id,
        dataset=exported.name,
        mini_swe_agent=mini,
    )
