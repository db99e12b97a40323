"""Knowledge-base-grounded suites: ``engineering``, ``advisory`` and ``discussion``.

Each task carries a small knowledge base generated in code (``task.data["kb"]``: documents
with an id, title and text) and, for ``engineering``, a small repository (``task.files``)
that the agent inspects in the sandbox. Answers are checked structurally
(:func:`evaluate_knowledge`): every expected fact must appear as a whole token, the values of
distractors (other services, plans, regions) must not, a required ``Position: for|against``
first line must match, and required notes must exist. Listing every candidate never passes.

Example:
    >>> from knowlyr.taskset import get_suite
    >>> t = get_suite("engineering").task(0)
    >>> t.family, any(p.endswith("config.yaml") for p in t.files)
    ('config_lookup', True)
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from knowlyr.taskset.conversation import contains_fact, evaluate_answer, score_checks
from knowlyr.taskset.suite import Suite
from knowlyr.taskset.task import Task

__all__ = [
    "AdvisorySuite",
    "DiscussionSuite",
    "EngineeringSuite",
    "evaluate_knowledge",
    "search_kb",
]

ADJ = ("orion", "lyra", "vega", "nova", "atlas", "cygnus", "draco", "hydra", "polaris", "rigel")
NOUN = ("gateway", "billing", "search", "ledger", "notifier", "scheduler", "catalog", "auth")
TEAMS = ("falcon", "otter", "lynx", "heron", "badger", "marten", "osprey", "walrus", "bison")
PLAN_NAMES = ("Aster", "Birch", "Cobalt", "Dune", "Ember", "Fjord", "Garnet", "Helix")
REGIONS = ("EU", "US", "APAC", "LATAM", "UK")
DATA_CLASSES = ("billing", "support-ticket", "audit-log", "usage")
DATABASES = ("Postgres", "MySQL", "CockroachDB", "Cassandra", "MongoDB")
APIS = ("orders", "payments", "profiles", "inventory", "reports", "search")
PER_FAMILY = 2_000
_WORD = re.compile(r"[a-z0-9]+")


def _rng(task_id: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big"))


def search_kb(docs: list[dict[str, str]], query: str, *, k: int = 3) -> list[dict[str, str]]:
    """The ``k`` documents sharing the most words with ``query`` (title words count double)."""
    q = set(_WORD.findall(query.lower()))
    scored = []
    for i, d in enumerate(docs):
        title = set(_WORD.findall(d["title"].lower()))
        text = set(_WORD.findall(d["text"].lower()))
        score = 2 * len(q & title) + len(q & text)
        if score:
            scored.append((-score, i, d))
    return [d for _, _, d in sorted(scored)[:k]]


def evaluate_knowledge(
    task: Task, answer: str | None, notes: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """Outcome of a knowledge task: facts, distractors, position line, required notes."""
    text = answer or ""
    checks = evaluate_answer(task, text)
    if answer is None:
        checks["answered"] = False
    position = task.data.get("position")
    if position:
        m = re.match(r"\s*position:\s*(for|against)\b", text, re.I)
        checks[f"position is {position!r}"] = bool(m) and m.group(1).lower() == position
    for must in task.data.get("note_must_contain", []):
        checks[f"note mentions {must!r}"] = any(
            contains_fact(f"{n['title']} {n['text']}", must) for n in notes or []
        )
    return {"success": all(checks.values()), "score": score_checks(checks), "checks": checks}


class _KnowledgeSuite(Suite):
    fams: tuple[str, ...] = ()

    def _ids(self) -> list[str]:
        return [f"{self.name}-{fam}-{i:05d}" for fam in self.families for i in range(PER_FAMILY)]

    def _build(self, index: int) -> Task:
        task_id = self.ids[index]
        family = self.family_of(task_id)
        kw = getattr(self, f"_{family}")(_rng(task_id))
        sol = kw.get("reference_solution", [])
        return Task(
            task_id=task_id,
            domain=self.domain,
            suite=self.name,
            family=family,
            reference_length=len(sol),
            **kw,
        )


def _services(rng: random.Random, n: int) -> list[dict[str, Any]]:
    names = rng.sample([f"{a}-{b}" for a in ADJ for b in NOUN], n)
    ports = rng.sample(range(2000, 9999), n)
    timeouts = rng.sample(range(2, 40), n)  # x50 ms: below every port
    retries = rng.sample(range(1, 10), n)
    teams = rng.sample(TEAMS, n)
    return [
        {
            "name": name,
            "port": ports[i],
            "timeout_ms": timeouts[i] * 50,
            "max_retries": retries[i],
            "team": teams[i],
            "channel": f"#{teams[i]}-oncall",
        }
        for i, name in enumerate(names)
    ]


def _config(s: dict[str, Any]) -> str:
    return (
        f"service: {s['name']}\nport: {s['port']}\ntimeout_ms: {s['timeout_ms']}\n"
        f"max_retries: {s['max_retries']}\n"
    )


def _repo(services: list[dict[str, Any]]) -> dict[str, str]:
    files = {
        "README.md": "# platform\n\nServices:\n"
        + "".join(f"- services/{s['name']}/\n" for s in services),
    }
    for s in services:
        files[f"services/{s['name']}/config.yaml"] = _config(s)
        files[f"services/{s['name']}/README.md"] = (
            f"# {s['name']}\n\nSettings live in config.yaml next to this file. "
            "Ownership is recorded in the knowledge base.\n"
        )
    return files


def _ownership_docs(services: list[dict[str, Any]]) -> list[dict[str, str]]:
    docs = [
        {
            "id": f"kb-own-{s['name']}",
            "title": f"{s['name']} ownership",
            "text": f"{s['name']} is owned by the {s['team']} team. Page them in {s['channel']}.",
        }
        for s in services
    ]
    docs.append(
        {
            "id": "kb-deploy",
            "title": "Deploy process",
            "text": "Deploys go out Tuesday and Thursday. "
            "Config changes need a review from the owning team.",
        }
    )
    return docs


class EngineeringSuite(_KnowledgeSuite):
    """Questions about a small repository, its git history and the knowledge base (8,000 tasks)."""

    name = "engineering"
    domain = "engineering"
    families = ("config_lookup", "ownership", "retry_owner", "change_history")

    def _config_lookup(self, rng: random.Random) -> dict[str, Any]:
        services = _services(rng, 4)
        s = rng.choice(services)
        path = f"services/{s['name']}/config.yaml"
        answer = (
            f"{s['name']} listens on port {s['port']} "
            f"with a request timeout of {s['timeout_ms']} ms."
        )
        return {
            "instruction": f"What port does {s['name']} listen on, "
            "and what is its request timeout in ms?",
            "files": _repo(services),
            "expected_facts": [str(s["port"]), str(s["timeout_ms"])],
            "forbidden_facts": [
                str(o[k]) for o in services if o is not s for k in ("port", "timeout_ms")
            ],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "read_file", "params": {"path": path}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": _ownership_docs(services), "service": s["name"]},
        }

    def _ownership(self, rng: random.Random) -> dict[str, Any]:
        services = _services(rng, 4)
        s = rng.choice(services)
        answer = f"{s['name']} is owned by the {s['team']} team; page them in {s['channel']}."
        return {
            "instruction": f"Which team owns {s['name']}, and which channel pages them?",
            "files": _repo(services),
            "expected_facts": [s["team"], s["channel"]],
            "forbidden_facts": [o["team"] for o in services if o is not s],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "knowledge_base", "params": {"query": f"{s['name']} ownership"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": _ownership_docs(services), "service": s["name"]},
        }

    def _retry_owner(self, rng: random.Random) -> dict[str, Any]:
        services = _services(rng, 4)
        s = rng.choice(services)
        path = f"services/{s['name']}/config.yaml"
        answer = (
            f"{s['name']} allows {s['max_retries']} retries; "
            f"the {s['team']} team must review a change."
        )
        return {
            "instruction": f"How many retries does {s['name']} allow, "
            "and which team must review a change to it?",
            "files": _repo(services),
            "expected_facts": [str(s["max_retries"]), s["team"]],
            "forbidden_facts": [o["team"] for o in services if o is not s]
            + [str(o["max_retries"]) for o in services if o is not s],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "read_file", "params": {"path": path}},
                {"tool": "knowledge_base", "params": {"query": f"{s['name']} ownership"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": _ownership_docs(services), "service": s["name"]},
        }

    def _change_history(self, rng: random.Random) -> dict[str, Any]:
        services = _services(rng, 4)
        s = rng.choice(services)
        tickets = [f"OPS-{n}" for n in rng.sample(range(1000, 9999), len(services))]
        history = []
        before = {o["name"]: o["max_retries"] for o in services}
        for o, ticket in zip(rng.sample(services, len(services)), tickets, strict=True):
            o["max_retries"] = rng.choice([v for v in range(1, 10) if v != o["max_retries"]])
            history.append(
                {
                    "message": f"Set {o['name']} retries to {o['max_retries']} ({ticket})",
                    "files": {f"services/{o['name']}/config.yaml": _config(o)},
                }
            )
        ticket = next(
            h["message"].rsplit("(", 1)[1].rstrip(")")
            for h in history
            if f" {s['name']} " in h["message"]
        )
        old = before[s["name"]]
        initial = [dict(o, max_retries=before[o["name"]]) for o in services]
        path = f"services/{s['name']}/config.yaml"
        answer = (
            f"{ticket} changed the retry limit of {s['name']}; "
            f"it was {old} before (now {s['max_retries']})."
        )
        return {
            "instruction": f"Which ticket changed the retry limit of {s['name']}, "
            "and what was the limit before?",
            "files": _repo(initial),
            "expected_facts": [ticket, str(old)],
            "forbidden_facts": [t for t in tickets if t != ticket],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "git", "params": {"args": f"log -p --format=%s -- {path}"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": _ownership_docs(services), "service": s["name"], "history": history},
        }


class AdvisorySuite(_KnowledgeSuite):
    """Plan recommendations and retention rules from a knowledge base (4,000 tasks)."""

    name = "advisory"
    domain = "advisory"
    families = ("plan_choice", "retention")

    def _plan_choice(self, rng: random.Random) -> dict[str, Any]:
        names = sorted(rng.sample(PLAN_NAMES, 4))
        prices = sorted(rng.sample(range(10, 400), 4))
        seats = [*sorted(rng.sample(range(3, 200), 3)), 10_000]
        sso = [False, rng.random() < 0.5, True, True]
        plans = [
            {"name": n, "price": p, "seats": s, "sso": o}
            for n, p, s, o in zip(names, prices, seats, sso, strict=True)
        ]
        users = rng.randint(2, 250)
        need_sso = rng.random() < 0.5
        fit = next(p for p in plans if p["seats"] >= users and (p["sso"] or not need_sso))
        price = f"${fit['price']}"
        docs = [
            {
                "id": f"kb-plan-{p['name'].lower()}",
                "title": f"{p['name']} plan",
                "text": f"The {p['name']} plan costs ${p['price']} per month, allows up to "
                + ("unlimited users" if p["seats"] >= 10_000 else f"{p['seats']} users")
                + (
                    ", and includes single sign-on (SSO)."
                    if p["sso"]
                    else ", without single sign-on (SSO)."
                ),
            }
            for p in plans
        ]
        docs.append(
            {
                "id": "kb-plans",
                "title": "Plans overview",
                "text": "Plans: " + ", ".join(names) + ".",
            }
        )
        need = "single sign-on (SSO)" if need_sso else "no special features"
        answer = f"Recommend the {fit['name']} plan at {price} per month."
        client = f"client-{rng.randrange(100, 999)}"
        return {
            "instruction": (
                f"A client ({client}) has {users} users and needs {need}. "
                "Which is the cheapest plan that fits, and what does it cost per month? "
                "Record it with create_note, then answer."
            ),
            "expected_facts": [fit["name"], price],
            "forbidden_facts": [p["name"] for p in plans if p is not fit],
            "required_actions": [{"tool": "create_note", "params": {"title": client}}],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "knowledge_base", "params": {"query": "plan price users SSO"}},
                {"tool": "create_note", "params": {"title": client, "text": answer}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {
                "kb": docs,
                "plans": plans,
                "users": users,
                "need_sso": need_sso,
                "client": client,
                "note_must_contain": [fit["name"]],
            },
        }

    def _retention(self, rng: random.Random) -> dict[str, Any]:
        regions = rng.sample(REGIONS, 3)
        classes = rng.sample(DATA_CLASSES, 2)
        values = rng.sample(range(30, 3650), len(regions) * len(classes))
        table = {
            (r, c): values[i * len(classes) + j]
            for i, r in enumerate(regions)
            for j, c in enumerate(classes)
        }
        docs = [
            {
                "id": f"kb-retention-{r.lower()}",
                "title": f"Retention policy {r}",
                "text": " ".join(
                    f"In {r}, {c} records are kept for {table[(r, c)]} days." for c in classes
                ),
            }
            for r in regions
        ]
        r, c = rng.choice(regions), rng.choice(classes)
        n = table[(r, c)]
        answer = f"{c} records in {r} must be kept for {n} days."
        return {
            "instruction": f"How long must we keep {c} records for a client in {r}?",
            "expected_facts": [f"{n} days"],
            "forbidden_facts": [f"{v} days" for k, v in table.items() if k != (r, c)],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "knowledge_base", "params": {"query": f"retention policy {r}"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": docs, "region": r, "data_class": c},
        }


class DiscussionSuite(_KnowledgeSuite):
    """Take and ground a position using a policy and the facts it applies to (4,000 tasks)."""

    name = "discussion"
    domain = "discussion"
    families = ("migration", "deprecation")

    def _migration(self, rng: random.Random) -> dict[str, Any]:
        a, b = rng.sample(DATABASES, 2)
        k = rng.randint(2, 8)
        services = rng.sample([f"{x}-{y}" for x in ADJ for y in NOUN], 3)
        counts = rng.sample([c for c in range(0, 15) if c != k], 3)
        docs = [
            {
                "id": "kb-migration-policy",
                "title": "Migration policy",
                "text": f"A service moves from {a} to {b} "
                f"when it had more than {k} incidents last quarter.",
            }
        ] + [
            {
                "id": f"kb-incidents-{s}",
                "title": f"{s} incident report",
                "text": f"{s} had {m} incidents last quarter.",
            }
            for s, m in zip(services, counts, strict=True)
        ]
        i = rng.randrange(3)
        s, m = services[i], counts[i]
        position = "for" if m > k else "against"
        answer = (
            f"Position: {position}. {s} had {m} incidents last quarter "
            f"and the policy threshold is more than {k}."
        )
        return {
            "instruction": (
                f"Should {s} migrate from {a} to {b}? Start your answer with 'Position: for' or "
                "'Position: against' and cite last quarter's incident count."
            ),
            "expected_facts": [f"{m} incidents"],
            "forbidden_facts": [f"{c} incidents" for j, c in enumerate(counts) if j != i],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "knowledge_base", "params": {"query": "migration policy"}},
                {"tool": "knowledge_base", "params": {"query": f"{s} incident report"}},
                {"tool": "think", "params": {"thought": f"{m} vs threshold {k}: {position}"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": docs, "position": position, "service": s, "threshold": k},
        }

    def _deprecation(self, rng: random.Random) -> dict[str, Any]:
        k = rng.randint(3, 20)
        apis = rng.sample(APIS, 3)
        shares = rng.sample([v for v in range(1, 40) if v != k], 3)
        docs = [
            {
                "id": "kb-deprecation-policy",
                "title": "Deprecation policy",
                "text": f"An API version is deprecated when its traffic share drops below {k}%.",
            }
        ] + [
            {
                "id": f"kb-usage-{api}",
                "title": f"{api} API usage",
                "text": f"The {api} v1 API serves {v}% of traffic.",
            }
            for api, v in zip(apis, shares, strict=True)
        ]
        i = rng.randrange(3)
        api, v = apis[i], shares[i]
        position = "for" if v < k else "against"
        answer = (
            f"Position: {position}. The {api} v1 API serves {v}% of traffic; "
            f"the policy threshold is {k}%."
        )
        return {
            "instruction": (
                f"Should the {api} v1 API be deprecated now? "
                "Start your answer with 'Position: for' or "
                "'Position: against' and cite its traffic share."
            ),
            "expected_facts": [f"{v}%"],
            "forbidden_facts": [f"{s}%" for j, s in enumerate(shares) if j != i],
            "reference_answer": answer,
            "reference_solution": [
                {"tool": "knowledge_base", "params": {"query": "deprecation policy"}},
                {"tool": "knowledge_base", "params": {"query": f"{api} API usage"}},
                {"tool": "think", "params": {"thought": f"{v}% vs threshold {k}%: {position}"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            "data": {"kb": docs, "position": position, "api": api, "threshold": k},
        }
