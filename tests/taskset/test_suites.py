"""Splits, seeded sampling and the answer checks of the conversation and knowledge suites."""

from __future__ import annotations

import pytest

from knowlyr.errors import ConfigError
from knowlyr.taskset import Task, get_suite, get_task, list_suites, sample, split_of
from knowlyr.taskset.conversation import STATUSES, ServiceDB, contains_fact, evaluate_conversation
from knowlyr.taskset.knowledge import evaluate_knowledge, search_kb
from knowlyr.trajectory import TaskInfo

SUITES = ["coding", "conversation", "engineering", "advisory", "discussion"]


def test_builtin_suites_are_listed():
    assert set(SUITES) <= set(list_suites())
    with pytest.raises(ConfigError, match="known suites"):
        get_suite("cooking")


@pytest.mark.parametrize("name", SUITES)
def test_train_and_heldout_never_share_a_task(name):
    suite = get_suite(name)
    train, held = set(suite.select(split="train")), set(suite.select(split="heldout"))
    assert train and held and not train & held
    assert len(train) + len(held) == len(suite)
    assert 0.1 < len(held) / len(suite) < 0.3
    t = suite.get(sorted(held)[0])
    assert t.split == "heldout" == split_of(t.task_id)


@pytest.mark.parametrize("name", SUITES)
def test_sample_is_seeded_and_respects_split_and_family(name):
    suite = get_suite(name)
    fam = suite.families[-1]
    a = sample(name, 5, seed=3, split="train", family=fam)
    b = sample(name, 5, seed=3, split="train", family=fam)
    c = sample(name, 5, seed=4, split="train", family=fam)
    assert [t.task_id for t in a] == [t.task_id for t in b] != [t.task_id for t in c]
    assert {t.split for t in a} == {"train"} and {t.family for t in a} == {fam}
    assert all(isinstance(t, TaskInfo) and t.suite == name and t.domain == name for t in a)
    assert get_task(a[0].task_id) == a[0]


def test_sample_errors_name_the_fix():
    with pytest.raises(ConfigError, match="replace=True"):
        sample("coding", 10_000)
    with pytest.raises(ConfigError, match="families are"):
        sample("conversation", 1, family="weather")
    assert len(sample("coding", 500, replace=True)) == 500


def test_public_info_hides_the_solution():
    t = get_suite("coding").task(0)
    info = t.public_info()
    assert set(info) == {"task_id", "domain", "suite", "instruction", "metadata"}
    assert "fixed_source" not in str(info) and t.data["fixed_source"] not in str(info)


def test_order_status_family_is_short_for_tiny_models():
    for t in sample("conversation", 50, seed=0, family="order_status"):
        oid = t.data["order_id"]
        assert len(oid) == 5 and oid.isalnum() and oid.upper() == oid
        assert len(t.instruction) < 45
        assert t.expected_facts[0] in STATUSES
        db = ServiceDB(t.data)
        assert len(db.describe_order(oid)) < 30


def _apply(db: ServiceDB, action: dict) -> None:
    p = action["params"]
    if p.get("action") == "refund":
        db.orders[p["order_id"]]["status"] = "refunded"
    elif p.get("action") == "cancel":
        db.orders[p["order_id"]]["status"] = "cancelled"
    elif p.get("action") == "update_address":
        db.users[p["user_id"]]["address"] = p["address"]


@pytest.mark.parametrize("family", get_suite("conversation").families)
def test_conversation_reference_passes_and_shortcuts_fail(family):
    for t in sample("conversation", 20, seed=1, family=family):
        db = ServiceDB(t.data)
        for a in t.required_actions:
            _apply(db, a)
        assert evaluate_conversation(t, db, t.reference_answer)["success"], t.task_id
        # the right words without the required action do not pass
        if t.required_actions:
            assert not evaluate_conversation(t, ServiceDB(t.data), t.reference_answer)["success"]
        # listing every candidate does not pass
        shotgun = t.reference_answer + " " + " ".join(t.forbidden_facts)
        if t.forbidden_facts:
            assert not evaluate_conversation(t, db, shotgun)["success"]
        assert not evaluate_conversation(t, db, None)["success"]


def test_unexpected_state_changes_fail():
    t = sample("conversation", 1, seed=0, family="address_change")[0]
    db = ServiceDB(t.data)
    _apply(db, t.required_actions[0])
    other = next(o for o in db.orders)
    db.orders[other]["status"] = "refunded"
    out = evaluate_conversation(t, db, t.reference_answer)
    assert not out["success"] and 0 < out["score"] < 1
    assert any(k.startswith("unexpected change") for k, v in out["checks"].items() if not v)


@pytest.mark.parametrize("name", ["engineering", "advisory", "discussion"])
def test_knowledge_reference_passes_and_shortcuts_fail(name):
    for t in sample(name, 30, seed=2):
        notes = [{"title": t.data.get("client", ""), "text": t.reference_answer}]
        assert evaluate_knowledge(t, t.reference_answer, notes)["success"], t.task_id
        if t.forbidden_facts:
            bad = t.reference_answer + " or maybe " + ", ".join(t.forbidden_facts)
            assert not evaluate_knowledge(t, bad, notes)["success"]
        if t.data.get("position"):
            flipped = "against" if t.data["position"] == "for" else "for"
            wrong = t.reference_answer.replace(
                f"Position: {t.data['position']}", f"Position: {flipped}"
            )
            assert not evaluate_knowledge(t, wrong, notes)["success"]
        if t.data.get("note_must_contain"):
            assert not evaluate_knowledge(t, t.reference_answer, [])["success"]


def test_kb_search_finds_the_titled_document():
    t = get_suite("engineering").get(get_suite("engineering").select(family="ownership")[0])
    svc = t.data["service"]
    hits = search_kb(t.data["kb"], f"{svc} ownership")
    assert hits[0]["title"] == f"{svc} ownership"
    assert search_kb(t.data["kb"], "zzz qqq") == []


@pytest.mark.parametrize(
    ("text", "fact", "found"),
    [
        ("It shipped.", "shipped", True),
        ("unshipped", "shipped", False),
        ("$23.105 total", "$23.10", False),
        ("refund of $23.10.", "$23.10", True),
        ("kept 30 days", "30 days", True),
        ("kept 130 days", "30 days", False),
    ],
)
def test_contains_fact_matches_whole_tokens(text, fact, found):
    assert contains_fact(text, fact) is found


def test_task_is_a_taskinfo_and_round_trips():
    t = Task(task_id="x-y-1", suite="x", instruction="do", expected_facts=["a"])
    assert isinstance(t, TaskInfo)
    assert Task.model_validate_json(t.model_dump_json()) == t
