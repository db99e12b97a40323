"""The admin panel: a paginated user list, edit and create forms, a delete confirmation dialog.

State for a seed: 45-75 users (name, email, role, team, status), listed 10 a page in name
order; there is no search, so a user is found by paging. Deleting asks the browser's
``confirm()`` dialog first: nothing is deleted unless it is accepted. The outcome is read
from the state: the record edited (and no other), the user deleted (and no other), the user
created.

Families (:data:`FAMILIES`):

- ``admin_edit``: change a user's role or team;
- ``admin_delete``: delete a user (through the confirmation dialog);
- ``admin_create``: add a user (the form validates the email and refuses a duplicate).
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from typing import Any

from knowlyr.browser.server import Request, Response, Site, esc

__all__ = ["FAMILIES", "AdminSite", "directory"]

ROLES = ("Viewer", "Editor", "Admin")
TEAMS = ("Sales", "Support", "Platform", "Finance", "Design")
STATUSES = ("Active", "Suspended")
PER_PAGE = 10
_FIRST = (
    "Aiko", "Bruno", "Carla", "Dmitri", "Esme", "Felix", "Gita", "Hana", "Ivo", "Jade",
    "Kofi", "Lena", "Marek", "Nia", "Omar", "Paula", "Rafael", "Sana", "Tomas", "Uma",
)  # fmt: skip
_LAST = (
    "Abbott", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Gomez", "Hughes", "Ito",
    "Jensen", "Kowalski", "Lopez", "Meyer", "Nakamura", "Olsen", "Petrov", "Rossi", "Schmidt",
)  # fmt: skip
_EMAIL = re.compile(r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$")


def directory(seed: int) -> list[dict[str, Any]]:
    """The users for ``seed``, in name order (ids are stable, distinct names and emails)."""
    rng = random.Random(f"admin:{seed}")
    names = rng.sample([f"{f} {last}" for f in _FIRST for last in _LAST], rng.randint(45, 75))
    users = []
    for i, name in enumerate(names):
        first, last = name.lower().split()
        users.append(
            {
                "id": 100 + i,
                "name": name,
                "email": f"{first}.{last}@corp.example",
                "role": rng.choice(ROLES),
                "team": rng.choice(TEAMS),
                "status": rng.choices(STATUSES, (9, 1))[0],
            }
        )
    return sorted(users, key=lambda u: u["name"])


def _options(values: tuple[str, ...], current: str) -> str:
    return "".join(f"<option{' selected' if v == current else ''}>{v}</option>" for v in values)


class AdminSite(Site):
    name = "admin"
    title = "Admin Panel"
    nav = (("/", "Dashboard"), ("/users", "Users"), ("/users/new", "New user"))

    def build(self, seed: int) -> dict[str, Any]:
        users = directory(seed)
        return {"users": users, "initial": copy.deepcopy(users), "next_id": 900}

    def routes(self) -> dict[tuple[str, str], Callable[[Request], Response]]:
        return {
            ("GET", "/"): self.home,
            ("GET", "/users"): self.users,
            ("GET", "/users/new"): self.new_form,
            ("POST", "/users/new"): self.create,
            ("GET", "/users/"): self.edit_form,
            ("POST", "/users/"): self.post_user,
        }

    def _user(self, uid: str) -> dict[str, Any] | None:
        return next((u for u in self.state["users"] if str(u["id"]) == uid), None)

    def home(self, req: Request) -> Response:
        users = self.state["users"]
        active = sum(u["status"] == "Active" for u in users)
        body = (
            f"<h1>Dashboard</h1><p>{len(users)} users, {active} active.</p>"
            "<a href='/users'>Manage users</a>"
        )
        return self.render("Dashboard", body)

    def users(self, req: Request) -> Response:
        users = sorted(self.state["users"], key=lambda u: u["name"])
        pages = max(1, -(-len(users) // PER_PAGE))
        try:
            n = min(max(1, int(req.arg("page", "1"))), pages)
        except ValueError:
            n = 1
        rows = "".join(
            f"<tr><td>{esc(u['name'])}</td><td>{esc(u['email'])}</td><td>{u['role']}</td>"
            f"<td>{u['team']}</td><td>{u['status']}</td><td>"
            f"<a href='/users/{u['id']}/edit' aria-label='Edit {esc(u['name'])}'>Edit</a> "
            f"<form action='/users/{u['id']}/delete' method='post' style='display:inline' "
            f"onsubmit=\"return confirm('Delete {esc(u['name'])}? This cannot be undone.')\">"
            f"<button type='submit' aria-label='Delete {esc(u['name'])}'>Delete</button></form>"
            "</td></tr>"
            for u in users[(n - 1) * PER_PAGE : n * PER_PAGE]
        )
        notice = {
            "saved": "<p class='notice'>Changes saved.</p>",
            "deleted": "<p class='notice'>User deleted.</p>",
            "created": "<p class='notice'>User created.</p>",
        }.get(req.arg("done"), "")
        pager = f"<p>Page {n} of {pages}</p>"
        if n > 1:
            pager += f"<a href='/users?page={n - 1}'>Previous page</a> "
        if n < pages:
            pager += f"<a href='/users?page={n + 1}'>Next page</a>"
        head = (
            "<tr><th>Name</th><th>Email</th><th>Role</th><th>Team</th><th>Status</th><th></th></tr>"
        )
        body = f"<h1>Users</h1>{notice}<table>{head}{rows}</table>{pager}"
        return self.render("Users", body)

    def _form(self, action: str, title: str, values: dict[str, str], errors: list[str]) -> str:
        err = "".join(f"<p class='error'>{esc(e)}</p>" for e in errors)
        status = (
            f"<label>Status <select name='status'>{_options(STATUSES, values['status'])}"
            "</select></label>"
            if "status" in values
            else ""
        )
        return (
            f"<h1>{esc(title)}</h1>{err}<form action='{action}' method='post'>"
            f"<label>Name <input name='name' value='{esc(values['name'])}'></label>"
            f"<label>Email <input name='email' value='{esc(values['email'])}'></label>"
            f"<label>Role <select name='role'>{_options(ROLES, values['role'])}</select></label>"
            f"<label>Team <select name='team'>{_options(TEAMS, values['team'])}</select></label>"
            f"{status}<button type='submit'>Save</button></form>"
        )

    def _check(self, values: dict[str, str], uid: int | None) -> list[str]:
        errors = []
        if not values["name"]:
            errors.append("Name is required.")
        if not _EMAIL.match(values["email"]):
            errors.append("Enter a valid email address.")
        elif any(
            u["email"].lower() == values["email"].lower() and u["id"] != uid
            for u in self.state["users"]
        ):
            errors.append("Another user has this email address.")
        if values["role"] not in ROLES:
            errors.append("Choose a role.")
        if values["team"] not in TEAMS:
            errors.append("Choose a team.")
        return errors

    def new_form(self, req: Request) -> Response:
        values = {"name": "", "email": "", "role": ROLES[0], "team": TEAMS[0]}
        return self.render("New user", self._form("/users/new", "New user", values, []))

    def create(self, req: Request) -> Response:
        values = {k: req.arg(k) for k in ("name", "email", "role", "team")}
        errors = self._check(values, None)
        if errors:
            return self.render("New user", self._form("/users/new", "New user", values, errors))
        self.state["users"].append({"id": self.state["next_id"], **values, "status": "Active"})
        self.state["next_id"] += 1
        return Response.redirect("/users?done=created")

    def edit_form(self, req: Request) -> Response:
        m = re.fullmatch(r"/users/(\d+)/edit", req.path)
        user = self._user(m.group(1)) if m else None
        if user is None:
            return Response.not_found("user")
        action = f"/users/{user['id']}/edit"
        return self.render("Edit user", self._form(action, f"Edit {user['name']}", user, []))

    def post_user(self, req: Request) -> Response:
        m = re.fullmatch(r"/users/(\d+)/(edit|delete)", req.path)
        user = self._user(m.group(1)) if m else None
        if user is None:
            return Response.not_found("user")
        if m.group(2) == "delete":
            self.state["users"].remove(user)
            return Response.redirect("/users?done=deleted")
        values = {k: req.arg(k) for k in ("name", "email", "role", "team", "status")}
        errors = self._check(values, user["id"])
        if values["status"] not in STATUSES:
            errors.append("Choose a status.")
        if errors:
            action = f"/users/{user['id']}/edit"
            return self.render("Edit user", self._form(action, "Edit user", values, errors))
        user.update(values)
        return Response.redirect("/users?done=saved")

    def outcome(self, goal: dict[str, Any], answer: str | None) -> dict[str, Any]:
        now = {u["id"]: u for u in self.state["users"]}
        before = {u["id"]: u for u in self.state["initial"]}
        kind = goal["kind"]
        if kind == "create":
            new = [u for uid, u in now.items() if uid not in before]
            want = goal["user"]
            match = [u for u in new if all(u[k] == v for k, v in want.items())]
            untouched = all(now.get(uid) == u for uid, u in before.items())
            ok = len(new) == 1 and len(match) == 1 and untouched
            return {"success": ok, "score": float(ok), "created": len(new)}
        uid = goal["user_id"]
        others_same = all(now.get(i) == u for i, u in before.items() if i != uid)
        others_same = others_same and set(now) - {uid} == set(before) - {uid}
        if kind == "delete":
            ok = uid not in now and others_same
            return {"success": ok, "score": float(ok), "users": len(now)}
        user = now.get(uid)
        changed = user is not None and all(user[k] == v for k, v in goal["changes"].items())
        rest_same = user is not None and all(
            user[k] == before[uid][k] for k in user if k not in goal["changes"]
        )
        ok = changed and rest_same and others_same
        return {"success": ok, "score": 1.0 if ok else 0.5 if changed else 0.0}


def _target(seed: int, family: str) -> tuple[random.Random, list[dict[str, Any]], int]:
    rng = random.Random(f"{family}:{seed}")
    users = directory(seed)
    return rng, users, rng.randrange(len(users))


def _edit(seed: int) -> dict[str, Any]:
    rng, users, i = _target(seed, "admin_edit")
    u = users[i]
    field = rng.choice(("role", "team"))
    value = rng.choice([v for v in (ROLES if field == "role" else TEAMS) if v != u[field]])
    return {
        "instruction": f"In the admin panel, change the {field} of {u['name']} to {value}.",
        "goal": {"kind": "edit", "user_id": u["id"], "changes": {field: value}},
        "plan": {"name": u["name"], "page": i // PER_PAGE + 1, "field": field, "value": value},
    }


def _delete(seed: int) -> dict[str, Any]:
    _, users, i = _target(seed, "admin_delete")
    u = users[i]
    return {
        "instruction": f"In the admin panel, delete the user {u['name']} ({u['email']}).",
        "goal": {"kind": "delete", "user_id": u["id"]},
        "plan": {"name": u["name"], "page": i // PER_PAGE + 1},
    }


def _create(seed: int) -> dict[str, Any]:
    rng, users, _ = _target(seed, "admin_create")
    taken = {u["name"] for u in users}
    name = rng.choice(
        [f"{f} {last}" for f in _FIRST for last in _LAST if f"{f} {last}" not in taken]
    )
    first, last = name.lower().split()
    user = {
        "name": name,
        "email": f"{first[0]}{last}@corp.example",
        "role": rng.choice(ROLES),
        "team": rng.choice(TEAMS),
    }
    return {
        "instruction": (
            f"In the admin panel, add a new user {name} with the email {user['email']}, "
            f"the role {user['role']} and the team {user['team']}."
        ),
        "goal": {"kind": "create", "user": user},
        "plan": dict(user),
    }


FAMILIES: dict[str, Callable[[int], dict[str, Any]]] = {
    "admin_edit": _edit,
    "admin_delete": _delete,
    "admin_create": _create,
}
