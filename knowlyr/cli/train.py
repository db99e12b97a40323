"""``knowlyr export sft|dpo|grpo|benchmark`` and ``knowlyr train sft|dpo|grpo``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from knowlyr._gc import paused
from knowlyr.cli._train_output import progress as _progress
from knowlyr.cli._train_output import report as _report
from knowlyr.errors import first_error

export_app = typer.Typer(help="Export trajectories as training datasets.", no_args_is_help=True)
train_app = typer.Typer(
    help="Train a policy with TRL on an exported dataset.", no_args_is_help=True
)


def install(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
    app.add_typer(train_app, name="train")


def _fail(e: Exception) -> typer.Exit:
    """``error: ...``; exit 2 for a ConfigError, else 1 (see :func:`knowlyr.cli.fail`)."""
    from knowlyr.cli import fail

    return fail(e)


def _usage(param: str, message: str) -> typer.Exit:
    """A bad argument: one line naming it, the input and the fix; exit 2 (a usage error)."""
    from knowlyr.cli import fail

    return fail(f"{param}: {message}", usage=True)


def _store(url: str):
    """The store at ``url``; one that cannot be opened (a protocol whose package is missing)
    is an error line naming the fix."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.store import Store

    try:
        return Store.open(url)
    except KnowlyrError as e:
        raise _fail(e) from e


def _run_export(inputs: list[Path], run: Callable[[], Any]) -> Any:
    """``run()``, an export of ``inputs`` (and of a store) read as validated JSON documents,
    with the cyclic GC paused (it builds no cycles); a bad line, or no trajectory at all, is a
    usage error naming the input, a store that cannot be read an error line."""
    from knowlyr.errors import KnowlyrError, RecordError

    _check_inputs(inputs)
    try:
        with paused():
            result = run()
    except RecordError as e:
        raise _usage(
            "INPUT",
            f"{e}; pass JSONL files of trajectories (`knowlyr record convert` writes them)",
        ) from e
    except KnowlyrError as e:  # a store that cannot be opened or read
        raise _fail(e) from e
    if not result.card.params["input_trajectories"]:
        raise _usage("INPUT", "no trajectories: pass JSONL files or --store")
    return result


def _check_inputs(inputs: list[Path]) -> None:
    for path in inputs:
        if not path.is_file():
            why = "is not a file" if path.exists() else "does not exist"
            raise _usage("INPUT", f"{path} {why}; pass JSONL files of trajectories")


def _documents(inputs: list[Path], store: str | None) -> Iterator[dict]:
    """The trajectories of JSONL files (validated as the model validates them, no model
    built: :func:`knowlyr.export.sft_parallel.jsonl_documents`; a bad line raises a
    ``RecordError`` naming it) and of a store (stored documents, validated when they were
    written), one at a time: an export streams them."""
    from knowlyr.export.sft_parallel import jsonl_documents, store_documents

    yield from jsonl_documents(inputs)
    if store is not None:
        yield from store_documents(store)


def _finish(
    result,
    output: Path,
    to_store: str | None,
    name: str | None,
    *,
    given: str,
    hint: str,
) -> None:
    """Save the export (and put it in ``to_store``). An export of no rows writes nothing and
    exits 1: the rejection reasons, then one line with what was given and the fix."""
    card = result.card
    if card.rows == 0:
        for why, n in card.rejected.items():
            typer.echo(f"  rejected {n}: {why}", err=True)
        raise _fail(
            ValueError(f"the {card.kind} export of {given} has no rows, nothing written: {hint}")
        )
    target = _store(to_store) if to_store else None  # before anything is written
    if hasattr(result, "save"):  # not written yet (save_sft writes as it goes)
        result.save(output)
    typer.echo(f"{card.kind}: {card.rows} rows from {card.trajectories} trajectories -> {output}")
    _echo_rewards(card)
    for why, n in card.rejected.items():
        typer.echo(f"  rejected {n}: {why}")
    if target is not None:
        manifest = result.to_store(target, name=name or output.name)
        typer.echo(f"  store: datasets table version {getattr(manifest, 'version', manifest)}")


_INPUT = typer.Argument(None, help="JSONL files with one trajectory per line.")
_OUTPUT = typer.Option(
    ..., "--output", "-o", help="Folder to write the dataset, parquet and card to."
)
_STORE = typer.Option(None, "--store", help="Also read trajectories from this store.")
_TO_STORE = typer.Option(
    None, "--to-store", help="Write the rows as a dataset version into this store."
)
_NAME = typer.Option(
    None, "--name", help="Dataset name in the store (default: the output folder name)."
)
_SYSTEM = typer.Option(
    None,
    "--system-prompt",
    help="System message of every row (default: the agent's own where its log kept it, "
    "else knowlyr's).",
)


_REWARDS = typer.Option(
    None,
    "--rewards",
    help="Rewards of the INPUT files: a `knowlyr reward score ... -o FILE` document (default: "
    "the rule layer computed on the fly, each trajectory with its domain's profile).",
)
_REWARD_CONFIG = typer.Option(
    None,
    "--reward-config",
    help="The --store rewards to use: a reward config hash (repeatable; default: the config "
    "each trajectory was scored under, which must be one).",
)
_REWARDS_VERSION = typer.Option(
    None, "--rewards-version", help="The --store's rewards table version (default: the latest)."
)


def _reward_source(
    inputs: list[Path],
    store: str | None,
    rewards: Path | None,
    configs: list[str] | None,
    version: int | None,
):
    """Where the export's rewards (totals, step rewards, margins) come from: the store's
    rewards version for its trajectories; for files, ``--rewards`` or the rule layer run on
    the fly (:mod:`knowlyr.export.rewards`)."""
    from knowlyr.export.rewards import file_rewards, rule_rewards, store_rewards
    from knowlyr.export.sft_parallel import jsonl_documents

    parts = []
    if inputs:
        if rewards is not None:
            parts.append(file_rewards(rewards))
        else:
            parts.append(rule_rewards(lambda: jsonl_documents(inputs)))
    if store is not None:
        parts.append(
            store_rewards(_store(store), rewards_version=version, config_hashes=configs or None)
        )
    source = parts[0]
    for part in parts[1:]:
        source = source.merged(part)
    return source


def _check_reward_options(
    inputs: list[Path],
    store: str | None,
    rewards: Path | None,
    configs: list[str] | None,
    version: int | None,
) -> None:
    if rewards is not None and not inputs:
        raise _usage("--rewards", "gives the rewards of INPUT files: pass the JSONL files too")
    if (configs or version is not None) and store is None:
        opt = "--reward-config" if configs else "--rewards-version"
        raise _usage(opt, "chooses the rewards of a store: pass --store URL too")


def _echo_rewards(card) -> None:
    """One line per source of the export's rewards (the card's ``params.rewards``)."""
    info = card.params.get("rewards") or {}
    for part in info.get("parts") or [info]:
        hashes = ", ".join(part.get("config_hashes") or []) or "-"
        if part.get("source") == "store":
            where = f"{part['store']} rewards@{part['rewards_version']}"
            typer.echo(f"  rewards: {where} (config {hashes})")
        elif part.get("source") == "file":
            typer.echo(f"  rewards: {part['path']} (config {hashes})")
        elif part.get("source") == "rules":
            typer.echo(f"  rewards: the rule layer, computed now (config {hashes})")


@export_app.command("sft")
def export_sft_cmd(
    inputs: list[Path] = _INPUT,
    output: Path = _OUTPUT,
    store: str | None = _STORE,
    include_failed: bool = typer.Option(
        False, "--include-failed", help="Keep unsuccessful trajectories."
    ),
    min_reward: float | None = typer.Option(
        None, "--min-reward", help="Drop trajectories below this reward."
    ),
    max_steps_per_row: int | None = typer.Option(
        None, "--max-steps-per-row", help="Chunk long trajectories."
    ),
    chunk_overlap: int = typer.Option(
        1, "--chunk-overlap", help="Context steps repeated per chunk."
    ),
    system_prompt: str | None = _SYSTEM,
    to_store: str | None = _TO_STORE,
    name: str | None = _NAME,
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Processes that read the input (default: one per core for large inputs).",
    ),
    rewards: Path | None = _REWARDS,
    reward_config: list[str] | None = _REWARD_CONFIG,
    rewards_version: int | None = _REWARDS_VERSION,
) -> None:
    """Multi-turn SFT conversations with a tools column (TRL SFTTrainer format).

    The reward column, --min-reward and the step weights come from the store's rewards for
    --store trajectories, and from --rewards (else the rule layer, computed now) for files;
    the card says which."""
    from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_sft, save_sft
    from knowlyr.export.sft_parallel import save_sft_files, save_sft_store

    inputs = inputs or []
    _check_reward_options(inputs, store, rewards, reward_config, rewards_version)
    kw = {
        "system_prompt": system_prompt or DEFAULT_SYSTEM_PROMPT,
        "keep_agent_prompt": system_prompt is None,
        "only_success": not include_failed,
        "min_reward": min_reward,
        "max_steps_per_row": max_steps_per_row,
        "chunk_overlap": chunk_overlap,
        "validated": True,
    }

    def run():
        source = _reward_source(inputs, store, rewards, reward_config, rewards_version)
        kw.update(rewards=source.totals, reward_source=source.info)
        # streamed into the folder, unless the rows also go to a store (from the dataset)
        if to_store:
            return export_sft(source.documents(_documents(inputs, store)), **kw)
        if store is None and inputs:  # the files alone: parsed on every core
            return save_sft_files(inputs, output, workers=workers, transform=source.apply, **kw)
        if store is not None and not inputs:  # the store alone: read on every core
            return save_sft_store(store, output, workers=workers, transform=source.apply, **kw)
        return save_sft(source.documents(_documents(inputs, store)), output, **kw)

    result = _run_export(inputs, run)
    n_in = result.card.params["input_trajectories"]
    _finish(
        result,
        output,
        to_store,
        name,
        given=f"{n_in} trajectories",
        hint="no trajectory passed the filters (reasons above)"
        + ("" if include_failed else "; --include-failed keeps unsuccessful ones")
        + ("" if min_reward is None else "; lower --min-reward"),
    )


def _export_with_rewards(
    export: Any,
    inputs: list[Path] | None,
    store: str | None,
    rewards: Path | None,
    reward_config: list[str] | None,
    rewards_version: int | None,
    system_prompt: str | None,
    **kwargs: Any,
) -> Any:
    """``export`` (export_dpo / export_grpo) of the files or the store, with the rewards the
    options choose and the agents' own system prompts unless one is given."""
    from knowlyr.export import DEFAULT_SYSTEM_PROMPT

    inputs = inputs or []
    _check_reward_options(inputs, store, rewards, reward_config, rewards_version)

    def run():
        source = _reward_source(inputs, store, rewards, reward_config, rewards_version)
        return export(
            source.documents(_documents(inputs, store)),
            validated=True,
            system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
            keep_agent_prompt=system_prompt is None,
            rewards=source.totals,
            reward_source=source.info,
            **kwargs,
        )

    return _run_export(inputs, run)


@export_app.command("dpo")
def export_dpo_cmd(
    inputs: list[Path] = _INPUT,
    output: Path = _OUTPUT,
    store: str | None = _STORE,
    min_margin: float = typer.Option(0.1, "--min-margin", help="Minimum reward gap of a pair."),
    system_prompt: str | None = _SYSTEM,
    to_store: str | None = _TO_STORE,
    name: str | None = _NAME,
    rewards: Path | None = _REWARDS,
    reward_config: list[str] | None = _REWARD_CONFIG,
    rewards_version: int | None = _REWARDS_VERSION,
) -> None:
    """Conversational prompt/chosen/rejected pairs built per task.

    Pairs and margins come from the store's rewards for --store trajectories, and from
    --rewards (else the rule layer, computed now) for files; the card says which."""
    from knowlyr.export import export_dpo

    result = _export_with_rewards(
        export_dpo,
        inputs,
        store,
        rewards,
        reward_config,
        rewards_version,
        system_prompt,
        min_margin=min_margin,
    )
    _finish(
        result,
        output,
        to_store,
        name,
        given=f"{result.card.params['input_trajectories']} trajectories",
        hint="a pair needs two trajectories of one task whose rewards differ by at least "
        f"--min-margin ({min_margin}); give more trajectories per task or lower --min-margin",
    )


@export_app.command("grpo")
def export_grpo_cmd(
    inputs: list[Path] = _INPUT,
    output: Path = _OUTPUT,
    store: str | None = _STORE,
    min_group_size: int = typer.Option(
        1, "--min-group-size", help="Drop tasks with fewer trajectories."
    ),
    system_prompt: str | None = _SYSTEM,
    to_store: str | None = _TO_STORE,
    name: str | None = _NAME,
    rewards: Path | None = _REWARDS,
    reward_config: list[str] | None = _REWARD_CONFIG,
    rewards_version: int | None = _REWARDS_VERSION,
) -> None:
    """Trajectories grouped per task with rewards, advantages and step-level advantages.

    Rewards come from the store's rewards for --store trajectories, and from --rewards
    (else the rule layer, computed now) for files; the card says which."""
    from knowlyr.export import export_grpo

    result = _export_with_rewards(
        export_grpo,
        inputs,
        store,
        rewards,
        reward_config,
        rewards_version,
        system_prompt,
        min_group_size=min_group_size,
    )
    _finish(
        result,
        output,
        to_store,
        name,
        given=f"{result.card.params['input_trajectories']} trajectories",
        hint=f"no task has --min-group-size ({min_group_size}) trajectories; lower it or "
        "give more trajectories per task",
    )


@export_app.command("benchmark")
def export_benchmark_cmd(
    suite: str = typer.Argument(..., help="Task suite (e.g. conversation)."),
    output: Path = _OUTPUT,
    family: str | None = typer.Option(None, "--family", help="Only this task family."),
    limit: int | None = typer.Option(None, "--limit", help="At most this many tasks."),
    env_id: str | None = typer.Option(
        None,
        "--env",
        help="Run the scripted expert in this env (e.g. knowlyr/conversation) for reference outcomes.",
    ),
) -> None:
    """The held-out tasks of a suite with their reference outcomes."""
    from knowlyr.cli import did_you_mean
    from knowlyr.errors import KnowlyrError
    from knowlyr.export import export_benchmark
    from knowlyr.taskset import get_suite, list_suites

    if suite not in list_suites():
        raise _usage(
            "SUITE",
            f"unknown task suite {suite!r}.{did_you_mean(suite, list_suites())} "
            f"Suites: {', '.join(list_suites())}",
        )
    try:
        s = get_suite(suite)
        tasks = [s.get(t) for t in s.select(split="heldout", family=family)[:limit]]
    except KnowlyrError as e:
        raise _fail(e) from e
    refs = None
    if env_id is not None:
        from knowlyr.agents import ExpertAgent
        from knowlyr.rollout import collect

        refs = collect(env_id, ExpertAgent, len(tasks), tasks=tasks)
    _finish(
        export_benchmark(tasks, references=refs),
        output,
        None,
        None,
        given=f"suite {suite!r}" + (f" family {family!r}" if family else ""),
        hint="it has no held-out tasks; pick another --family (or a --limit above 0)",
    )


def _dataset(data: Path):
    """The export folder ``data``; a path that is none is a usage error naming the fix."""
    fix = "pass a folder written by `knowlyr export sft|dpo|grpo -o DIR`"
    if not data.exists():
        raise _usage("DATA", f"{data} does not exist; {fix}")
    from knowlyr.errors import KnowlyrError
    from knowlyr.train.run import load_dataset_dir

    try:
        return load_dataset_dir(data)
    except (KnowlyrError, OSError, ValueError) as e:
        raise _usage("DATA", f"{data} is not an exported dataset ({first_error(e)}); {fix}") from e


_MODEL_NAMES = ("tiny", "smollm2-135m")


def _model(model: str, dataset, seed: int, induction_steps: int | None):
    from knowlyr.cli import did_you_mean
    from knowlyr.errors import ConfigError, KnowlyrError
    from knowlyr.train.induction import DEFAULT_STEPS, induction_pretrain
    from knowlyr.train.models import build_tiny_model_for, load_model

    try:
        if model == "tiny":  # the flow's recipe
            net, tok = build_tiny_model_for(dataset, hidden_size=128, seed=seed)
            induction_steps = DEFAULT_STEPS if induction_steps is None else induction_steps
            if induction_steps:
                done = induction_pretrain(net, tok, steps=induction_steps, seed=seed)
                typer.echo(f"induction pretraining: {done.steps} of up to {induction_steps} steps "
                           f"in {done.seconds:.0f} s, "
                           f"copy accuracy {done.copy_accuracy:.0%}", err=True)  # fmt: skip
            return net, tok
        if induction_steps:
            raise _usage("--induction-steps", "applies to --model tiny (a pretrained base copies)")
        return load_model(model)
    except ConfigError as e:  # not a model folder, nor a name
        hint = "" if Path(model).exists() else did_you_mean(model.lower(), _MODEL_NAMES)
        raise _usage("--model", f"{e}.{hint}" if hint else str(e)) from e
    except KnowlyrError as e:
        raise _fail(ValueError(f"--model {model}: {e}")) from e


def _check_chat_template(chat_template: str | None) -> None:
    """A ``--chat-template`` that is no Jinja text, .jinja file or shipped name is a usage
    error before anything loads, with the close shipped names."""
    if chat_template is None or "{" in chat_template or Path(chat_template).is_file():
        return
    from knowlyr.cli import did_you_mean
    from knowlyr.train import chat_templates

    names = sorted(p.stem for p in chat_templates._TEMPLATES.glob("*.jinja"))
    if chat_template not in names:
        raise _usage(
            "--chat-template",
            f"{chat_template!r} is neither Jinja text, a .jinja file nor a shipped template."
            f"{did_you_mean(chat_template, names)} Shipped: {', '.join(names)}",
        )


def _train(fn, *args, **kwargs):
    """Run a trainer (or build its env); a knowlyr error (configuration, training) is one line."""
    from knowlyr.errors import KnowlyrError

    try:
        return fn(*args, **kwargs)
    except KnowlyrError as e:
        raise _fail(e) from e


_DATA = typer.Argument(..., help="An export folder (knowlyr export ... -o DIR).")
_MODEL = typer.Option(
    "tiny",
    "--model",
    "-m",
    help="Checkpoint folder, 'smollm2-135m', or 'tiny' (a new 2x128 Qwen2).",
)
_OUT = typer.Option(
    Path("runs/train"), "--output", "-o", help="Output folder; the model goes to OUTPUT/final."
)
_EPOCHS = typer.Option(3.0, "--epochs", help="Training epochs.")
_LR = typer.Option(
    None,
    "--lr",
    help="Peak learning rate (default: one that learns for the model: the tiny preset's for "
    "--model tiny, SFT 3e-3 / DPO 5e-4 / GRPO 1e-4; TRL's for a pretrained model). The run "
    "prints the values it uses.",
)
_BS = typer.Option(8, "--batch-size", help="Per-device batch size.")
_LORA = typer.Option(None, "--lora-r", help="Train a LoRA adapter of this rank (needs peft).")
_SEED = typer.Option(0, "--seed", help="Random seed.")
_INDUCTION = typer.Option(
    None,
    "--induction-steps",
    min=0,
    help="--model tiny: steps teaching the model built from scratch to copy from its context "
    "before training (knowlyr.train.induction; default 1000, about 3 min here); 0 for none.",
)
_QUIET = typer.Option(
    False,
    "-q",
    "--quiet",
    help="No progress bar (there is none either when stderr is not a terminal or $CI is set).",
)


def _common(
    method: str,
    model: str,
    output: Path,
    epochs: float,
    lr: float | None,
    batch_size: int,
    lora_r: int | None,
    seed: int,
) -> dict:
    """The config arguments every trainer takes; the learning rate is the tiny preset's for
    ``--model tiny`` (:data:`~knowlyr.train._defaults.TINY_LEARNING_RATES`), else TRL's
    default, unless ``--lr`` is given."""
    from knowlyr.train._defaults import TINY_LEARNING_RATES

    kw = {
        "output_dir": str(output),
        "num_train_epochs": epochs,
        "per_device_train_batch_size": batch_size,
        "lora_r": lora_r,
        "seed": seed,
    }
    if lr is not None:
        kw["learning_rate"] = lr
    elif model == "tiny":
        kw["learning_rate"] = TINY_LEARNING_RATES[method]
    return kw


def _chosen(config: Any, model: str, lr: float | None, **extra: Any) -> None:
    """Print the settings a run trains with, and where its learning rate came from."""
    if lr is not None:
        source = "from --lr"
    elif model == "tiny":
        source = "the tiny preset's; --lr to change"
    else:
        trl = next(c for c in type(config).__mro__ if c.__module__.startswith("trl"))
        source = f"TRL's {trl.__name__} default for a pretrained model; --lr to change"
    settings = {
        "model": model,
        "learning_rate": config.learning_rate,
        "epochs": config.num_train_epochs,
        "batch_size": config.per_device_train_batch_size,
        "lora_r": getattr(config, "lora_r", None),
        "seed": config.seed,
        **extra,
    }
    line = ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None)
    typer.echo(f"training with {line} (learning rate {source})", err=True)


@train_app.command("sft")
def train_sft_cmd(
    data: Path = _DATA,
    model: str = _MODEL,
    output: Path = _OUT,
    epochs: float = _EPOCHS,
    lr: float | None = _LR,
    batch_size: int = _BS,
    lora_r: int | None = _LORA,
    step_weighted: bool = typer.Option(
        False, "--step-weighted", help="Weight turns by their step rewards."
    ),
    curriculum: bool = typer.Option(False, "--curriculum", help="Short / high-reward rows first."),
    chat_template: str | None = typer.Option(
        None,
        "--chat-template",
        help="Training chat template with {% generation %} markers (a .jinja file or a shipped "
        "name such as chatml_training); default: the one found for the model's template.",
    ),
    packing: bool = typer.Option(
        False,
        "--packing",
        help="Pack rows into --max-length token budgets with no padding (attention never "
        "crosses rows; observation masking and step weights stay exact). Needs --max-length.",
    ),
    max_length: int | None = typer.Option(
        None,
        "--max-length",
        min=1,
        help="Longest tokenized row; with --packing, the tokens of each packed row "
        "(default: never truncate; chunk long trajectories at export instead).",
    ),
    liger: bool = typer.Option(
        False,
        "--liger",
        help="Liger's fused kernels (RMSNorm, RoPE, SwiGLU) through TRL; needs a CUDA GPU and "
        "pip install liger-kernel. Step weights still apply.",
    ),
    seed: int = _SEED,
    induction_steps: int | None = _INDUCTION,
    quiet: bool = _QUIET,
) -> None:
    """Supervised fine-tuning (observation masking on; optional step weights, curriculum and
    padding-free packing).

    Learning rate: the tiny preset's 3e-3 for --model tiny, TRL's for a pretrained model;
    the run prints the values it trains with."""
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    _check_chat_template(chat_template)
    if packing and max_length is None:
        raise _usage(
            "--packing",
            "needs --max-length, the token budget of each packed row (e.g. --max-length 4096)",
        )
    if packing and curriculum:
        raise _usage(
            "--packing",
            "regroups rows into budgets by length, and --curriculum reads them in order; "
            "drop one of them",
        )
    if liger:  # on a CPU, or without the package: a usage error before anything loads
        import torch

        from knowlyr.errors import TrainError
        from knowlyr.train._defaults import resolve_liger_kernel

        try:
            resolve_liger_kernel(True, on_gpu=torch.cuda.is_available())
        except TrainError as e:
            need = str(e).split("; ")[0].replace("use_liger_kernel=True ", "")
            raise _usage("--liger", f"{need}; drop --liger to train without it") from e
    ds = _dataset(data)
    m, tok = _model(model, ds, seed, induction_steps)
    config = KnowlyrSFTConfig(
        **_common("sft", model, output, epochs, lr, batch_size, lora_r, seed),
        step_weighted_loss=step_weighted,
        curriculum=curriculum,
        chat_template=chat_template,
        max_length=max_length,
        packing=packing,
        use_liger_kernel=liger,
    )
    _chosen(config, model, lr, max_length=max_length, packing=packing or None, liger=liger or None)
    _report(_train(train_sft, ds, m, tok, config, callbacks=_progress(config, quiet)))


@train_app.command("dpo")
def train_dpo_cmd(
    data: Path = _DATA,
    model: str = _MODEL,
    output: Path = _OUT,
    epochs: float = _EPOCHS,
    lr: float | None = _LR,
    batch_size: int = _BS,
    lora_r: int | None = _LORA,
    beta: float = typer.Option(0.1, "--beta", help="DPO beta."),
    seed: int = _SEED,
    induction_steps: int | None = _INDUCTION,
    quiet: bool = _QUIET,
) -> None:
    """Direct preference optimisation on exported pairs.

    Learning rate: the tiny preset's 5e-4 for --model tiny, TRL's for a pretrained model;
    the run prints the values it trains with."""
    from knowlyr.train.dpo_config import KnowlyrDPOConfig
    from knowlyr.train.run import train_dpo

    ds = _dataset(data)
    m, tok = _model(model, ds, seed, induction_steps)
    config = KnowlyrDPOConfig(
        **_common("dpo", model, output, epochs, lr, batch_size, lora_r, seed), beta=beta
    )
    _chosen(config, model, lr, beta=beta)
    _report(_train(train_dpo, ds, m, tok, config, callbacks=_progress(config, quiet)))


@train_app.command("grpo")
def train_grpo_cmd(
    data: Path = _DATA,
    env_id: str = typer.Option(
        ..., "--env", help="Env to roll out in (e.g. knowlyr/conversation)."
    ),
    env_kwargs: str = typer.Option(
        "{}", "--env-kwargs", help='Env arguments as JSON, e.g. {"family": "order_status"}.'
    ),
    model: str = _MODEL,
    output: Path = _OUT,
    epochs: float = _EPOCHS,
    lr: float | None = _LR,
    batch_size: int = typer.Option(
        4, "--batch-size", help="Per-device batch size (a multiple of --generations)."
    ),
    generations: int = typer.Option(
        4, "--generations", help="Completions per prompt (group size)."
    ),
    max_steps: int = typer.Option(8, "--max-env-steps", help="Tool calls per rollout."),
    lora_r: int | None = _LORA,
    seed: int = _SEED,
    induction_steps: int | None = _INDUCTION,
    quiet: bool = _QUIET,
) -> None:
    """Online multi-turn GRPO in a knowlyr env (TRL environment_factory), step-level advantages.

    Learning rate: the tiny preset's 1e-4 for --model tiny, TRL's for a pretrained model;
    the run prints the values it trains with."""
    from knowlyr.train.grpo_config import KnowlyrGRPOConfig
    from knowlyr.train.grpo_trainer import environment_factory_for
    from knowlyr.train.run import train_grpo

    try:
        kwargs = json.loads(env_kwargs)
    except json.JSONDecodeError as e:
        raise _usage(
            "--env-kwargs", f'not JSON ({e}); e.g. \'{{"family": "order_status"}}\''
        ) from e
    ds = _dataset(data)
    m, tok = _model(model, ds, seed, induction_steps)
    env_factory = _train(
        environment_factory_for,
        env_id,
        env_kwargs=kwargs,
        tools=ds[0]["tools"],
        max_steps=max_steps,
    )
    config = KnowlyrGRPOConfig(
        **_common("grpo", model, output, epochs, lr, batch_size, lora_r, seed),
        num_generations=generations,
        max_tool_calling_iterations=max_steps,
    )
    _chosen(config, model, lr, generations=generations)
    _report(
        _train(
            train_grpo,
            ds,
            m,
            tok,
            config,
            environment_factory=env_factory,
            callbacks=_progress(config, quiet),
        )
    )
