"""The ``conversation`` suite: customer service over a seeded order / account database.

Families (``task.family``):

- ``order_status``: "What is the status of order K3J9Q?" One lookup, one reply; instruction
  and observations are a few dozen characters, ids are 5 uppercase letters / digits and
  there are 5 statuses, so a tiny model can learn it from scratch by SFT.
- ``latest_order``: find the customer by email, pick their most recent order, report it.
- ``refund``: refund a damaged order through ``send_message(to="billing", action="refund")``,
  but only when it was delivered (policy); otherwise explain its status and refund nothing.
- ``address_change``: update the account's address through
  ``send_message(to="shipping", action="update_address")`` and confirm it.
- ``return_policy``: look up a number in the help center (``web_search``) and state it.
- ``cancel_order``: cancel through ``send_message(to="shipping", action="cancel")`` only
  while the order is pending or processing (policy); otherwise explain its status.
- ``item_order``: "What's the status of my blender order?" A multi-step lookup with
  distractors: the account's order list (by email) shows ids, dates and statuses but not
  items, so the agent opens orders until it finds the one holding the item, then answers
  with its id and status. The expert demonstrates it from the back office: it knows which
  order holds the item and opens that one directly, as an operator with the order screen in
  front of them would. A policy that imitates it guesses which order to open (right about
  one time in three); an attempt that opens another order after a wrong one succeeds, and
  that is what a loop learning from its own attempts can pick up and imitation cannot.

The outcome is checked against the database and the reply (:func:`evaluate_conversation`):
every expected fact must appear as a whole token, no distractor may appear, required state
changes must have happened and nothing else may have changed.

Example:
    >>> from knowlyr.taskset import get_suite
    >>> t = get_suite("conversation").get("conversation-order_status-00000")
    >>> t.instruction.startswith("What is the status of order")
    True
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
import string
from typing import Any

from knowlyr.taskset.suite import Suite
from knowlyr.taskset.task import Task

__all__ = [
    "STATUSES",
    "ConversationSuite",
    "ServiceDB",
    "contains_fact",
    "evaluate_answer",
    "evaluate_conversation",
    "score_checks",
]

STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled")
FIRST = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lena")
LAST = ("Lee", "Moss", "Ng", "Ortiz", "Park", "Quinn", "Reyes", "Sato", "Tan", "Umar", "Voss")
ITEMS = (
    "desk lamp", "kettle", "backpack", "headphones", "yoga mat", "water bottle", "blender",
    "notebook set", "phone case", "wool scarf", "coffee grinder", "desk chair",
)  # fmt: skip
STREETS = ("Elm St", "Oak Ave", "Pine Rd", "Maple Dr", "Cedar Ln", "Birch Way", "Harbor Blvd")
CITIES = ("Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Oakdale")
TOPICS = {
    "returns": ("return an item", "Returns are accepted within {n} days of delivery."),
    "shipping": ("receive a standard delivery", "Standard shipping takes {n} days."),
    "warranty": ("claim a warranty repair", "Electronics carry a warranty of {n} days."),
    "refund": ("get refund money back", "Refunds reach your card within {n} days."),
}
FAMILY_SIZES = {
    "order_status": 10_000,
    "latest_order": 2_000,
    "refund": 2_000,
    "address_change": 2_000,
    "return_policy": 2_000,
    "cancel_order": 2_000,
    "item_order": 2_000,
}
_ID_CHARS = string.ascii_uppercase + string.digits


def contains_fact(text: str, fact: str) -> bool:
    """True if ``fact`` occurs in ``text`` as a whole token (case-insensitive).

    ``"shipped"`` is in ``"It shipped."`` but not in ``"unshipped"``; ``"$23.10"`` is not in
    ``"$23.105"``.
    """
    pattern = r"(?<![A-Za-z0-9])" + re.escape(fact.lower()) + r"(?![A-Za-z0-9]|\.\d)"
    return re.search(pattern, text.lower()) is not None


def _rng(task_id: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big"))


def _order_id(rng: random.Random, taken: set[str]) -> str:
    while True:
        oid = "".join(rng.choice(_ID_CHARS) for _ in range(5))
        if oid not in taken:
            taken.add(oid)
            return oid


def _money(x: float) -> str:
    return f"${x:.2f}"


class ServiceDB:
    """The mutable state of one conversation episode: users, orders, help articles, actions.

    Built from ``task.data`` (a deep copy, so episodes never share state). Every action that
    changes state is appended to ``actions``.
    """

    def __init__(self, data: dict[str, Any]):
        self.users: dict[str, dict[str, Any]] = copy.deepcopy(data.get("users", {}))
        self.orders: dict[str, dict[str, Any]] = copy.deepcopy(data.get("orders", {}))
        self.articles: list[dict[str, str]] = copy.deepcopy(data.get("articles", []))
        self.actions: list[dict[str, Any]] = []
        self._initial_users = copy.deepcopy(self.users)
        self._initial_orders = copy.deepcopy(self.orders)

    def user_by_email(self, email: str) -> tuple[str, dict[str, Any]] | None:
        for uid, u in self.users.items():
            if u["email"].lower() == email.strip().lower():
                return uid, u
        return None

    def describe_order(self, oid: str) -> str:
        o = self.orders[oid]
        if set(o) == {"status"}:
            return f"order {oid}: {o['status']}"
        return (
            f"order {oid}: status={o['status']}, item={o['item']}, total={_money(o['total'])}, "
            f"date={o['date']}, user={o['user']}"
        )

    def describe_user(self, uid: str) -> str:
        u = self.users[uid]
        mine = sorted((o["date"], oid) for oid, o in self.orders.items() if o.get("user") == uid)
        orders = (
            "; ".join(f"{oid} ({d}, {self.orders[oid]['status']})" for d, oid in mine) or "none"
        )
        return (
            f"user {uid}: name={u['name']}, email={u['email']}, address={u['address']}, "
            f"orders: {orders}"
        )

    def changes(self) -> dict[str, Any]:
        """What differs from the initial state.

        Returns:
            ``{"orders": {id: {field: (old, new)}}, "users": {id: {field: (old, new)}}}``.
        """
        out: dict[str, Any] = {"orders": {}, "users": {}}
        for kind, now, before in (
            ("orders", self.orders, self._initial_orders),
            ("users", self.users, self._initial_users),
        ):
            for key, rec in now.items():
                diff = {
                    f: (before.get(key, {}).get(f), v)
                    for f, v in rec.items()
                    if before.get(key, {}).get(f) != v
                }
                if diff:
                    out[kind][key] = diff
        return out


_NEGATIVE = ("does not state", "unexpected change")


def score_checks(checks: dict[str, bool]) -> float:
    """Partial credit: the share of positive checks met (facts stated, required changes made),
    halved when a negative check fails (a distractor stated, an unexpected change made)."""
    positive = [v for k, v in checks.items() if not k.startswith(_NEGATIVE)]
    negative_ok = all(v for k, v in checks.items() if k.startswith(_NEGATIVE))
    share = sum(positive) / len(positive) if positive else float(negative_ok)
    return round(share if negative_ok else share / 2, 4)


def evaluate_answer(task: Task, answer: str) -> dict[str, Any]:
    """Checks on the final answer alone: expected facts present, distractors absent."""
    checks: dict[str, bool] = {}
    for fact in task.expected_facts:
        checks[f"states {fact!r}"] = contains_fact(answer, fact)
    for fact in task.forbidden_facts:
        checks[f"does not state {fact!r}"] = not contains_fact(answer, fact)
    return checks


def evaluate_conversation(task: Task, db: ServiceDB, answer: str | None) -> dict[str, Any]:
    """The outcome of a conversation episode (``success``, ``score``, per-check results).

    Required state changes (``task.data["expected_changes"]``) must be present exactly, and
    no other record may have changed. No answer (the episode was cut off) fails every check
    on the answer.
    """
    checks = evaluate_answer(task, answer or "")
    if answer is None:
        checks["answered"] = False
    expected = task.data.get("expected_changes", {"orders": {}, "users": {}})
    got = db.changes()
    for kind in ("orders", "users"):
        for key, fields in expected.get(kind, {}).items():
            for f, new in fields.items():
                checks[f"{kind[:-1]} {key} {f} = {new}"] = (
                    got[kind].get(key, {}).get(f, (None, None))[1] == new
                )
        for key, fields in got[kind].items():
            for f in fields:
                if f not in expected.get(kind, {}).get(key, {}):
                    checks[f"unexpected change: {kind[:-1]} {key} {f}"] = False
    return {"success": all(checks.values()), "score": score_checks(checks), "checks": checks}


class ConversationSuite(Suite):
    """Customer-service tasks: seven families, 22,000 tasks (10,000 of them ``order_status``)."""

    name = "conversation"
    domain = "conversation"
    families = tuple(FAMILY_SIZES)

    def _ids(self) -> list[str]:
        return [f"conversation-{fam}-{i:05d}" for fam, n in FAMILY_SIZES.items() for i in range(n)]

    def _build(self, index: int) -> Task:
        task_id = self.ids[index]
        family = self.family_of(task_id)
        rng = _rng(task_id)
        return getattr(self, f"_{family}")(task_id, rng)

    # -- database ------------------------------------------------------------------------

    @staticmethod
    def _people(
        rng: random.Random, n_users: int, orders_per_user: tuple[int, int]
    ) -> dict[str, Any]:
        users: dict[str, Any] = {}
        orders: dict[str, Any] = {}
        taken: set[str] = set()
        for _ in range(n_users):
            uid = f"U{rng.randrange(1000, 10000)}"
            while uid in users:
                uid = f"U{rng.randrange(1000, 10000)}"
            first, last = rng.choice(FIRST), rng.choice(LAST)
            users[uid] = {
                "name": f"{first} {last}",
                "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com",
                "address": f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}",
            }
            for _ in range(rng.randint(*orders_per_user)):
                oid = _order_id(rng, taken)
                orders[oid] = {
                    "status": rng.choice(STATUSES),
                    "item": rng.choice(ITEMS),
                    "total": round(rng.uniform(5, 300), 2),
                    "date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    "user": uid,
                }
        return {"users": users, "orders": orders}

    def _task(self, task_id: str, family: str, instruction: str, **kw: Any) -> Task:
        sol = kw.get("reference_solution", [])
        return Task(
            task_id=task_id,
            domain="conversation",
            suite=self.name,
            family=family,
            instruction=instruction,
            reference_length=len(sol),
            **kw,
        )

    # -- families --------------------------------------------------------------------------

    def _order_status(self, task_id: str, rng: random.Random) -> Task:
        taken: set[str] = set()
        orders = {_order_id(rng, taken): {"status": rng.choice(STATUSES)} for _ in range(3)}
        oid = rng.choice(sorted(orders))
        status = orders[oid]["status"]
        answer = f"Order {oid} is {status}."
        return self._task(
            task_id,
            "order_status",
            f"What is the status of order {oid}?",
            expected_facts=[status],
            forbidden_facts=[s for s in STATUSES if s != status],
            reference_answer=answer,
            reference_solution=[
                {"tool": "query_stats", "params": {"order_id": oid}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            data={"orders": orders, "order_id": oid},
        )

    def _latest_order(self, task_id: str, rng: random.Random) -> Task:
        db = self._people(rng, rng.randint(3, 5), (2, 4))
        uid = rng.choice(sorted(db["users"]))
        mine = sorted((o["date"], oid) for oid, o in db["orders"].items() if o["user"] == uid)
        # make the latest date unique so "most recent" is well defined
        last_date, oid = mine[-1]
        if len(mine) > 1 and mine[-2][0] == last_date:
            db["orders"][oid]["date"] = "2026-12-31"
        status = db["orders"][oid]["status"]
        email = db["users"][uid]["email"]
        answer = f"Your most recent order {oid} is {status}."
        others = [o for _, o in mine if o != oid]
        return self._task(
            task_id,
            "latest_order",
            f"Hi, this is {email}. What's the status of my most recent order?",
            expected_facts=[oid, status],
            forbidden_facts=others + [s for s in STATUSES if s != status],
            reference_answer=answer,
            reference_solution=[
                {"tool": "query_stats", "params": {"email": email}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            data={**db, "user_id": uid},
        )

    def _refund(self, task_id: str, rng: random.Random) -> Task:
        db = self._people(rng, rng.randint(2, 4), (1, 3))
        oid = rng.choice(sorted(db["orders"]))
        order = db["orders"][oid]
        if rng.random() < 0.7:
            order["status"] = "delivered"
        email = db["users"][order["user"]]["email"]
        eligible = order["status"] == "delivered"
        solution: list[dict[str, Any]] = [{"tool": "query_stats", "params": {"order_id": oid}}]
        if eligible:
            amount = _money(order["total"])
            answer = f"I have refunded {amount} for order {oid}."
            solution.append(
                {
                    "tool": "send_message",
                    "params": {"to": "billing", "action": "refund", "order_id": oid},
                }
            )
            facts, changes = [amount], {"orders": {oid: {"status": "refunded"}}, "users": {}}
            required = [solution[-1]]
        else:
            answer = f"Order {oid} is {order['status']}, so it cannot be refunded yet."
            facts, changes, required = [order["status"]], {"orders": {}, "users": {}}, []
        solution.append({"tool": "respond", "params": {"text": answer}})
        return self._task(
            task_id,
            "refund",
            f"Hi, I'm {email}. Order {oid} arrived damaged, please refund it.",
            expected_facts=facts,
            required_actions=required,
            reference_answer=answer,
            reference_solution=solution,
            metadata={"policy": "Refunds are only issued for delivered orders."},
            data={**db, "order_id": oid, "expected_changes": changes},
        )

    def _address_change(self, task_id: str, rng: random.Random) -> Task:
        db = self._people(rng, rng.randint(2, 4), (1, 2))
        uid = rng.choice(sorted(db["users"]))
        user = db["users"][uid]
        new = user["address"]
        while new == user["address"]:
            new = f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
        answer = f"Done: your shipping address is now {new}."
        action = {
            "tool": "send_message",
            "params": {
                "to": "shipping",
                "action": "update_address",
                "user_id": uid,
                "address": new,
            },
        }
        return self._task(
            task_id,
            "address_change",
            f"Hi, I'm {user['email']}. Please change my shipping address to {new}.",
            expected_facts=[new],
            forbidden_facts=[user["address"]],
            required_actions=[action],
            reference_answer=answer,
            reference_solution=[
                {"tool": "query_stats", "params": {"email": user["email"]}},
                action,
                {"tool": "respond", "params": {"text": answer}},
            ],
            data={
                **db,
                "user_id": uid,
                "expected_changes": {"orders": {}, "users": {uid: {"address": new}}},
            },
        )

    def _return_policy(self, task_id: str, rng: random.Random) -> Task:
        values = rng.sample(range(2, 91), len(TOPICS))
        articles = [
            {"id": f"help-{k}", "title": f"{k.capitalize()} policy", "text": tmpl.format(n=n)}
            for (k, (_, tmpl)), n in zip(TOPICS.items(), values, strict=True)
        ]
        i = rng.randrange(len(TOPICS))
        topic, (ask, _) = list(TOPICS.items())[i]
        n = values[i]
        answer = f"You have {n} days: see our {topic} policy."
        return self._task(
            task_id,
            "return_policy",
            f"How many days does it take to {ask}?"
            if topic in ("shipping", "refund")
            else f"How many days do I have to {ask}?",
            expected_facts=[f"{n} days"],
            forbidden_facts=[f"{v} days" for j, v in enumerate(values) if j != i],
            reference_answer=answer,
            reference_solution=[
                {"tool": "web_search", "params": {"query": f"{topic} policy"}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            data={"articles": articles, "topic": topic},
        )

    def _item_order(self, task_id: str, rng: random.Random) -> Task:
        db = self._people(rng, rng.randint(2, 4), (1, 2))
        uid = rng.choice(sorted(db["users"]))
        # the customer has three orders of three different items, one of them the one asked for
        for oid in [o for o, rec in db["orders"].items() if rec["user"] == uid]:
            del db["orders"][oid]
        taken = set(db["orders"])
        items = rng.sample(ITEMS, 3)
        mine = []
        for item in items:
            oid = _order_id(rng, taken)
            db["orders"][oid] = {
                "status": rng.choice(STATUSES),
                "item": item,
                "total": round(rng.uniform(5, 300), 2),
                "date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "user": uid,
            }
            mine.append(oid)
        i = rng.randrange(3)
        oid, item = mine[i], items[i]
        status = db["orders"][oid]["status"]
        email = db["users"][uid]["email"]
        answer = f"Your {item} order {oid} is {status}."
        return self._task(
            task_id,
            "item_order",
            f"Hi, I'm {email}. What's the status of my {item} order?",
            expected_facts=[oid, status],
            forbidden_facts=[o for o in mine if o != oid],
            reference_answer=answer,
            reference_solution=[
                {"tool": "query_stats", "params": {"email": email}},
                {"tool": "query_stats", "params": {"order_id": oid}},
                {"tool": "respond", "params": {"text": answer}},
            ],
            data={**db, "user_id": uid, "order_id": oid, "item": item},
        )

    def _cancel_order(self, task_id: str, rng: random.Random) -> Task:
        db = self._people(rng, rng.randint(2, 4), (1, 3))
        oid = rng.choice(sorted(db["orders"]))
        order = db["orders"][oid]
        if rng.random() < 0.6:
            order["status"] = rng.choice(("pending", "processing"))
        email = db["users"][order["user"]]["email"]
        allowed = order["status"] in ("pending", "processing")
        solution: list[dict[str, Any]] = [{"tool": "query_stats", "params": {"order_id": oid}}]
        if allowed:
            action = {
                "tool": "send_message",
                "params": {"to": "shipping", "action": "cancel", "order_id": oid},
            }
            solution.append(action)
            answer = f"Order {oid} is cancelled."
            facts, changes, required = (
                ["cancelled"],
                {"orders": {oid: {"status": "cancelled"}}, "users": {}},
                [action],
            )
        else:
            answer = f"Order {oid} is already {order['status']}, so it is too late to cancel it."
            facts, changes, required = [order["status"]], {"orders": {}, "users": {}}, []
        # claiming the other outcome fails: "cancelled" for a refused one, the old status otherwise
        forbidden = (
            [order["status"]]
            if allowed
            else (["cancelled"] if order["status"] != "cancelled" else [])
        )
        solution.append({"tool": "respond", "params": {"text": answer}})
        return self._task(
            task_id,
            "cancel_order",
            f"Hi, I'm {email}. Please cancel order {oid}.",
            expected_facts=facts,
            forbidden_facts=forbidden,
            required_actions=required,
            reference_answer=answer,
            reference_solution=solution,
            metadata={"policy": "Only pending or processing orders can be cancelled."},
            data={**db, "order_id": oid, "expected_changes": changes},
        )
