"""The scripted expert of the ``browser`` suite: reads each page and acts on what it shows.

It knows its task's goal (the product, the user, the option: what only a solver would know,
from ``task.data["plan"]``) and finds the elements to use on the page it sees, by role and
name (``[12] link "Next page"``): it pages through the user list until the user shows up,
takes the first result of a sorted, filtered search, reads an option's row of a table. An
element it cannot find makes it read the page once more, then give up (``submit``).

Example:
    >>> import knowlyr
    >>> from knowlyr.agents import ExpertAgent
    >>> env, agent = knowlyr.make("knowlyr/browser"), ExpertAgent()  # doctest: +SKIP
    >>> ts = env.reset(task="browser-admin_delete-0001")  # doctest: +SKIP
    >>> agent.reset(ts.info)  # doctest: +SKIP
    >>> while not ts.done:  # doctest: +SKIP
    ...     ts = env.step(agent.act(ts.observation, ts.info))
    >>> ts.info["outcome"]["success"]  # doctest: +SKIP
    True
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

from knowlyr.agents.scripted import ScriptedExpert
from knowlyr.core.env import Action

__all__ = ["BrowserExpert", "find_element"]

_ELEMENT = re.compile(r'\[(\d+)\] (\w+) "((?:[^"\\]|\\.)*)"')
_PAGE = re.compile(r"^(Page: |A dialog is open)", re.M)
_SHOP_FIELDS = (
    ("Full name", "name"),
    ("Email", "email"),
    ("Street address", "address"),
    ("City", "city"),
    ("ZIP code", "zip"),
)

Script = Generator[Action, str, None]


def find_element(page: str, role: str, name: str, *, to: str = "") -> int | None:
    """The id of the first element of ``role`` named ``name`` (case-insensitive) on ``page``;
    with ``to``, only a link whose path starts with it (``to="/page/"``)."""
    want = name.strip().lower()
    for m in _ELEMENT.finditer(page):
        if m.group(2) == role and m.group(3).strip().lower() == want:
            if to and not page[m.end() :].startswith(f" -> {to}"):
                continue
            return int(m.group(1))
    return None


def _a(tool: str, why: str, **params: Any) -> Action:
    return {"tool": tool, "params": params, "thought": why}


class _Missing(Exception):
    def __init__(self, role: str, name: str):
        super().__init__(f'{role} "{name}"')
        self.role, self.name = role, name


class BrowserExpert(ScriptedExpert):
    """Solves every family of the ``browser`` suite from the pages it reads."""

    def plan(self, observation: str) -> Action:
        if self.t == 0:
            self.memo["script"] = self._run()
        page = _PAGE.search(observation)
        if page is not None:  # a page (or dialog) it can act on, without the action's echo
            self.memo["page"] = observation[page.start() :]
        try:
            return next(self.memo["script"])
        except StopIteration:
            return _a("submit", "Done.")

    # -- helpers ----------------------------------------------------------------------------

    @property
    def page(self) -> str:
        return self.memo["page"]

    def _id(self, role: str, name: str, *, to: str = "") -> int:
        found = find_element(self.page, role, name, to=to)
        if found is None:
            raise _Missing(role, name)
        return found

    def _run(self) -> Script:
        """The family's script, ending with ``submit`` (also when an element is missing)."""
        script = getattr(self, f"_{self.task.family}")(self.task.data["plan"])
        try:
            yield from script
        except _Missing as e:
            yield _a("submit", f"I cannot find the {e.role} {e.name!r}; give up.")
            return
        yield _a("submit", "The task is done.")

    def _fill(self, role: str, name: str, text: str, why: str) -> Action:
        return _a("type_text", why, element_id=self._id(role, name), text=text)

    def _open_product(self, name: str) -> Script:
        if find_element(self.page, "textbox", "Search products") is None:
            yield _a("navigate", "Go to the shop's home page to search.", url="/")
        yield _a(
            "type_text",
            f"Search for {name}.",
            element_id=self._id("textbox", "Search products"),
            text=name,
            press_enter=True,
        )
        yield _a("click", f"Open {name}.", element_id=self._id("link", name))

    def _add(self, qty: int) -> Script:
        if qty != 1:
            yield self._fill("textbox", "Quantity", str(qty), f"I need {qty} of them.")
        yield _a("click", "Add it to the cart.", element_id=self._id("button", "Add to cart"))

    def _checkout(self) -> Script:
        c = self.task.data["goal"]["customer"]
        yield _a("click", "Check out.", element_id=self._id("link", "Proceed to checkout"))
        for label, key in _SHOP_FIELDS:
            yield self._fill("textbox", label, c[key], f"Fill in the {label.lower()}.")
        yield self._fill("combobox", "Shipping", c["shipping"], f"{c['shipping']} shipping.")
        yield _a("click", "Place the order.", element_id=self._id("button", "Place order"))

    # -- shop -------------------------------------------------------------------------------

    def _shop_buy(self, plan: dict[str, Any]) -> Script:
        yield from self._open_product(plan["product"])
        yield from self._add(plan["qty"])
        yield from self._checkout()

    def _shop_filter(self, plan: dict[str, Any]) -> Script:
        yield _a(
            "click",
            "List all products to filter them.",
            element_id=self._id("link", "All products"),
        )
        yield self._fill("combobox", "Category", plan["category"], f"Only {plan['category']}.")
        yield self._fill("textbox", "Max price", plan["max_price"], "At most the budget.")
        yield self._fill("combobox", "Min rating", plan["rating"], "Only well rated ones.")
        yield self._fill("combobox", "Sort by", "Price: low to high", "Cheapest first.")
        yield _a("click", "Apply the filters.", element_id=self._id("button", "Apply filters"))
        first = re.search(r"products found\n\[(\d+)\] link", self.page)
        if first is None:
            raise _Missing("link", "first result")
        yield _a("click", "The first result is the cheapest match.", element_id=int(first.group(1)))
        yield from self._add(1)
        yield from self._checkout()

    def _shop_cart(self, plan: dict[str, Any]) -> Script:
        for name, qty in plan["items"]:
            yield from self._open_product(name)
            yield from self._add(qty)

    # -- docs -------------------------------------------------------------------------------

    def _row(self, option: str) -> list[str]:
        for line in self.page.splitlines():
            cells = [c.strip() for c in line.split("|")]
            if cells[0] == option:
                return cells
        raise _Missing("row", option)

    def _docs_default(self, plan: dict[str, Any]) -> Script:
        yield from self._open_doc(plan)
        value = self._row(plan["option"])[2]
        yield _a("submit", f"The table gives {plan['option']} = {value}.", answer=value)

    def _docs_since(self, plan: dict[str, Any]) -> Script:
        section = plan["section"]
        yield _a("click", f"Open the {section} section.", element_id=self._id("link", section))
        yield _a(
            "click",
            f"Open the {plan['page']} page.",
            element_id=self._id("link", plan["page"], to="/page/"),
        )
        version = self._row(plan["option"])[3]
        yield _a("submit", f"{plan['option']} came in {version}.", answer=version)

    def _docs_feedback(self, plan: dict[str, Any]) -> Script:
        yield from self._open_doc(plan)
        choice = "Yes" if plan["helpful"] == "yes" else "No"
        yield _a("click", f"Helpful: {choice}.", element_id=self._id("radio", choice))
        yield self._fill("textbox", "Comment", plan["comment"], "Write the comment.")
        yield _a("click", "Send it.", element_id=self._id("button", "Send feedback"))

    def _open_doc(self, plan: dict[str, Any]) -> Script:
        yield _a(
            "type_text",
            f"Search the docs for {plan['query']}.",
            element_id=self._id("textbox", "Search the docs"),
            text=plan["query"],
            press_enter=True,
        )
        yield _a(
            "click",
            f"Open the {plan['page']} page.",
            element_id=self._id("link", plan["page"], to="/page/"),
        )

    # -- admin ------------------------------------------------------------------------------

    def _find_user(self, name: str, control: str, role: str) -> Script:
        yield _a("click", "Open the user list.", element_id=self._id("link", "Users"))
        while find_element(self.page, role, f"{control} {name}") is None:
            yield _a(
                "click",
                f"{name} is not on this page; try the next one.",
                element_id=self._id("link", "Next page"),
            )

    def _admin_edit(self, plan: dict[str, Any]) -> Script:
        name = plan["name"]
        yield from self._find_user(name, "Edit", "link")
        yield _a("click", f"Edit {name}.", element_id=self._id("link", f"Edit {name}"))
        field = plan["field"].capitalize()
        yield self._fill("combobox", field, plan["value"], f"Set the {plan['field']}.")
        yield _a("click", "Save the change.", element_id=self._id("button", "Save"))

    def _admin_delete(self, plan: dict[str, Any]) -> Script:
        name = plan["name"]
        yield from self._find_user(name, "Delete", "button")
        yield _a("click", f"Delete {name}.", element_id=self._id("button", f"Delete {name}"))
        yield _a("click", "Confirm the deletion.", element_id=self._id("button", "OK"))

    def _admin_create(self, plan: dict[str, Any]) -> Script:
        yield _a("click", "Open the new user form.", element_id=self._id("link", "New user"))
        yield self._fill("textbox", "Name", plan["name"], "Fill in the name.")
        yield self._fill("textbox", "Email", plan["email"], "Fill in the email.")
        yield self._fill("combobox", "Role", plan["role"], "Choose the role.")
        yield self._fill("combobox", "Team", plan["team"], "Choose the team.")
        yield _a("click", "Create the user.", element_id=self._id("button", "Save"))
