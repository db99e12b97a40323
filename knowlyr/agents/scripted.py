"""Scripted experts: one per suite, no LLM, each action with a short ``thought``.

Experts look up their task by id (:func:`knowlyr.taskset.get_task`) for what only a solver
would know (the fix of a coding bug, the gold patch of a SWE-bench instance), and otherwise
act on what they observe: the conversation expert answers from the lookup it made, the
knowledge experts from the documents and files they read. :class:`ExpertAgent` picks the
right expert from ``info["task"]["domain"]`` on every reset.

Example:
    >>> import knowlyr
    >>> from knowlyr.agents import ExpertAgent
    >>> env, agent = knowlyr.make("knowlyr/conversation", family="order_status"), ExpertAgent()
    >>> ts = env.reset(seed=0)
    >>> agent.reset(ts.info)
    >>> while not ts.done:
    ...     ts = env.step(agent.act(ts.observation, ts.info))
    >>> ts.info["outcome"]["success"]
    True
"""

from __future__ import annotations

import abc
import re
from typing import Any

from knowlyr.agents.base import Agent
from knowlyr.core.env import Action
from knowlyr.taskset import Task, get_task

__all__ = [
    "AdvisoryExpert",
    "CodingExpert",
    "ConversationExpert",
    "DiscussionExpert",
    "EngineeringExpert",
    "ExpertAgent",
    "ReferenceExpert",
    "ScriptedExpert",
]


def _a(tool: str, why: str, **params: Any) -> Action:
    return {"tool": tool, "params": params, "thought": why}


class ScriptedExpert(Agent):
    """Base of the experts: keeps the task, the step count and the observations seen."""

    name = "expert"
    version = "1"

    def __init__(self) -> None:
        self.task: Task | None = None
        self.t = 0
        self.seen: list[str] = []
        self.memo: dict[str, Any] = {}

    def reset(self, info: dict[str, Any] | None = None) -> None:
        task = (info or {}).get("task") or {}
        tid = task.get("task_id") if isinstance(task, dict) else getattr(task, "task_id", None)
        self.task = get_task(tid) if tid else None
        self.t = 0
        self.seen = []
        self.memo = {}

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if self.task is None:
            return _a("respond", "I was not told the task.", text="I cannot help without a task.")
        if self.t > 0:
            self.seen.append(observation)
        action = self.plan(observation)
        self.t += 1
        return action

    @abc.abstractmethod
    def plan(self, observation: str) -> Action:
        """The next action given the latest observation (``self.t`` actions so far)."""


class CodingExpert(ScriptedExpert):
    """Reads the module, applies the fix, runs the visible tests, submits."""

    def plan(self, observation: str) -> Action:
        task = self.task
        if task.data.get("swebench"):
            return self._swebench()
        path = task.data["module_path"]
        if self.t == 0:
            return _a("read_file", f"Read {path} to find `{task.data['function']}`.", path=path)
        if self.t == 1:
            if task.metadata.get("bug_kind") == "missing":
                return _a(
                    "write_file",
                    f"`{task.data['function']}` is missing; add it to the module.",
                    path=path,
                    content=task.data["fixed_source"],
                )
            return _a(
                "edit_file",
                f"Fix the {task.metadata['bug_kind'].replace('_', ' ')} "
                f"in `{task.data['function']}`.",
                path=path,
                old_str=task.data["target_buggy"],
                new_str=task.data["target_fixed"],
            )
        if self.t == 2:
            return _a("bash", "Run the visible tests.", command="python3 run_tests.py tests")
        return _a("submit", "The tests pass; submit.")

    def _swebench(self) -> Action:
        from knowlyr.taskset.swebench import apply_patch

        if "edits" not in self.memo:
            new = apply_patch(self.task.files, self.task.data["patch"])
            self.memo["edits"] = sorted(new.items())
        edits = self.memo["edits"]
        if self.t < len(edits):
            path, content = edits[self.t]
            if content is None:
                return _a("bash", f"Remove {path}.", command=f"rm -f -- '{path}'")
            return _a("write_file", f"Apply the fix to {path}.", path=path, content=content)
        return _a("submit", "The fix is in place; submit.")


_OID = re.compile(r"\b([A-Z0-9]{5})\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_TOPIC_WORDS = {
    "return an item": "returns",
    "delivery": "shipping",
    "warranty": "warranty",
    "refund": "refund",
}


class ConversationExpert(ScriptedExpert):
    """Looks up what the customer asks about and answers from the lookup."""

    def plan(self, observation: str) -> Action:
        family = self.task.family
        instr = self.task.instruction
        return getattr(self, f"_{family}")(instr, observation)

    def _order_status(self, instr: str, obs: str) -> Action:
        oid = _OID.findall(instr)[-1]
        if self.t == 0:
            return _a("query_stats", f"Look up order {oid}.", order_id=oid)
        status = obs.rsplit(":", 1)[-1].strip().split(",")[0].strip()
        return _a("respond", f"The order is {status}.", text=f"Order {oid} is {status}.")

    def _latest_order(self, instr: str, obs: str) -> Action:
        email = _EMAIL.search(instr).group(0).rstrip(".")
        if self.t == 0:
            return _a("query_stats", "Find the customer and their orders.", email=email)
        orders = re.findall(r"([A-Z0-9]{5}) \((\d{4}-\d\d-\d\d), (\w+)\)", obs)
        oid, _, status = max(orders, key=lambda o: o[1])
        return _a(
            "respond",
            f"The newest order is {oid}.",
            text=f"Your most recent order {oid} is {status}.",
        )

    def _refund(self, instr: str, obs: str) -> Action:
        oid = _OID.findall(instr.split("Order", 1)[1])[0]
        if self.t == 0:
            return _a("query_stats", f"Check order {oid} before refunding.", order_id=oid)
        if self.t == 1:
            status = re.search(r"status=(\w+)", obs).group(1)
            self.memo["status"] = status
            if status == "delivered":
                return _a(
                    "send_message",
                    "It was delivered, so policy allows a refund.",
                    to="billing",
                    action="refund",
                    order_id=oid,
                )
            return _a(
                "respond",
                f"Not delivered ({status}): no refund yet.",
                text=f"Order {oid} is {status}, so it cannot be refunded yet.",
            )
        amount = re.search(r"\$\d+\.\d\d", obs).group(0)
        return _a(
            "respond", "Confirm the refund.", text=f"I have refunded {amount} for order {oid}."
        )

    def _cancel_order(self, instr: str, obs: str) -> Action:
        oid = _OID.findall(instr.split("cancel order", 1)[1])[0]
        if self.t == 0:
            return _a("query_stats", f"Check order {oid} before cancelling.", order_id=oid)
        if self.t == 1:
            status = re.search(r"status=(\w+)", obs).group(1)
            if status in ("pending", "processing"):
                return _a(
                    "send_message",
                    f"It is {status}, so it can still be cancelled.",
                    to="shipping",
                    action="cancel",
                    order_id=oid,
                )
            return _a(
                "respond",
                f"Already {status}: too late to cancel.",
                text=f"Order {oid} is already {status}, so it is too late to cancel it.",
            )
        return _a("respond", "Confirm the cancellation.", text=f"Order {oid} is cancelled.")

    def _address_change(self, instr: str, obs: str) -> Action:
        email = _EMAIL.search(instr).group(0).rstrip(".")
        address = instr.split("address to ", 1)[1].rstrip(".")
        if self.t == 0:
            return _a("query_stats", "Find the customer's account.", email=email)
        if self.t == 1:
            uid = re.search(r"user (U\d+)", obs).group(1)
            return _a(
                "send_message",
                f"Ask shipping to update {uid}'s address.",
                to="shipping",
                action="update_address",
                user_id=uid,
                address=address,
            )
        return _a(
            "respond", "Confirm the change.", text=f"Done: your shipping address is now {address}."
        )

    def _item_order(self, instr: str, obs: str) -> Action:
        # the back office shows which order holds the item: the expert opens that one directly
        oid, item = self.task.data["order_id"], self.task.data["item"]
        if self.t == 0:
            email = _EMAIL.search(instr).group(0).rstrip(".")
            return _a("query_stats", "Find the customer's orders.", email=email)
        if self.t == 1:
            return _a("query_stats", f"Open order {oid}.", order_id=oid)
        status = re.search(r"status=(\w+)", obs).group(1)
        return _a(
            "respond",
            f"It holds the {item}; it is {status}.",
            text=f"Your {item} order {oid} is {status}.",
        )

    def _return_policy(self, instr: str, obs: str) -> Action:
        topic = next(v for k, v in _TOPIC_WORDS.items() if k in instr)
        if self.t == 0:
            return _a(
                "web_search",
                f"Search the help center for the {topic} policy.",
                query=f"{topic} policy",
            )
        line = next(ln for ln in obs.splitlines() if ln.startswith(f"[help-{topic}]"))
        n = re.search(r"(\d+) days", line).group(1)
        return _a(
            "respond",
            f"The {topic} policy says {n} days.",
            text=f"You have {n} days: see our {topic} policy.",
        )


_SERVICE = re.compile(r"\b([a-z]+-[a-z]+)\b")


class EngineeringExpert(ScriptedExpert):
    """Reads the service's config and the ownership page, then answers."""

    def plan(self, observation: str) -> Action:
        svc = _SERVICE.search(self.task.instruction).group(1)
        path = f"services/{svc}/config.yaml"
        fam = self.task.family
        if fam == "config_lookup":
            if self.t == 0:
                return _a("read_file", f"Read {svc}'s config.", path=path)
            port = re.search(r"port:\s*(\d+)", observation).group(1)
            timeout = re.search(r"timeout_ms:\s*(\d+)", observation).group(1)
            return _a(
                "respond",
                "Port and timeout are in the config.",
                text=f"{svc} listens on port {port} with a request timeout of {timeout} ms.",
            )
        if fam == "change_history":
            if self.t == 0:
                return _a(
                    "git",
                    "The change is in the config's git history.",
                    args=f"log -p --format=%s -- {path}",
                )
            ticket = re.search(
                rf"Set {re.escape(svc)} retries to \d+ \((OPS-\d+)\)", observation
            ).group(1)
            old = re.search(r"^-max_retries: (\d+)", observation, re.M).group(1)
            new = re.search(r"^\+max_retries: (\d+)", observation, re.M).group(1)
            return _a(
                "respond",
                f"{ticket} changed it from {old}.",
                text=f"{ticket} changed the retry limit of {svc}; it was {old} before (now {new}).",
            )
        if fam == "ownership":
            if self.t == 0:
                return _a(
                    "knowledge_base",
                    "Ownership is in the knowledge base.",
                    query=f"{svc} ownership",
                )
            team, channel = _owner(observation, svc)
            return _a(
                "respond",
                f"{team} owns it.",
                text=f"{svc} is owned by the {team} team; page them in {channel}.",
            )
        if self.t == 0:
            return _a("read_file", f"Read {svc}'s retry limit.", path=path)
        if self.t == 1:
            self.memo["retries"] = re.search(r"max_retries:\s*(\d+)", observation).group(1)
            return _a("knowledge_base", "Find the owning team.", query=f"{svc} ownership")
        team, _ = _owner(observation, svc)
        return _a(
            "respond",
            "Combine the config and the owner.",
            text=f"{svc} allows {self.memo['retries']} retries; "
            f"the {team} team must review a change.",
        )


def _owner(observation: str, svc: str) -> tuple[str, str]:
    m = re.search(
        rf"{re.escape(svc)} is owned by the (\w+) team\. Page them in (#[\w-]+)", observation
    )
    return m.group(1), m.group(2)


class AdvisoryExpert(ScriptedExpert):
    """Reads the plans or the retention policy, records a note when asked, answers."""

    def plan(self, observation: str) -> Action:
        instr = self.task.instruction
        if self.task.family == "retention":
            m = re.search(r"keep ([\w-]+) records for a client in (\w+)", instr)
            cls, region = m.group(1), m.group(2)
            if self.t == 0:
                return _a(
                    "knowledge_base",
                    f"Look up {region}'s retention policy.",
                    query=f"retention policy {region}",
                )
            n = re.search(
                rf"In {region}, {re.escape(cls)} records are kept for (\d+) days", observation
            ).group(1)
            return _a(
                "respond",
                f"{region} keeps {cls} for {n} days.",
                text=f"{cls} records in {region} must be kept for {n} days.",
            )
        users = int(re.search(r"has (\d+) users", instr).group(1))
        need_sso = "single sign-on" in instr
        client = re.search(r"\((client-\d+)\)", instr).group(1)
        if self.t == 0:
            return _a(
                "knowledge_base",
                "List the plans with prices and limits.",
                query="plan costs per month users single sign-on",
            )
        if self.t == 1:
            plans = []
            for name, price, seats, sso in re.findall(
                r"The (\w+) plan costs \$(\d+) per month, "
                r"allows up to (unlimited|\d+) users, (and includes|without)",
                observation,
            ):
                cap = 10**9 if seats == "unlimited" else int(seats)
                plans.append((int(price), name, cap, sso == "and includes"))
            fit = min(p for p in plans if p[2] >= users and (p[3] or not need_sso))
            self.memo["answer"] = f"Recommend the {fit[1]} plan at ${fit[0]} per month."
            return _a(
                "create_note",
                f"{fit[1]} is the cheapest that fits; note it.",
                title=client,
                text=self.memo["answer"],
            )
        return _a("respond", "Give the recommendation.", text=self.memo["answer"])


class DiscussionExpert(ScriptedExpert):
    """Reads the policy and the facts it applies to, reasons, then takes a position."""

    def plan(self, observation: str) -> Action:
        instr = self.task.instruction
        if self.task.family == "migration":
            svc = _SERVICE.search(instr).group(1)
            queries = ["migration policy", f"{svc} incident report"]
        else:
            api = re.search(r"the (\w+) v1 API", instr).group(1)
            queries = ["deprecation policy", f"{api} API usage"]
        if self.t < 2:
            if self.t == 1:
                self.memo["policy"] = observation
            return _a("knowledge_base", f"Read the {queries[self.t]}.", query=queries[self.t])
        if self.t == 2:
            self.memo["facts"] = observation
            return _a("think", "Apply the policy.", thought=self._decide())
        return _a("respond", "State the position with the evidence.", text=self.memo["answer"])

    def _decide(self) -> str:
        policy, facts, instr = self.memo["policy"], self.memo["facts"], self.task.instruction
        if self.task.family == "migration":
            k = int(re.search(r"more than (\d+) incidents", policy).group(1))
            svc = _SERVICE.search(instr).group(1)
            m = int(re.search(rf"{re.escape(svc)} had (\d+) incidents", facts).group(1))
            pos = "for" if m > k else "against"
            self.memo["answer"] = (
                f"Position: {pos}. {svc} had {m} incidents last quarter "
                f"and the policy threshold is more than {k}."
            )
            return f"{m} incidents vs threshold {k}: {pos}"
        k = int(re.search(r"below (\d+)%", policy).group(1))
        api = re.search(r"the (\w+) v1 API", instr).group(1)
        v = int(re.search(rf"The {re.escape(api)} v1 API serves (\d+)%", facts).group(1))
        pos = "for" if v < k else "against"
        self.memo["answer"] = (
            f"Position: {pos}. The {api} v1 API serves {v}% of traffic; "
            f"the policy threshold is {k}%."
        )
        return f"{v}% vs threshold {k}%: {pos}"


def _find_task(task_id: str | None) -> Task | None:
    from knowlyr.errors import ConfigError

    if not task_id:
        return None
    try:
        return get_task(task_id)
    except ConfigError:
        return None


class ReferenceExpert(ScriptedExpert):
    """Replays ``task.reference_solution`` (for loaded tasks that carry one)."""

    def plan(self, observation: str) -> Action:
        steps = self.task.reference_solution
        if self.t < len(steps):
            step = steps[self.t]
            why = step.get("thought") or f"Step {self.t + 1} of the reference solution."
            return {"tool": step["tool"], "params": dict(step.get("params") or {}), "thought": why}
        terminal = "submit" if self.task.domain == "coding" else "respond"
        params = {} if terminal == "submit" else {"text": self.task.reference_answer or "Done."}
        return _a(terminal, "The reference solution is done.", **params)


_SUITES_WITH_EXPERTS = {
    "browser",
    "coding",
    "conversation",
    "engineering",
    "advisory",
    "discussion",
    "swebench",
}

_EXPERTS: dict[str, type[ScriptedExpert]] = {
    "coding": CodingExpert,
    "conversation": ConversationExpert,
    "engineering": EngineeringExpert,
    "advisory": AdvisoryExpert,
    "discussion": DiscussionExpert,
}


class ExpertAgent(Agent):
    """The scripted expert for whatever domain the task is in (chosen on every reset)."""

    name = "expert"
    version = "1"

    def __init__(self) -> None:
        self.inner: ScriptedExpert | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        task = (info or {}).get("task") or {}
        if not isinstance(task, dict):
            task = {
                "task_id": getattr(task, "task_id", None),
                "domain": getattr(task, "domain", ""),
            }
        domain, suite = task.get("domain", "generic"), task.get("suite")
        cls = _EXPERTS.get(domain) if suite in _SUITES_WITH_EXPERTS else None
        if domain == "browser" and suite in _SUITES_WITH_EXPERTS:
            from knowlyr.browser.expert import BrowserExpert  # reads pages, lives with the sites

            cls = BrowserExpert
        if cls is None:
            full = _find_task(task.get("task_id"))
            if full is not None and full.reference_solution:
                self.inner = ReferenceExpert()
                self.inner.reset(info)
                return
            from knowlyr.errors import ConfigError

            raise ConfigError(
                f"no scripted expert for suite {suite!r} (domain {domain!r}) and the task has no "
                f"reference_solution; experts exist for the suites {sorted(_SUITES_WITH_EXPERTS)}"
            )
        self.inner = cls()
        self.inner.reset(info)

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if self.inner is None:
            self.reset(info)
        return self.inner.act(observation, info)
