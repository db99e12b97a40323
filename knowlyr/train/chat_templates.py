"""Training chat templates: the model's own template with ``{% generation %}`` markers.

``assistant_only_loss`` (on by default in :class:`~knowlyr.train.KnowlyrSFTConfig`) needs a chat
template that marks the assistant's output with ``{% generation %}`` / ``{% endgeneration %}``;
almost no model ships one. :func:`training_chat_template` finds one for a tokenizer:

- a template that already has the markers is used as it is (knowlyr's ``compact_tools``);
- **Qwen2.5 / Qwen3 / Llama 3** (and every other template TRL 1.16 knows): TRL's training
  template (``trl.chat_template_utils.get_training_chat_template``);
- **Llama 3.1 / 3.2** (the templates that render tool calls, which TRL only recognises): the
  model's template with the markers added around each assistant turn (tool-call turns
  included) by :func:`_llama3_tools_training`;
- **SmolLM2** (its template renders no tools): ``templates/smollm2_training.jinja``, tool calls
  and results in the format SmolLM2 was trained on for function calling;
- **any other ChatML template** without tool support (``<|im_start|>ROLE\\n...<|im_end|>``,
  with or without a default system turn): ``templates/chatml_training.jinja``, tool calls in
  the Hermes / Qwen2.5 format that :mod:`knowlyr.agents.action_format` writes.

A template knowlyr builds is checked by rendering before it is used: conversations without
tools render byte for byte like the model's own template (the markers render as nothing). A
template none of these fits is a :class:`~knowlyr.errors.TrainError` naming the fixes
(``chat_template=`` or ``assistant_only_loss=False``): never a silently wrong mask.

Example:
    >>> from knowlyr.train.chat_templates import training_chat_template
    >>> choice = training_chat_template(tokenizer)  # doctest: +SKIP
    >>> choice.family, choice.source  # doctest: +SKIP
    ('smollm2', 'knowlyr')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowlyr.errors import TrainError

__all__ = [
    "TrainingTemplate",
    "assistant_spans",
    "has_generation_markers",
    "renders_tool_calls",
    "training_chat_template",
]

_TEMPLATES = Path(__file__).parent / "templates"
_GENERATION = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")

_FIX = (
    "pass a training template with {% generation %} markers "
    "(KnowlyrSFTConfig(chat_template=...): Jinja text, a .jinja file, or a shipped name such as "
    "'chatml_training'), or set assistant_only_loss=False to train on every token"
)


@dataclass(frozen=True)
class TrainingTemplate:
    """A training chat template and where it came from.

    Attributes:
        template: the Jinja text, with ``{% generation %}`` markers.
        family: what the tokenizer's template was recognised as (``"smollm2"``, ``"chatml"``,
            ``"llama3_1"``, ``"qwen2_5"``, ``"own"``...).
        source: ``"own"`` (the tokenizer's template already had markers), ``"trl"`` or
            ``"knowlyr"`` (built here and checked by rendering).
        renders_tools: whether the template renders the tool schemas, tool calls and tool results
            (``False`` for e.g. plain Llama 3: train on rows without tool calls only).
    """

    template: str
    family: str
    source: str
    renders_tools: bool


def has_generation_markers(template: str | None) -> bool:
    """Whether ``template`` has ``{% generation %}`` markers (any whitespace control)."""
    return bool(template) and _GENERATION.search(template) is not None


def _read(name: str) -> str:
    return (_TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def _trl_template(name: str) -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "chat_templates" / f"{name}.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _render(tokenizer: Any, messages: list[dict[str, Any]], template: str, **kw: Any) -> str:
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)


# Conversations without tools that a training template must render like the original.
_PLAIN_PROBES: list[tuple[list[dict[str, Any]], bool]] = [
    (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is order K3Z9Q?"},
            {"role": "assistant", "content": "It has shipped."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You are welcome."},
        ],
        False,
    ),
    (
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        True,
    ),
    ([{"role": "user", "content": "Hi"}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], True),
]

# A conversation with a tool call and its result: a template that renders tools must show both.
_TOOL_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "query_order",
            "description": "Look an order up.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]
_TOOL_PROBE = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Where is order K3Z9Q?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "query_order", "arguments": {"order_id": "K3Z9Q"}},
            }
        ],
    },
    {"role": "tool", "name": "query_order", "content": "ZQ7SENTINEL shipped"},
    {"role": "assistant", "content": "It has shipped."},
]


def renders_tool_calls(tokenizer: Any, template: str) -> bool:
    """Whether ``template`` renders an assistant tool call (name and arguments) and a tool result."""
    try:
        text = _render(tokenizer, _TOOL_PROBE, template, tools=_TOOL_PROBE_TOOLS)
    except Exception:
        return False
    return all(s in text for s in ('"K3Z9Q"', "query_order", "ZQ7SENTINEL"))


def _renders_like(tokenizer: Any, original: str, candidate: str) -> bool:
    """Whether ``candidate`` renders every plain probe exactly like ``original``."""
    for messages, gen in _PLAIN_PROBES:
        try:
            want = _render(tokenizer, messages, original, add_generation_prompt=gen)
        except Exception:
            continue  # the original refuses this shape (e.g. no system turn allowed)
        try:
            got = _render(tokenizer, messages, candidate, add_generation_prompt=gen)
        except Exception:
            return False
        if got != want:
            return False
    return True


# -- ChatML ---------------------------------------------------------------------------------------

_CHATML_TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"


def _chatml_default_system(tokenizer: Any, template: str) -> tuple[bool, str | None]:
    """Whether ``template`` is plain ChatML, and the system turn it adds when there is none."""
    try:
        text = _render(tokenizer, [{"role": "user", "content": "Hi"}], template)
    except Exception:
        return False, None
    user = _CHATML_TURN.format(role="user", content="Hi")
    if text == user:
        return True, None
    m = re.fullmatch(r"<\|im_start\|>system\n(.*?)<\|im_end\|>\n", text[: -len(user)], re.S)
    if not text.endswith(user) or m is None:
        return False, None
    return True, m.group(1)


def _chatml_training(default_system: str | None) -> str:
    text = _read("chatml_training")
    literal = "none" if default_system is None else json.dumps(default_system)
    return text.replace(
        "{%- set default_system = none %}", f"{{%- set default_system = {literal} %}}"
    )


# -- Llama 3.1 / 3.2 ------------------------------------------------------------------------------

_LLAMA_PLAIN = (
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' }}"
)
_LLAMA_HEADER = "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
_LLAMA_SET_CALL = "{%- set tool_call = message.tool_calls[0].function %}"
_LLAMA_TOOL_BRANCH = '{%- elif message.role == "tool" or message.role == "ipython" %}'


def _llama3_tools_training(template: str) -> str | None:
    """Llama 3.1 / 3.2's own template with ``{% generation %}`` around each assistant turn's
    output (plain or tool call, end token included); ``None`` if it is not such a template."""
    if template.count(_LLAMA_PLAIN) != 1 or template.count(_LLAMA_SET_CALL) != 1:
        return None
    if template.count(_LLAMA_TOOL_BRANCH) != 1:
        return None
    head, rest = template.split(_LLAMA_SET_CALL)
    calls, tail = rest.split(_LLAMA_TOOL_BRANCH)
    if _LLAMA_HEADER not in calls:
        return None
    head = head.replace(
        _LLAMA_PLAIN,
        "{%- if message['role'] == 'assistant' %}"
        "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{%- generation %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endgeneration %}"
        "{%- else %}" + _LLAMA_PLAIN + "{%- endif %}",
    )
    calls = calls.replace(_LLAMA_HEADER, "")
    return (
        head
        + _LLAMA_SET_CALL
        + "\n        "
        + _LLAMA_HEADER
        + "{%- generation %}"
        + calls.rstrip()
        + "\n    {%- endgeneration %}\n    "
        + _LLAMA_TOOL_BRANCH
        + tail
    )


# -- choosing -------------------------------------------------------------------------------------


def _trl_choice(tokenizer: Any, template: str) -> TrainingTemplate | None:
    try:
        from trl.chat_template_utils import get_training_chat_template
    except ImportError:
        return None
    try:
        patched = get_training_chat_template(tokenizer)
    except ValueError:
        return None
    if patched is None:  # markers and prefix preservation already there
        return None
    family = "trl"
    import importlib.util

    spec = importlib.util.find_spec("trl")
    folder = Path(spec.origin).parent / "chat_templates" if spec and spec.origin else None
    if folder is not None:
        for f in sorted(folder.glob("*_training.jinja")):
            if f.read_text(encoding="utf-8") == patched:
                family = f.name[: -len("_training.jinja")]
                break
    return TrainingTemplate(patched, family, "trl", renders_tool_calls(tokenizer, patched))


def training_chat_template(tokenizer: Any, chat_template: str | None = None) -> TrainingTemplate:
    """The training template for ``tokenizer``'s chat template (see the module docs).

    Args:
        tokenizer: a tokenizer with a chat template.
        chat_template: use this template instead (Jinja text, a ``.jinja`` path, or the name
            of a template shipped in ``knowlyr/train/templates``); it must have the markers.

    Raises:
        TrainError: no training template can be found or built; the message names the fixes.
    """
    if chat_template is not None:
        text = _given(chat_template)
        if not has_generation_markers(text):
            raise TrainError(
                "chat_template has no {% generation %} markers, which assistant_only_loss needs; "
                + _FIX
            )
        return TrainingTemplate(text, "given", "given", renders_tool_calls(tokenizer, text))
    own = tokenizer.chat_template
    if isinstance(own, dict):
        own = own.get("default")
    if not own:
        raise TrainError(f"the tokenizer has no chat template; {_FIX}")
    if has_generation_markers(own):
        return TrainingTemplate(own, "own", "own", renders_tool_calls(tokenizer, own))
    if own == _read("smollm2"):
        built = _read("smollm2_training")
        if _renders_like(tokenizer, own, built):
            return TrainingTemplate(built, "smollm2", "knowlyr", True)
    llama = _llama3_tools_training(own)
    if (
        llama is not None
        and _renders_like(tokenizer, own, llama)
        and renders_tool_calls(tokenizer, own)
        and _same_tool_rendering(tokenizer, own, llama)
    ):
        family = "llama3_2" if own == _trl_template("llama3_2") else "llama3_1"
        return TrainingTemplate(llama, family, "knowlyr", True)
    trl = _trl_choice(tokenizer, own)
    if trl is not None:
        return trl
    is_chatml, default_system = _chatml_default_system(tokenizer, own)
    if is_chatml and not renders_tool_calls(tokenizer, own):
        family = "smollm2" if default_system and "SmolLM" in default_system else "chatml"
        built = _read("smollm2_training") if family == "smollm2" else None
        if built is None or not _renders_like(tokenizer, own, built):
            family, built = "chatml", _chatml_training(default_system)
        if _renders_like(tokenizer, own, built):
            return TrainingTemplate(built, family, "knowlyr", True)
    raise TrainError(
        "the tokenizer's chat template is not one knowlyr or TRL can add {% generation %} "
        f"markers to (assistant_only_loss needs them); {_FIX}"
    )


def _same_tool_rendering(tokenizer: Any, original: str, candidate: str) -> bool:
    try:
        want = _render(tokenizer, _TOOL_PROBE, original, tools=_TOOL_PROBE_TOOLS)
        got = _render(tokenizer, _TOOL_PROBE, candidate, tools=_TOOL_PROBE_TOOLS)
    except Exception:
        return False
    return want == got


def _given(chat_template: str) -> str:
    if "{" in chat_template:
        return chat_template
    path = Path(chat_template)
    if path.suffix in {".jinja", ".j2"} and path.is_file():
        return path.read_text(encoding="utf-8")
    shipped = _TEMPLATES / f"{chat_template}.jinja"
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    names = sorted(p.stem for p in _TEMPLATES.glob("*.jinja"))
    raise TrainError(
        f"chat_template={chat_template!r} is neither Jinja text, a .jinja file nor a shipped "
        f"template ({', '.join(names)})"
    )


def assistant_spans(tokenizer: Any, messages: list[dict[str, Any]], template: str, **kw: Any):
    """``(input_ids, mask)`` of ``messages`` rendered with ``template``: ``mask[i]`` is 1 where
    token ``i`` is assistant output (what ``assistant_only_loss`` trains on)."""
    out = tokenizer.apply_chat_template(
        messages,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        **kw,
    )
    return list(out["input_ids"]), list(out["assistant_masks"])
