"""The trajectory page as a reader of long runs uses it, over real HTTP: the step outline
with jump links and a failure filter, the header's totals, thoughts as markdown, commands as
shell, usage the log does not record shown as "unknown", the domain profile the facets are
read against, and the legend for score vs reward. The long runs are the real mini-swe-agent
runs of ``tests/recorder/data/mini_swe_agent`` (in the demo store)."""

from __future__ import annotations

import html
import re

import polars as pl
import pytest

from tests.view.conftest import Served
from tests.view.test_pages import text

_OUTLINE = re.compile(r'<li(?: class="failed")?><a href="#step-(\d+)">#(\d+)</a>')


def outline(r) -> str:
    """The HTML of the page's step outline."""
    return r.text.split('<nav class="outline', 1)[1].split("</nav>", 1)[0]


def step_block(r, i: int) -> str:
    """The HTML of step ``i``'s card."""
    return r.text.split(f'id="step-{i}"', 1)[1].split('<div class="card', 1)[0]


def test_outline_jumps_to_every_step_of_a_real_mini_swe_agent_run(http, demo):
    t = demo.mini_swe_agent["astropy__astropy-7606"]
    assert len(t.steps) == 31
    r = http.get(f"/t/{t.id}")
    assert r.status_code == 200
    nav = outline(r)
    jumps = _OUTLINE.findall(nav)
    assert [int(a) for a, _ in jumps] == list(range(31)) == [int(b) for _, b in jumps]
    for s in t.steps:  # every jump has its target, and says what the step ran
        assert r.text.count(f'id="step-{s.index}"') == 1
        first = s.action.params["command"].strip().split("\n", 1)[0][:90]
        entry = nav.split(f'href="#step-{s.index}"', 1)[1].split("</li>", 1)[0]
        assert first in html.unescape(entry) and '<span class="tool">bash</span>' in entry
    assert "31 steps · 0 failed" in text(r).replace("Outline · ", "")


def test_header_totals_of_a_real_mini_swe_agent_run(http, demo):
    for t in demo.mini_swe_agent.values():
        r = http.get(f"/t/{t.id}")
        prompt = sum(s.usage.prompt_tokens for s in t.steps)
        completion = sum(s.usage.completion_tokens for s in t.steps)
        cost = sum(s.usage.cost_usd for s in t.steps)
        # the agent's own total agrees with the steps' sum
        assert cost == pytest.approx(t.metadata["model_stats"]["instance_cost"])
        page = text(r)
        assert f"tokens {prompt:,} in / {completion:,} out cost ${cost:.4f}" in page
        # mini-swe-agent records no times: unknown, not 0
        assert "time latency unknown · duration unknown" in page


def test_totals_of_a_timed_openhands_run(http, demo):
    row = demo.store.read(
        "trajectories",
        filter=pl.col("source_path").str.ends_with("basic_interactions.json"),
        columns=["id"],
    )
    t = demo.store.get_trajectory(row["id"][0])
    r = http.get(f"/t/{t.id}")
    page = text(r)
    stamps = [s.timestamp for s in t.steps]
    span = (stamps[-1] - stamps[0]).total_seconds() + (t.steps[-1].duration_s or 0)
    assert span > 60
    minutes, seconds = divmod(round(span), 60)
    assert f"duration {minutes} min {seconds} s" in page
    # two of its three steps have no usage at all: the total says how many did
    known = [s.usage for s in t.steps if s.usage is not None]
    assert len(known) == 1
    assert (
        f"tokens {known[0].prompt_tokens:,} in / {known[0].completion_tokens:,} out "
        "(1 of 3 steps recorded them) cost unknown"
    ) in page


def test_usage_the_log_does_not_record_is_unknown_not_zero(http, demo):
    """OpenHands' resolver output records each step's cost but no token counts."""
    rows = demo.store.read(
        "trajectories", filter=pl.col("source_format") == "openhands_output", columns=["id"]
    )
    t = demo.store.get_trajectory(rows["id"][0])
    s0 = t.steps[0]
    assert s0.usage.prompt_tokens is None and s0.usage.cost_usd is not None
    r = http.get(f"/t/{t.id}")
    block = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", step_block(r, 0))).split())
    assert f"tokens unknown in / unknown out, cost ${s0.usage.cost_usd:.4f}" in block
    assert "tokens 0 in" not in text(r)
    page = text(r)
    assert "tokens unknown in / unknown out" in page.split("Instruction", 1)[0]
    total = sum(s.usage.cost_usd for s in t.steps)
    assert f"cost ${total:.4f} (sum over the steps)" in page


def test_failure_filter_shows_the_failed_steps(http, demo):
    t = demo.mini_swe_agent["django__django-15277"]
    failed = [s.index for s in t.steps if s.action.tool == "invalid_action"]
    assert failed == [6]
    r = http.get(f"/t/{t.id}")
    nav = outline(r)
    assert '<li class="failed"><a href="#step-6">' in nav and "✗ invalid action" in nav
    assert nav.count('<li class="failed">') == 1
    assert f'href="/t/{t.id}?steps=failed"' in nav and "show failed steps only" in nav
    assert "failed: invalid action" in text(r) and "27 · 1 failed" in text(r)
    only = http.get(f"/t/{t.id}", params={"steps": "failed"})
    assert only.status_code == 200
    assert only.text.count('<div class="step">') == 1 and 'id="step-6"' in only.text
    # the outline still lists every step; the others jump back to the full page
    assert len(_OUTLINE.findall(outline(only))) == 1
    assert f'<a href="/t/{t.id}#step-0">#0</a>' in outline(only)
    assert "showing failed steps only" in text(only) and "show all steps" in text(only)
    # a failing command (exit 1) is a failed step too, and the filter keeps the config
    rules = demo.store.read(
        "rewards",
        filter=(pl.col("trajectory_id") == demo.fixed.id) & pl.col("judge").is_null(),
        columns=["config_hash"],
    )["config_hash"][0]
    r = http.get(f"/t/{demo.fixed.id}", params={"config": rules})
    assert f"/t/{demo.fixed.id}?steps=failed&amp;config={rules}" in r.text
    only = http.get(f"/t/{demo.fixed.id}", params={"steps": "failed", "config": rules})
    assert re.findall(r'id="step-(\d+)"', only.text) == ["0"] and "failed: exit 1" in text(only)
    bad = http.get(f"/t/{t.id}", params={"steps": "broken"})
    assert bad.status_code == 400 and "steps='broken': expected 'failed'" in text(bad)


def test_thoughts_are_markdown_and_commands_are_shell(http, demo):
    t = demo.mini_swe_agent["django__django-15277"]
    s6 = t.steps[6]
    assert "```python" in s6.thought
    r = http.get(f"/t/{t.id}")
    block = step_block(r, 6)
    thought = block.split('<div class="thought md hl">', 1)[1].split('<div class="label">', 1)[0]
    assert '<pre><code class="language-python">' in thought and "```" not in thought
    assert "<code>django/db/models/fields/__init__.py</code>" in thought  # inline code
    assert "font-style:italic" not in r.text.split(".thought", 1)[1].split("}", 1)[0]
    # a bash action is a shell block, not a JSON document
    s0 = t.steps[0]
    block = step_block(r, 0)
    assert '<pre class="code bash"><code>' in block
    assert html.unescape(re.sub(r"<[^>]+>", "", block)).count(s0.action.params["command"]) == 1
    assert '"command"' not in html.unescape(block)
    # other tools keep their parameters as JSON
    r = http.get(f"/t/{demo.fixed.id}")
    assert "&#34;path&#34;: &#34;calc.py&#34;" in step_block(r, 1)


def test_domain_profile_per_trajectory(http, demo, tmp_path):
    """The browser episode's facets are read against the browser profile: those it does not
    weigh are struck through, and a reward scored under coding says so."""
    r = http.get(f"/t/{demo.browser.id}")
    page = text(r)
    assert "domain profile browser (Browser agent) weighs 8 facets" in page
    assert "this reward: scored under the browser profile (rules)" in page
    row = http.get("/", params={"task": "docs-search"}).text.split("<tbody>", 1)[1]
    assert '<td>docs-search</td><td class="muted small">browser</td>' in row  # the list too
    assert "struck through: no_setback, non_regression" in page
    other = step_block(r, 0).split('<div class="facets other"', 1)[1].split("</div>", 1)[0]
    assert "non_regression 1.00" in other and "command_success" not in other
    r = http.get(f"/t/{demo.fixed.id}")  # coding, with a judge: its config is its own
    page = text(r)
    assert "domain profile coding (Coding agent)" in page
    assert "is not a built-in profile's rules-only config" in page
    assert '<div class="facets other"' not in r.text

    # the same browser episode scored under the coding profile
    from knowlyr.reward.store_io import engine_for
    from knowlyr.store import Store
    from knowlyr.view import create_app

    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories([demo.browser], run_id="collect-1")
    engine = engine_for("browser", profile="coding")
    engine.save(store, engine.score([demo.browser]))
    with Served(create_app(store.url)) as client:
        page = text(client.get(f"/t/{demo.browser.id}"))
    assert "domain profile browser (Browser agent)" in page
    assert "this reward was scored under the coding profile, not this trajectory's browser" in page


def test_legend_says_what_score_and_reward_are(http, demo):
    r = http.get("/")
    legend = text(r).split("score :", 1)[1]
    assert legend.startswith(" the outcome's own score, as the log or the environment recorded")
    assert "reward : the reward stage's total under the trajectory's newest reward config" in legend
    assert 'title="the outcome&#39;s own score' in r.text  # and on the column headers
    page = text(http.get(f"/t/{demo.fixed.id}"))
    assert "score : the outcome's own score" in page
    assert "reward : the reward stage's total" in page


def test_markup_from_a_log_is_text(tmp_path):
    """A hostile log: raw HTML in a thought, a command, an observation and a message is
    escaped, and a javascript: link in a thought is not a link (markdown keeps it so)."""
    from knowlyr.store import Store
    from knowlyr.trajectory import (
        AgentInfo,
        Observation,
        Outcome,
        Step,
        TaskInfo,
        ToolCall,
        Trajectory,
    )
    from knowlyr.view import create_app

    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    traj = Trajectory(
        task=TaskInfo(task_id="evil", domain="coding", instruction=evil),
        agent=AgentInfo(name="evil"),
        steps=[
            Step(
                index=0,
                thought=f"look {evil} [click](javascript:alert(1))\n\n```html\n{evil}\n```",
                action=ToolCall(tool="bash", params={"command": f"echo '{evil}'"}),
                observation=Observation(output=evil, exit_code=1),
            ),
            Step(index=1, message=evil),
        ],
        outcome=Outcome(success=False),
    )
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories([traj], run_id="evil-1")
    with Served(create_app(store.url)) as client:
        r = client.get(f"/t/{traj.id}")
    assert r.status_code == 200
    body = r.text.split("</head>", 1)[1]
    assert "<script" not in body and "<img" not in body  # as text only: &lt;img ... onerror
    assert "javascript:" not in body.replace("[click](javascript:alert(1))", "")
    assert 'href="javascript' not in body
    assert body.count("&lt;script&gt;") >= 4  # instruction, thought, command, output...
