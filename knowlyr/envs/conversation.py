"""The ConversationEnv family: customer service and knowledge-base-grounded answers.

- ``knowlyr/conversation`` (:class:`ConversationEnv`): tools ``query_stats``, ``web_search``,
  ``send_message``, ``respond`` over a seeded order / account database; the outcome checks
  the reply's facts and the database's final state.
- ``knowlyr/advisory`` (:class:`AdvisoryEnv`): ``knowledge_base``, ``web_search``,
  ``create_note``, ``respond``.
- ``knowlyr/discussion`` (:class:`DiscussionEnv`): ``knowledge_base``, ``think``, ``respond``.
- ``knowlyr/engineering`` lives in :mod:`knowlyr.envs.engineering` (it adds a sandbox).

Tools are typed functions (:func:`knowlyr.core.tools.tool`); the episode state is injected
as the keyword-only ``state`` parameter, so the model-visible schema holds only the real
arguments.

Example:
    >>> import knowlyr
    >>> env = knowlyr.make("knowlyr/conversation", family="order_status")
    >>> ts = env.reset(seed=0)
    >>> oid = ts.observation.split()[-1].rstrip("?")
    >>> ts = env.step({"tool": "query_stats", "params": {"order_id": oid}})
    >>> ts.observation.startswith(f"order {oid}:")
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowlyr.core.tools import Toolbox, ToolResult, tool
from knowlyr.envs.base import TaskEnv
from knowlyr.taskset import Task
from knowlyr.taskset.conversation import ServiceDB, evaluate_conversation
from knowlyr.taskset.knowledge import evaluate_knowledge, search_kb

__all__ = [
    "AdvisoryEnv",
    "ConversationEnv",
    "DiscussionEnv",
    "EpisodeState",
    "KnowledgeEnv",
    "create_note",
    "knowledge_base",
    "query_stats",
    "respond",
    "send_message",
    "think",
    "web_search",
]


@dataclass
class EpisodeState:
    """What the tools of one episode read and change."""

    task: Task
    db: ServiceDB
    answer: str | None = None
    notes: list[dict[str, str]] = field(default_factory=list)


def _format_docs(docs: list[dict[str, str]], query: str) -> str:
    if not docs:
        return f"No results for {query!r}."
    return "\n".join(f"[{d['id']}] {d['title']}: {d['text']}" for d in docs)


@tool
def query_stats(
    order_id: str | None = None,
    email: str | None = None,
    user_id: str | None = None,
    *,
    state: EpisodeState,
) -> ToolResult:
    """Look up an order by id, or a customer and their orders by email or user id.

    Args:
        order_id: the 5-character order id.
        email: the customer's email address.
        user_id: the customer's id, like U1234.
    """
    db = state.db
    given = [k for k, v in (("order_id", order_id), ("email", email), ("user_id", user_id)) if v]
    if len(given) != 1:
        return ToolResult.failure("give exactly one of order_id, email or user_id", exit_code=2)
    if order_id:
        oid = order_id.strip().upper()
        if oid not in db.orders:
            return ToolResult.failure(f"no order {order_id!r}", exit_code=1)
        return ToolResult(db.describe_order(oid))
    if email:
        found = db.user_by_email(email)
        if found is None:
            return ToolResult.failure(f"no customer with email {email!r}", exit_code=1)
        return ToolResult(db.describe_user(found[0]))
    uid = (user_id or "").strip().upper()
    if uid not in db.users:
        return ToolResult.failure(f"no customer {user_id!r}", exit_code=1)
    return ToolResult(db.describe_user(uid))


@tool(name="web_search")
def help_center_search(query: str, *, state: EpisodeState) -> ToolResult:
    """Search the help center articles.

    Args:
        query: words to look for.
    """
    return ToolResult(_format_docs(search_kb(state.db.articles, query), query))


_ROUTES = {"refund": "billing", "update_address": "shipping", "cancel": "shipping"}


@tool
def send_message(
    to: str,
    action: str = "message",
    order_id: str | None = None,
    user_id: str | None = None,
    address: str | None = None,
    text: str = "",
    *,
    state: EpisodeState,
) -> ToolResult:
    """Send a message to a team, or have it act for the customer.

    Args:
        to: the team: billing, shipping or support.
        action: message, refund (billing; delivered orders only), update_address (shipping)
            or cancel (shipping; pending or processing orders only).
        order_id: the order the action is about.
        user_id: the customer the action is about.
        address: the new address for update_address.
        text: a note for the team.
    """
    db = state.db
    if action not in ("message", *_ROUTES):
        return ToolResult.failure(
            f"unknown action {action!r}; use message, refund, update_address or cancel"
        )
    if action in _ROUTES and to != _ROUTES[action]:
        return ToolResult.failure(f"{action} requests go to {_ROUTES[action]!r}, not {to!r}")
    record = {
        "to": to,
        "action": action,
        "order_id": order_id,
        "user_id": user_id,
        "address": address,
    }
    if action in ("refund", "cancel"):
        oid = (order_id or "").strip().upper()
        if oid not in db.orders:
            return ToolResult.failure(
                f"{action} needs a valid order_id, got {order_id!r}", exit_code=1
            )
        order = db.orders[oid]
        allowed = ("delivered",) if action == "refund" else ("pending", "processing")
        if order["status"] not in allowed:
            return ToolResult.failure(
                f"{action} refused: order {oid} is {order['status']} "
                f"({action} needs {' or '.join(allowed)})",
                exit_code=1,
            )
        order["status"] = "refunded" if action == "refund" else "cancelled"
        db.actions.append(record)
        if action == "refund":
            return ToolResult(f"refund of ${order.get('total', 0):.2f} issued for order {oid}")
        return ToolResult(f"order {oid} cancelled")
    if action == "update_address":
        uid = (user_id or "").strip().upper()
        if uid not in db.users:
            return ToolResult.failure(
                f"update_address needs a valid user_id, got {user_id!r}", exit_code=1
            )
        if not address or not address.strip():
            return ToolResult.failure("update_address needs a non-empty address")
        db.users[uid]["address"] = address.strip()
        db.actions.append(record)
        return ToolResult(f"address of {uid} is now {address.strip()}")
    db.actions.append(record)
    return ToolResult(f"message sent to {to}")


@tool
def respond(text: str, *, state: EpisodeState) -> ToolResult:
    """Give your final reply or answer; this ends the episode.

    Args:
        text: the reply.
    """
    if not text.strip():
        return ToolResult.failure("the reply is empty")
    state.answer = text
    return ToolResult("Reply sent.")


@tool
def knowledge_base(query: str, *, state: EpisodeState) -> ToolResult:
    """Search the knowledge base; returns the (at most 5) best matching documents.

    Args:
        query: words to look for.
    """
    return ToolResult(_format_docs(search_kb(state.task.data.get("kb", []), query, k=5), query))


@tool(name="web_search")
def reference_search(query: str, *, state: EpisodeState) -> ToolResult:
    """Search reference material (the knowledge base's public documents).

    Args:
        query: words to look for.
    """
    return ToolResult(_format_docs(search_kb(state.task.data.get("kb", []), query), query))


@tool
def create_note(title: str, text: str, *, state: EpisodeState) -> ToolResult:
    """Write a note for the client's file.

    Args:
        title: the note's title (e.g. the client).
        text: the note.
    """
    state.notes.append({"title": title, "text": text})
    return ToolResult(f"Note {title!r} saved.")


@tool
def think(thought: str) -> ToolResult:
    """Think out loud; nothing changes.

    Args:
        thought: the thought.
    """
    return ToolResult("OK.")


web_search = help_center_search


class ConversationEnv(TaskEnv):
    """Customer service over a seeded database (``knowlyr/conversation``).

    Args:
        family: e.g. ``order_status`` (the short family a tiny model learns from scratch).
        split: ``train`` or ``heldout``.
        suite, tasks, profile: see :class:`~knowlyr.envs.base.TaskEnv`.

    Example:
        >>> env = ConversationEnv(family="order_status", split="heldout")
        >>> env.reset(seed=1).info["task"]["metadata"]["family"]
        'order_status'
    """

    domain = "conversation"
    _tools = (query_stats, help_center_search, send_message, respond)

    def _build_toolbox(self) -> Toolbox:
        return Toolbox(self._tools)

    def _start(self, task: Task) -> None:
        self.state = EpisodeState(task=task, db=ServiceDB(task.data))

    def _context(self) -> dict[str, Any]:
        return {"state": self.state}

    def _outcome(self, tool: str, result: ToolResult) -> dict[str, Any]:
        return evaluate_conversation(self.state.task, self.state.db, self.state.answer)

    def _truncated_outcome(self) -> dict[str, Any]:
        return evaluate_conversation(self.state.task, self.state.db, None)


class KnowledgeEnv(ConversationEnv):
    """Answers grounded in a task's knowledge base; the tools follow the domain profile."""

    _by_name: dict[str, Any] = {  # noqa: RUF012 - class-level tool table
        "knowledge_base": knowledge_base,
        "web_search": reference_search,
        "create_note": create_note,
        "think": think,
        "respond": respond,
    }

    def _build_toolbox(self) -> Toolbox:
        return Toolbox([self._by_name[n] for n in self.profile.tool_names if n in self._by_name])

    def _start(self, task: Task) -> None:
        self.state = EpisodeState(task=task, db=ServiceDB({}))

    def _outcome(self, tool: str, result: ToolResult) -> dict[str, Any]:
        return evaluate_knowledge(self.state.task, self.state.answer, self.state.notes)

    def _truncated_outcome(self) -> dict[str, Any]:
        return evaluate_knowledge(self.state.task, None, self.state.notes)


class AdvisoryEnv(KnowledgeEnv):
    """Grounded advice from a knowledge base (``knowlyr/advisory``)."""

    domain = "advisory"


class DiscussionEnv(KnowledgeEnv):
    """Take and ground a position (``knowlyr/discussion``)."""

    domain = "discussion"
