from __future__ import annotations

import enum
import json
from typing import Literal

import pytest

from knowlyr.core.tools import Tool, Toolbox, ToolResult, tool
from knowlyr.errors import ConfigError


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@tool
def search(
    query: str,
    limit: int = 10,
    exact: bool = False,
    tags: list[str] | None = None,
    mode: Literal["fast", "full"] = "fast",
    color: Color = Color.RED,
    *,
    index: dict,
) -> ToolResult:
    """Search the index for documents.

    Looks at titles and bodies.

    Args:
        query: what to look for; may span
            several lines of description.
        limit (int): at most this many hits.
        exact: match the whole word only.
        tags: only documents with these tags.
        mode: search mode.
        color: a color.

    Returns:
        The hits, one per line.
    """
    hits = [d for d in index if (query == d if exact else query in d)][:limit]
    return ToolResult(
        output="\n".join(hits), data={"n": len(hits), "mode": mode, "color": color.value}
    )


def test_schema_has_openai_function_shape():
    s = search.schema
    assert s["type"] == "function"
    f = s["function"]
    assert f["name"] == "search"
    assert f["description"] == "Search the index for documents. Looks at titles and bodies."
    params = f["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    props = params["properties"]
    assert set(props) == {"query", "limit", "exact", "tags", "mode", "color"}  # context not visible
    assert props["query"] == {
        "type": "string",
        "description": "what to look for; may span several lines of description.",
    }
    assert props["limit"] == {
        "type": "integer",
        "description": "at most this many hits.",
        "default": 10,
    }
    assert props["exact"]["type"] == "boolean"
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["mode"]["enum"] == ["fast", "full"] and props["mode"]["type"] == "string"
    assert props["color"]["enum"] == ["red", "blue"]
    json.dumps(s)  # serialisable as-is (TRL's tools column)
    assert search.context_params == ("index",)


def test_schema_renders_in_a_chat_template():
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Template(
        "{% for t in tools %}{{ t.function.name }}:{{ t.function.parameters.required | join(',') }};{% endfor %}"
    )
    assert template.render(tools=Toolbox([search]).schemas()) == "search:query;"


def test_call_validates_and_converts_params():
    box = Toolbox([search])
    docs = ["alpha", "alphabet", "beta"]
    r = box.call("search", {"query": "alpha", "limit": "1"}, index=docs)
    assert r.ok and r.output == "alpha" and r.data["n"] == 1
    r = box.call("search", {"query": "alpha", "color": "blue"}, index=docs)
    assert r.data["color"] == "blue" and r.output == "alpha\nalphabet"


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({}, "missing required parameter 'query'"),
        ({"query": "a", "limt": 3}, "unknown parameter 'limt'"),
        ({"query": "a", "limit": "many"}, "parameter 'limit'"),
        ({"query": 5}, "parameter 'query'"),
        ({"query": "a", "mode": "slow"}, "parameter 'mode'"),
        ({"query": "a", "tags": [1, 2]}, "parameter 'tags[0]'"),
    ],
)
def test_bad_params_are_an_error_observation(params, needle):
    r = Toolbox([search]).call("search", params, index=[])
    assert r.exit_code == 2 and not r.ok
    assert needle in r.error
    assert r.output.startswith("Error: ")


def test_params_not_a_dict_is_an_error_observation():
    r = Toolbox([search]).call("search", ["query"], index=[])  # type: ignore[arg-type]
    assert r.exit_code == 2 and "must be an object" in r.error


def test_unknown_tool_lists_the_available_ones():
    r = Toolbox([search]).call("serch", {"query": "x"})
    assert r.exit_code == 127 and "serch" in r.error and "search" in r.error


def test_exception_inside_a_tool_becomes_an_observation():
    @tool
    def boom(n: int) -> str:
        """Divide."""
        return str(1 / n)

    r = Toolbox([boom]).call("boom", {"n": 0})
    assert r.exit_code == 1 and "ZeroDivisionError" in r.error and "boom" in r.error


def test_return_values_become_results():
    @tool
    def listing() -> list[str]:
        """List things."""
        return ["a", "b"]

    @tool
    def nothing() -> None:
        """Do nothing."""

    box = Toolbox([listing, nothing])
    assert box.call("listing", {}).output == '["a","b"]'
    assert box.call("nothing", None).output == "" and box.call("nothing", None).ok


def test_missing_context_is_a_programming_error():
    with pytest.raises(ConfigError, match="index"):
        Toolbox([search]).call("search", {"query": "x"})


def test_context_is_given_only_to_tools_that_declare_it():
    @tool
    def plain(x: int) -> str:
        """Plain."""
        return str(x)

    assert Toolbox([plain]).call("plain", {"x": 1}, sandbox=object()).output == "1"


def test_decorator_with_options_and_plain_functions():
    @tool(name="echo_text", description="Echo.")
    def _echo(text: str) -> str:
        return text

    def untyped(a, b=2):
        return a * b

    box = Toolbox([_echo, untyped])
    assert isinstance(box["untyped"], Tool)
    assert box.names == ["echo_text", "untyped"]
    assert box.schemas()[0]["function"]["description"] == "Echo."
    assert box.call("untyped", {"a": 3}).output == "6"
    assert box["echo_text"]("direct") == "direct"  # calling a Tool calls the function


def test_duplicate_and_bad_names_are_rejected():
    with pytest.raises(ConfigError, match="already"):
        Toolbox([search, search])
    with pytest.raises(ConfigError, match="name"):
        tool(lambda: None, name="has space")


def test_unsupported_annotation_names_the_parameter():
    class Opaque:
        pass

    def f(x: Opaque) -> str:
        return ""

    with pytest.raises(ConfigError, match="'x'"):
        tool(f)


def test_subset():
    box = Toolbox([search, tool(lambda: "", name="other")])
    assert box.subset(["other"]).names == ["other"]
    with pytest.raises(ConfigError, match="nope"):
        box.subset(["nope"])
