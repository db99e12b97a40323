"""The shop: search, filters, product pages, a cart and a checkout with form validation.

State for a seed: a catalog of 36 products in 6 categories (distinct prices), an empty cart
and no orders. The outcome is read from the state: the orders placed (items, quantities and
the shipping details) and the cart.

Families (:data:`FAMILIES`):

- ``shop_buy``: buy a named product in a given quantity and ship it to a given customer;
- ``shop_filter``: buy the cheapest product of a category under a price with a minimum rating
  (the filters find it);
- ``shop_cart``: put two products in the cart in given quantities, without checking out.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from knowlyr.browser.server import Request, Response, Site, esc

__all__ = ["FAMILIES", "ShopSite", "catalog"]

CATEGORIES = ("Lamps", "Chairs", "Desks", "Rugs", "Shelves", "Mirrors")
_ADJ = ("Brass", "Oak", "Linen", "Velvet", "Walnut", "Copper", "Marble", "Cedar", "Wool", "Steel")
_STYLE = ("Nordic", "Classic", "Compact", "Grand", "Urban", "Rustic", "Modern", "Coastal")
_NOUN = {
    "Lamps": "Lamp",
    "Chairs": "Chair",
    "Desks": "Desk",
    "Rugs": "Rug",
    "Shelves": "Shelf",
    "Mirrors": "Mirror",
}
_FIRST = ("Ana", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas")
_LAST = ("Moreau", "Okafor", "Silva", "Tanaka", "Novak", "Larsen", "Quinn", "Reyes", "Haas")
_STREETS = ("Elm Street", "Harbor Road", "Mill Lane", "Park Avenue", "Station Road", "Birch Way")
_CITIES = ("Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Ashford")
SHIPPING = ("Standard", "Express")
RATINGS = (("Any", 0.0), ("3 stars & up", 3.0), ("4 stars & up", 4.0), ("4.5 stars & up", 4.5))
SORTS = (("Relevance", "relevance"), ("Price: low to high", "price"), ("Rating", "rating"))
_EMAIL = re.compile(r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$")


def catalog(seed: int) -> list[dict[str, Any]]:
    """The 36 products of the shop for ``seed`` (ids 1..36, distinct names and prices)."""
    rng = random.Random(f"shop:{seed}")
    prices = rng.sample(range(1500, 40000, 25), 36)
    names: set[str] = set()
    products = []
    for i in range(36):
        cat = CATEGORIES[i % 6]
        while True:
            name = f"{rng.choice(_STYLE)} {rng.choice(_ADJ)} {_NOUN[cat]}"
            if name not in names:
                names.add(name)
                break
        products.append(
            {
                "id": i + 1,
                "name": name,
                "category": cat,
                "price": prices[i],
                "rating": rng.randint(25, 50) / 10,
                "stock": rng.randint(3, 12),
            }
        )
    return products


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


class ShopSite(Site):
    name = "shop"
    title = "Acme Home Shop"
    nav = (("/", "Home"), ("/search", "All products"), ("/cart", "Cart"))

    def build(self, seed: int) -> dict[str, Any]:
        return {"products": catalog(seed), "cart": {}, "orders": []}

    def routes(self) -> dict[tuple[str, str], Callable[[Request], Response]]:
        return {
            ("GET", "/"): self.home,
            ("GET", "/search"): self.search,
            ("GET", "/product/"): self.product,
            ("POST", "/cart/add"): self.cart_add,
            ("POST", "/cart/remove"): self.cart_remove,
            ("GET", "/cart"): self.cart,
            ("GET", "/checkout"): self.checkout_form,
            ("POST", "/checkout"): self.checkout,
            ("GET", "/order/"): self.order,
        }

    def _product(self, pid: Any) -> dict[str, Any] | None:
        try:
            return self.state["products"][int(pid) - 1]
        except (ValueError, IndexError, TypeError):
            return None

    def home(self, req: Request) -> Response:
        cats = "".join(f'<li><a href="/search?category={c}">{c}</a></li>' for c in CATEGORIES)
        body = (
            "<h1>Acme Home Shop</h1><form action='/search' method='get'>"
            "<label>Search products <input name='q' type='search'></label>"
            "<button type='submit'>Search</button></form>"
            f"<h2>Categories</h2><ul>{cats}</ul>"
        )
        return self.render("Home", body)

    def search(self, req: Request) -> Response:
        q, cat = req.arg("q").lower(), req.arg("category")
        try:
            max_price = (
                round(float(req.arg("max_price").lstrip("$")) * 100)
                if req.arg("max_price")
                else None
            )
        except ValueError:
            max_price = None
        min_rating = float(req.arg("min_rating") or 0)
        sort = req.arg("sort", "relevance")
        hits = [
            p
            for p in self.state["products"]
            if all(w in p["name"].lower() for w in q.split())
            and (not cat or p["category"] == cat)
            and (max_price is None or p["price"] <= max_price)
            and p["rating"] >= min_rating
        ]
        if sort == "price":
            hits.sort(key=lambda p: p["price"])
        elif sort == "rating":
            hits.sort(key=lambda p: -p["rating"])
        opts = "".join(
            f"<option value='{c}'{' selected' if c == cat else ''}>{c or 'All'}</option>"
            for c in ("", *CATEGORIES)
        )
        ropts = "".join(
            f"<option value='{v}'{' selected' if v == min_rating else ''}>{t}</option>"
            for t, v in RATINGS
        )
        sopts = "".join(
            f"<option value='{v}'{' selected' if v == sort else ''}>{t}</option>" for t, v in SORTS
        )
        mp = esc(req.arg("max_price"))
        form = (
            "<form action='/search' method='get'>"
            f"<label>Search products <input name='q' type='search' value='{esc(req.arg('q'))}'>"
            f"</label><label>Category <select name='category'>{opts}</select></label>"
            f"<label>Max price <input name='max_price' value='{mp}'></label>"
            f"<label>Min rating <select name='min_rating'>{ropts}</select></label>"
            f"<label>Sort by <select name='sort'>{sopts}</select></label>"
            "<button type='submit'>Apply filters</button></form>"
        )
        rows = "".join(
            f"<li><a href='/product/{p['id']}'>{esc(p['name'])}</a> {money(p['price'])}, "
            f"rated {p['rating']:.1f}</li>"
            for p in hits
        )
        body = f"<h1>Products</h1>{form}<p>{len(hits)} products found</p><ul>{rows}</ul>"
        return self.render("Search", body)

    def product(self, req: Request) -> Response:
        p = self._product(req.path.rsplit("/", 1)[1])
        if p is None:
            return Response.not_found("product")
        body = (
            f"<h1>{esc(p['name'])}</h1><p>Category: {p['category']}</p>"
            f"<p>Price: {money(p['price'])}</p><p>Rating: {p['rating']:.1f} of 5</p>"
            f"<p>In stock: {p['stock']}</p><form action='/cart/add' method='post'>"
            f"<input type='hidden' name='product' value='{p['id']}'>"
            "<label>Quantity <input name='qty' type='number' value='1' min='1'></label>"
            "<button type='submit'>Add to cart</button></form>"
        )
        return self.render(p["name"], body)

    def cart_add(self, req: Request) -> Response:
        p = self._product(req.arg("product"))
        if p is None:
            return Response.not_found("product")
        try:
            qty = int(req.arg("qty", "1"))
        except ValueError:
            qty = 0
        have = self.state["cart"].get(p["id"], 0)
        if qty < 1 or have + qty > p["stock"]:
            return self.render(
                "Cart",
                f"<p class='error'>Quantity must be between 1 and {p['stock'] - have}.</p>"
                f"<a href='/product/{p['id']}'>Back to {esc(p['name'])}</a>",
            )
        self.state["cart"][p["id"]] = have + qty
        return Response.redirect("/cart")

    def cart_remove(self, req: Request) -> Response:
        p = self._product(req.arg("product"))
        if p is not None:
            self.state["cart"].pop(p["id"], None)
        return Response.redirect("/cart")

    def _cart_table(self) -> tuple[str, int]:
        rows, total = [], 0
        for pid, qty in self.state["cart"].items():
            p = self._product(pid)
            total += p["price"] * qty
            rows.append(
                f"<tr><td>{esc(p['name'])}</td><td>{qty}</td><td>{money(p['price'] * qty)}</td>"
                "<td><form action='/cart/remove' method='post'>"
                f"<input type='hidden' name='product' value='{pid}'>"
                f"<button type='submit' aria-label='Remove {esc(p['name'])}'>Remove</button>"
                "</form></td></tr>"
            )
        head = "<tr><th>Product</th><th>Quantity</th><th>Subtotal</th><th></th></tr>"
        return f"<table>{head}{''.join(rows)}</table><p>Total: {money(total)}</p>", total

    def cart(self, req: Request) -> Response:
        if not self.state["cart"]:
            return self.render("Cart", "<h1>Your cart</h1><p>Your cart is empty.</p>")
        table, _ = self._cart_table()
        return self.render(
            "Cart", f"<h1>Your cart</h1>{table}<a href='/checkout'>Proceed to checkout</a>"
        )

    def checkout_form(self, req: Request, errors: list[str] | None = None) -> Response:
        if not self.state["cart"]:
            return self.render("Checkout", "<h1>Checkout</h1><p>Your cart is empty.</p>")
        table, _ = self._cart_table()
        err = "".join(f"<p class='error'>{esc(e)}</p>" for e in errors or [])

        def field(name: str, label: str) -> str:
            return f"<label>{label} <input name='{name}' value='{esc(req.form.get(name, ''))}'></label>"

        ship = "".join(
            f"<option{' selected' if s == req.form.get('shipping') else ''}>{s}</option>"
            for s in SHIPPING
        )
        body = (
            f"<h1>Checkout</h1>{table}{err}<form action='/checkout' method='post'>"
            + field("name", "Full name")
            + field("email", "Email")
            + field("address", "Street address")
            + field("city", "City")
            + field("zip", "ZIP code")
            + f"<label>Shipping <select name='shipping'>{ship}</select></label>"
            "<button type='submit'>Place order</button></form>"
        )
        return self.render("Checkout", body)

    def checkout(self, req: Request) -> Response:
        if not self.state["cart"]:
            return Response.redirect("/cart")
        f = {k: req.arg(k) for k in ("name", "email", "address", "city", "zip", "shipping")}
        errors = [
            msg
            for ok, msg in (
                (f["name"], "Full name is required."),
                (_EMAIL.match(f["email"]), "Enter a valid email address."),
                (f["address"], "Street address is required."),
                (f["city"], "City is required."),
                (re.fullmatch(r"\d{5}", f["zip"]), "ZIP code must be 5 digits."),
                (f["shipping"] in SHIPPING, "Choose a shipping method."),
            )
            if not ok
        ]
        if errors:
            return self.checkout_form(req, errors)
        order = {"id": 1001 + len(self.state["orders"]), "items": dict(self.state["cart"]), **f}
        self.state["orders"].append(order)
        self.state["cart"] = {}
        return Response.redirect(f"/order/{order['id']}")

    def order(self, req: Request) -> Response:
        oid = req.path.rsplit("/", 1)[1]
        order = next((o for o in self.state["orders"] if str(o["id"]) == oid), None)
        if order is None:
            return Response.not_found("order")
        return self.render(
            "Order placed",
            f"<h1>Thank you!</h1><p class='notice'>Order #{order['id']} is placed and ships "
            f"{esc(order['shipping'])} to {esc(order['name'])}.</p>",
        )

    def outcome(self, goal: dict[str, Any], answer: str | None) -> dict[str, Any]:
        orders, cart = self.state["orders"], self.state["cart"]
        want = {int(k): v for k, v in goal["items"].items()}
        if goal["kind"] == "cart":
            ok = not orders and cart == want
            return {"success": ok, "score": float(ok), "cart": _keys(cart), "orders": len(orders)}
        placed = [o for o in orders if o["items"] == want]
        details = {k: str(v).strip().lower() for k, v in goal["customer"].items()}
        exact = [
            o for o in placed if all(str(o[k]).strip().lower() == v for k, v in details.items())
        ]
        ok = len(orders) == 1 and len(exact) == 1
        score = 1.0 if ok else 0.5 if placed else 0.0
        return {"success": ok, "score": score, "orders": [_keys(o["items"]) for o in orders]}


def _keys(items: dict[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in items.items()}


def _customer(rng: random.Random) -> dict[str, str]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return {
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
        "address": f"{rng.randint(1, 999)} {rng.choice(_STREETS)}",
        "city": rng.choice(_CITIES),
        "zip": f"{rng.randint(10000, 99999)}",
        "shipping": rng.choice(SHIPPING),
    }


def _ship_to(c: dict[str, str]) -> str:
    return (
        f"Ship it {c['shipping']} to {c['name']} ({c['email']}), {c['address']}, "
        f"{c['city']} {c['zip']}."
    )


def _buy(seed: int) -> dict[str, Any]:
    rng = random.Random(f"shop_buy:{seed}")
    p = rng.choice(catalog(seed))
    qty = rng.randint(1, 3)
    c = _customer(rng)
    return {
        "instruction": f"In the shop, buy {qty} x {p['name']}. {_ship_to(c)}",
        "goal": {"kind": "order", "items": {str(p["id"]): qty}, "customer": c},
        "plan": {"product": p["name"], "qty": qty},
    }


def _filter(seed: int) -> dict[str, Any]:
    rng = random.Random(f"shop_filter:{seed}")
    products = catalog(seed)
    while True:
        cat = rng.choice(CATEGORIES)
        label, min_rating = rng.choice(RATINGS[1:3])
        max_price = rng.choice((100, 150, 200, 250, 300))
        fits = [
            p
            for p in products
            if p["category"] == cat and p["rating"] >= min_rating and p["price"] <= max_price * 100
        ]
        if fits:
            break
    best = min(fits, key=lambda p: p["price"])
    c = _customer(rng)
    return {
        "instruction": (
            f"In the shop, buy one of the cheapest {cat.lower()} that cost at most "
            f"${max_price} and are rated at least {min_rating:g} stars. {_ship_to(c)}"
        ),
        "goal": {"kind": "order", "items": {str(best["id"]): 1}, "customer": c},
        "plan": {
            "category": cat,
            "max_price": str(max_price),
            "rating": label,
            "product": best["name"],
            "qty": 1,
        },
    }


def _cart(seed: int) -> dict[str, Any]:
    rng = random.Random(f"shop_cart:{seed}")
    a, b = rng.sample(catalog(seed), 2)
    qa, qb = rng.randint(1, 3), rng.randint(1, 3)
    return {
        "instruction": (
            f"In the shop, put {qa} x {a['name']} and {qb} x {b['name']} in the cart. "
            "Do not check out."
        ),
        "goal": {"kind": "cart", "items": {str(a["id"]): qa, str(b["id"]): qb}},
        "plan": {"items": [[a["name"], qa], [b["name"], qb]]},
    }


FAMILIES: dict[str, Callable[[int], dict[str, Any]]] = {
    "shop_buy": _buy,
    "shop_filter": _filter,
    "shop_cart": _cart,
}
