from __future__ import annotations

import pytest

from knowlyr.core import BUILTIN_PROFILES, DomainProfile, ToolCategory, get_profile, load_profile
from knowlyr.core.profile import guess_category
from knowlyr.errors import ConfigError

SEED_TOOLS = {
    "coding": ["read_file", "edit_file", "bash", "grep", "submit"],
    "browser": ["navigate", "click", "type_text", "scroll", "screenshot"],
    "conversation": ["respond", "query_stats", "send_message", "web_search"],
    "engineering": ["read_file", "grep", "git", "knowledge_base", "bash"],
    "advisory": ["respond", "knowledge_base", "web_search", "create_note"],
    "discussion": ["respond", "knowledge_base", "think"],
    "generic": [],
}


@pytest.mark.parametrize("domain", sorted(SEED_TOOLS))
def test_builtin_profiles_have_the_seed_tools(domain):
    p = get_profile(domain)
    assert p.domain == domain
    assert set(SEED_TOOLS[domain]) <= set(p.tool_names)
    assert abs(sum(p.normalized_weights().values()) - 1) < 1e-9
    for t in p.terminal_tools:
        assert p.is_terminal(t)
    assert DomainProfile.model_validate_json(p.to_json()) == p


@pytest.mark.parametrize(
    ("tool", "params", "canonical", "category"),
    [
        (
            "str_replace_editor",
            {"command": "view", "path": "/a.py"},
            "read_file",
            ToolCategory.READ,
        ),
        ("str_replace_editor", {"command": "str_replace"}, "edit_file", ToolCategory.WRITE),
        ("str_replace_editor", {"command": "create"}, "write_file", ToolCategory.WRITE),
        ("run", {"command": "ls"}, "bash", ToolCategory.EXECUTE),
        ("open", {"path": "a.py"}, "read_file", ToolCategory.READ),
        ("search_dir", {}, "grep", ToolCategory.SEARCH),
        ("finish", {}, "submit", ToolCategory.SUBMIT),
        ("some_unknown_tool", {}, "some_unknown_tool", ToolCategory.OTHER),
        ("web_fetch_and_read", {}, "web_fetch_and_read", ToolCategory.QUERY),
    ],
)
def test_coding_aliases_map_external_tools(tool, params, canonical, category):
    p = get_profile("coding")
    assert p.canonical(tool, params) == canonical
    assert p.category(tool, params) == category


def test_generic_profile_is_the_heuristic():
    p = get_profile("generic")
    assert p.category("submit_answer") == ToolCategory.SUBMIT
    assert p.category("cat_file") == ToolCategory.READ
    assert p.category("execute_bash") == ToolCategory.EXECUTE
    assert p.is_terminal("finish")
    assert guess_category("mystery") == ToolCategory.OTHER


def test_shared_browser_profile_fixture_loads(fixtures_dir):
    p = load_profile(fixtures_dir / "knowlyr" / "browser_profile.json")
    assert p.domain == "browser" and "get_text" in p.tool_names
    assert p.canonical("goto") == "navigate" and p.category("extract_text") == ToolCategory.READ
    assert p.terminal_tools == ["submit"] and p.is_terminal("done")
    assert p.rubric_weights["goal_progress"] == 0.35
    assert p.stateful_key("click_element") == "element_id"


def test_yaml_profile_and_errors(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text(
        "domain: ops\ntools:\n  - {name: restart, category: execute}\n  - {name: done, category: submit}\n"
    )
    p = get_profile(str(y))
    assert p.terminal_tools == ["done"] and p.category("restart") == ToolCategory.EXECUTE
    bad = tmp_path / "bad.json"
    bad.write_text('{"domain": "x", "tools": [{"name": "a", "category": "flying"}]}')
    with pytest.raises(ConfigError, match=r"bad.json is invalid: tools\.0\.category"):
        load_profile(bad)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"broken\.json is not valid JSON"):
        load_profile(tmp_path / "broken.json")
    with pytest.raises(ConfigError, match="cannot read profile"):
        load_profile(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="built-in profiles: advisory, browser") as e:
        get_profile("nonexistent")
    assert "Did you mean" not in str(e.value)  # nothing is close
    with pytest.raises(ConfigError, match=r"JSON/YAML profile\. Did you mean 'conversation'\?"):
        get_profile("conversaton")


def test_profile_validation():
    with pytest.raises(ValueError, match="listed twice"):
        DomainProfile(domain="d", tools=[{"name": "a"}, {"name": "a"}])
    with pytest.raises(ValueError, match="terminal tool 'z'"):
        DomainProfile(domain="d", tools=[{"name": "a"}], terminal_tools=["z"])
    with pytest.raises(ValueError, match="must be >= 0"):
        DomainProfile(domain="d", rubric_weights={"goal_progress": -1})
    with pytest.raises(ConfigError, match="weights sum to 0"):
        DomainProfile(domain="d", rubric_weights={"a": 0}).normalized_weights()
    assert len(BUILTIN_PROFILES) == 7
