"""The coding tools through Toolbox.call, as an environment uses them."""

from __future__ import annotations

import json

import pytest

from knowlyr.core.tools import Toolbox
from knowlyr.sandbox import LocalSandbox, SandboxConfig, coding_toolbox, create_sandbox

SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return coding_toolbox()


@pytest.fixture
def sb():
    with LocalSandbox(
        SandboxConfig(max_output_chars=2000, timeout_s=10), files={"calc.py": SOURCE}
    ) as s:
        yield s


def call(box, sb, name, **params):
    return box.call(name, params, sandbox=sb)


def test_schemas_are_openai_functions(box):
    schemas = {s["function"]["name"]: s["function"] for s in box.schemas()}
    assert list(schemas) == [
        "read_file",
        "write_file",
        "edit_file",
        "bash",
        "grep",
        "git",
        "submit",
    ]
    assert schemas["read_file"]["parameters"]["required"] == ["path"]
    assert set(schemas["read_file"]["parameters"]["properties"]) == {
        "path",
        "start_line",
        "end_line",
    }
    assert schemas["edit_file"]["parameters"]["required"] == ["path", "old_str", "new_str"]
    assert schemas["bash"]["parameters"]["properties"]["timeout"]["type"] == "number"
    assert schemas["submit"]["parameters"] == {"type": "object", "properties": {}, "required": []}
    for f in schemas.values():
        assert "sandbox" not in f["parameters"]["properties"]
        assert f["description"]
    json.dumps(box.schemas())


def test_read_file_with_line_numbers_and_ranges(box, sb):
    r = call(box, sb, "read_file", path="calc.py")
    assert r.ok and r.output.splitlines()[1] == "     2\t    return a - b"
    assert r.data["lines"] == 6
    r = call(box, sb, "read_file", path="calc.py", start_line=5, end_line=6)
    assert r.output == "     5\tdef sub(a, b):\n     6\t    return a - b\n"
    r = call(box, sb, "read_file", path="calc.py", start_line=50)
    assert r.exit_code == 2 and "past the end" in r.error
    r = call(box, sb, "read_file", path="calc.py", start_line=3, end_line=2)
    assert r.exit_code == 2 and "before start_line" in r.error


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("missing.py", "no such file"),
        ("../../etc/passwd", "outside"),
        ("/etc/passwd", "outside"),
        (".", "directory"),
    ],
)
def test_read_file_errors_are_observations(box, sb, path, needle):
    r = call(box, sb, "read_file", path=path)
    assert r.exit_code != 0 and needle in r.error and r.output.startswith("Error: ")


def test_read_file_through_a_symlink_out_is_refused(box, sb):
    sb.exec("ln -s /etc/passwd pw")
    r = call(box, sb, "read_file", path="pw")
    assert r.exit_code == 2 and "outside" in r.error


def test_read_file_binary_and_long_files(box, sb):
    sb.write_file("blob.bin", b"\x00\x01\x02")
    assert "binary" in call(box, sb, "read_file", path="blob.bin").error
    sb.write_file("long.txt", "".join(f"line {i}\n" for i in range(5000)))
    r = call(box, sb, "read_file", path="long.txt")
    assert r.data["truncated"] and "characters truncated" in r.output and len(r.output) < 2100
    assert "line 4999" in r.output


def test_write_file(box, sb):
    r = call(box, sb, "write_file", path="pkg/new.py", content="X = 1\n")
    assert r.ok and "pkg/new.py" in r.output
    assert sb.exec("python3 -c 'import pkg.new as m; print(m.X)'").stdout == "1\n"
    r = call(box, sb, "write_file", path="../escape.py", content="x")
    assert r.exit_code == 2 and "outside" in r.error


def test_edit_file_replaces_exactly_one_occurrence(box, sb):
    r = call(
        box,
        sb,
        "edit_file",
        path="calc.py",
        old_str="def add(a, b):\n    return a - b",
        new_str="def add(a, b):\n    return a + b",
    )
    assert r.ok and "line 1" in r.output and "return a + b" in r.output
    assert (
        sb.exec("python3 -c 'import calc; print(calc.add(2, 3), calc.sub(2, 3))'").stdout
        == "5 -1\n"
    )


def test_edit_file_several_matches_names_the_count_and_lines(box, sb):
    r = call(box, sb, "edit_file", path="calc.py", old_str="return a - b", new_str="return 0")
    assert r.exit_code == 1 and "occurs 2 times" in r.error and "lines 2, 6" in r.error
    assert r.data["occurrences"] == 2
    assert sb.read_file("calc.py").decode() == SOURCE  # nothing changed


def test_edit_file_no_match(box, sb):
    r = call(box, sb, "edit_file", path="calc.py", old_str="return a * b", new_str="x")
    assert r.exit_code == 1 and "0 occurrences" in r.error
    r = call(
        box, sb, "edit_file", path="calc.py", old_str="  return a - b  \n\n\ndef sub", new_str="x"
    )
    assert "0 occurrences" in r.error
    r = call(box, sb, "edit_file", path="calc.py", old_str="", new_str="x")
    assert r.exit_code == 2 and "empty" in r.error
    r = call(box, sb, "edit_file", path="nope.py", old_str="a", new_str="b")
    assert r.exit_code == 2 and "no such file" in r.error


def test_bash(box, sb):
    r = call(box, sb, "bash", command="python3 -c 'import calc; print(calc.sub(5, 3))'; exit 4")
    assert r.output == "2\n" and r.exit_code == 4 and r.error is None
    r = call(box, sb, "bash", command="sleep 5", timeout=0.5)
    assert r.exit_code == 124 and r.data["timed_out"] and "timed out" in r.error
    r = call(box, sb, "bash", command="seq 1 100000")
    assert r.data["truncated"] and "characters truncated" in r.output
    assert call(box, sb, "bash", command="  ").exit_code == 2
    assert call(box, sb, "bash", command="true", timeout=-1).exit_code == 2
    r = box.call("bash", {"cmd": "ls"}, sandbox=sb)  # a model's typo
    assert (
        r.exit_code == 2
        and "missing required parameter 'command'" in r.error
        and "unknown parameter 'cmd'" in r.error
    )


def test_grep(box, sb):
    sb.write_file("docs/readme.md", "add numbers\n")
    r = call(box, sb, "grep", pattern="def (add|sub)")
    assert r.ok and r.output.splitlines() == [
        "calc.py:1:def add(a, b):",
        "calc.py:5:def sub(a, b):",
    ]
    assert r.data["matches"] == 2
    r = call(box, sb, "grep", pattern="add", path="docs")
    assert r.output == "docs/readme.md:1:add numbers\n"
    r = call(box, sb, "grep", pattern="nowhere-to-be-found")
    assert r.ok and "No matches" in r.output and r.data["matches"] == 0
    r = call(box, sb, "grep", pattern="x", path="../..")
    assert r.exit_code == 2 and "outside" in r.error
    r = call(box, sb, "grep", pattern="(unclosed")
    assert r.exit_code == 2 and "grep failed" in r.error
    sb.write_file("flags.txt", "use -v for verbose\n")
    r = call(box, sb, "grep", pattern="-v")  # a pattern that looks like an option
    assert r.output == "flags.txt:1:use -v for verbose\n"


def test_git(box, sb):
    sb.exec("git init -q && git add -A && git commit -qm initial")
    sb.write_file("calc.py", SOURCE.replace("a - b", "a + b", 1))
    r = call(box, sb, "git", args="diff --stat")
    assert r.ok and "calc.py" in r.output and "1 insertion" in r.output
    r = call(box, sb, "git", args="log --format=%s")
    assert r.output == "initial\n"
    r = call(box, sb, "git", args="status; touch pwned")  # no shell: ';' is an argument
    assert not sb.exec("test -e pwned").ok
    r = call(box, sb, "git", args="no-such-subcommand")
    assert r.exit_code != 0 and "git exited" in r.error
    assert call(box, sb, "git", args="").exit_code == 2
    assert call(box, sb, "git", args="log 'unbalanced").exit_code == 2


def test_submit(box, sb):
    r = call(box, sb, "submit")
    assert r.ok and r.data == {"submitted": True}
    assert box.call("submit", {}).ok  # needs no sandbox


def test_tools_on_the_container_backend(box, docker_host):
    with create_sandbox(SandboxConfig(backend="container"), files={"calc.py": SOURCE}) as sb:
        r = call(
            box,
            sb,
            "edit_file",
            path="calc.py",
            old_str="def add(a, b):\n    return a - b",
            new_str="def add(a, b):\n    return a + b",
        )
        assert r.ok, r
        assert (
            call(box, sb, "bash", command="python3 -c 'import calc; print(calc.add(2, 3))'").output
            == "5\n"
        )
        assert (
            call(box, sb, "read_file", path="calc.py", start_line=2, end_line=2).output
            == "     2\t    return a + b\n"
        )
        assert call(box, sb, "grep", pattern="def sub").output == "calc.py:5:def sub(a, b):\n"
        assert "outside" in call(box, sb, "read_file", path="/etc/passwd").error
