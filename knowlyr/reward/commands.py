"""What a command line does and what its output says, as patterns the rule layer runs in polars.

Coding agents act through shell commands (mini-swe-agent's fenced ``bash`` blocks, OpenHands'
``execute_bash``, SWE-agent's command lines, our ``bash`` tool). To judge a run, the rules need
to know which of those commands *run* code (a test suite or a script: how an agent checks its
work), which *edit* files (``sed -i``, a heredoc into a file, ``git apply``...) and whether a
run's output reports failures. Each is a regular expression (Rust ``regex`` syntax, as
``polars`` runs it), applied once per distinct call or per run step, never per character of
every output.

Example:
    >>> import re
    >>> bool(re.search(TEST_PATTERN, "cd /testbed && python -m pytest tests/test_x.py -q"))
    True
    >>> bool(re.search(EDIT_PATTERN, "sed -i 's/a/b/' src/x.py"))
    True
"""

from __future__ import annotations

__all__ = [
    "ACT_EDIT",
    "ACT_INVALID",
    "ACT_RUN",
    "ACT_TEST",
    "EDIT_PATTERN",
    "FAILURE_PATTERN",
    "LIMIT_PATTERN",
    "RUN_PATTERN",
    "SETBACK_PATTERN",
    "TEST_PATTERN",
    "TRACEBACK",
]

#: Bits of a call's ``act_kind`` in the step table.
ACT_RUN, ACT_TEST, ACT_EDIT, ACT_INVALID = 1, 2, 4, 8

#: A test-suite run: pytest, unittest, tox, Django's runtests.py, SymPy's bin/test, and the
#: usual test commands of other ecosystems.
TEST_PATTERN = (
    r"(?:^|[\s;&|(/])(?:py\.?test|pytest|tox|nosetests|runtests\.py|bin/test|unittest"
    r"|manage\.py\s+test|(?:npm|yarn|pnpm)\s+(?:run\s+)?test|go\s+test|cargo\s+test"
    r"|make\s+(?:test|check)|mvn\s+test|rspec|jest|mocha)\b"
)

#: Running code: a test suite, a script (``python repro.py``, ``python -c``, ``node x.js``,
#: ``./run.sh``) or inline Python fed on standard input (``python - <<EOF``, ``python <<EOF``).
RUN_PATTERN = (
    TEST_PATTERN + r"|\bpython[0-9.]*\s+(?:-[a-zA-Z]+\s+)*[\w./-]+\.py\b|\bpython[0-9.]*\s+-c\s"
    r"|\bpython[0-9.]*\s+(?:-\s+)?<<|\b(?:node|ruby|perl|bash|sh)\s+[\w./-]+\.(?:js|mjs|rb|pl|sh)\b"
    r"|(?:^|[\s;&|(])\./[\w./-]+"
)

#: Editing files from a shell: in-place sed/perl, a heredoc, echo or printf redirected into a
#: file, tee, patch / git apply, or Python writing a file.
EDIT_PATTERN = (
    r"\bsed\s+(?:-[a-zA-Z]+\s+)*-[a-zA-Z]*i|\bperl\s+-[a-zA-Z]*i|\bpatch\s+-|\bgit\s+apply\b"
    r"|\btee\s+(?:-a\s+)?[\w./-]+|\b(?:cat|echo|printf)\b[^|;&\n]*?>>?\s*['\"]?[\w./-]*[\w-]\.\w+"
    r"|\.write_text\(|\bopen\([^)\n]*,\s*['\"][wa]\+?['\"]"
)

#: The output of a run that reports failures (checked on run steps only): failing test
#: counts, pytest / unittest failure lines, assertion errors, tracebacks, panics.
FAILURE_PATTERN = (
    r"\b[1-9]\d* (?:failed|errors?|failures?)\b|\bFAILED\b|(?m:^FAIL:)|(?m:^ERROR:)"
    r"|(?m:^E\s{3})|AssertionError|Traceback \(most recent call last\)|\bpanicked at\b"
    r"|npm ERR!|(?:failures|errors)=[1-9]"
)

#: Output that says a command crashed, whatever its exit code.
TRACEBACK = "Traceback (most recent call last)"

#: An exit status or outcome reason that says a run was stopped by a limit rather than
#: ending by itself: step / iteration / cost / time / context-window caps.
LIMIT_PATTERN = (
    r"(?i)limit|exceed|max(?:imum)?[_ ]?(?:number of )?(?:iter|step|turn)|budget"
    r"|context[_ ]?(?:window|length)"
    r"|too many|out of (?:steps|turns|tokens)|timeout|timed out"
)

#: A thought in which the agent says that what it just saw went wrong: the fix still fails,
#: the result is unexpected, an earlier step was a mistake or broke something.
SETBACK_PATTERN = (
    r"(?i)\b(?:still (?:fail|fails|failing|not|gets?|getting|raises?|see|broken|wrong|the same"
    r"|occurs|happens|present)|unexpected(?:ly)?|strange|weird|mistake|messed|oops"
    r"|(?:did not|didn't|does not|doesn't) (?:work|help|fix|change|apply|match)"
    r"|broke|corrupt(?:ed)?|instead of|but it|however|wait)\b"
)
