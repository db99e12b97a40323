"""``knowlyr export sft|dpo|grpo|benchmark`` and ``knowlyr train sft|dpo|grpo``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from knowlyr._gc import paused

export_app = typer.Typer(help="Export trajectories as training datasets.", no_args_is_help=True)
train_app = typer.Typer(
    help="Train a policy with TRL on an exported dataset.", no_args_is_help=True
)


def install(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
    app.add_typer(train_app, name="train")


@paused()  # every trajectory is kept: see knowlyr._gc
def _load_trajectories(inputs: list[Path], store: str | None) -> list:
    from knowlyr.trajectory import Trajectory

    out = []
    for path in inputs:
        if not path.is_file():
            raise typer.BadParameter(
                f"{path} does not exist; pass JSONL files of trajectories", param_hint="INPUT"
            )
        with path.open("rb") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        out.append(Trajectory.from_json(line))
                    except Exception as e:
                        raise typer.BadParameter(
                            f"{path}:{n}: not a trajectory: {e}", param_hint="INPUT"
                        ) from e
    if store is not None:
        from knowlyr.store import Store

        out.extend(Store.open(store).iter_trajectories())
    if not out:
        raise typer.BadParameter("no trajectories: pass JSONL files or --store", param_hint="INPUT")
    return out


def _finish(result, output: Path, to_store: str | None, name: str | None) -> None:
    result.save(output)
    typer.echo(
        f"{result.card.kind}: {result.card.rows} rows from {result.card.trajectories} trajectories -> {output}"
    )
    for why, n in result.card.rejected.items():
        typer.echo(f"  rejected {n}: {why}")
    if to_store:
        from knowlyr.store import Store

        manifest = result.to_store(Store.open(to_store), name=name or output.name)
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
_SYSTEM = typer.Option(None, "--system-prompt", help="System message (default: knowlyr's).")


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
) -> None:
    """Multi-turn SFT conversations with a tools column (TRL SFTTrainer format)."""
    from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_sft

    result = export_sft(
        _load_trajectories(inputs or [], store),
        system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
        only_success=not include_failed,
        min_reward=min_reward,
        max_steps_per_row=max_steps_per_row,
        chunk_overlap=chunk_overlap,
    )
    _finish(result, output, to_store, name)


@export_app.command("dpo")
def export_dpo_cmd(
    inputs: list[Path] = _INPUT,
    output: Path = _OUTPUT,
    store: str | None = _STORE,
    min_margin: float = typer.Option(0.1, "--min-margin", help="Minimum reward gap of a pair."),
    system_prompt: str | None = _SYSTEM,
    to_store: str | None = _TO_STORE,
    name: str | None = _NAME,
) -> None:
    """Conversational prompt/chosen/rejected pairs built per task."""
    from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_dpo

    result = export_dpo(
        _load_trajectories(inputs or [], store),
        system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
        min_margin=min_margin,
    )
    _finish(result, output, to_store, name)


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
) -> None:
    """Trajectories grouped per task with rewards, advantages and step-level advantages."""
    from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_grpo

    result = export_grpo(
        _load_trajectories(inputs or [], store),
        system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
        min_group_size=min_group_size,
    )
    _finish(result, output, to_store, name)


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
    from knowlyr.export import export_benchmark
    from knowlyr.taskset import get_suite

    s = get_suite(suite)
    tasks = [s.get(t) for t in s.select(split="heldout", family=family)[:limit]]
    refs = None
    if env_id is not None:
        from knowlyr.agents import ExpertAgent
        from knowlyr.rollout import collect

        refs = collect(env_id, ExpertAgent, len(tasks), tasks=tasks)
    _finish(export_benchmark(tasks, references=refs), output, None, None)


def _model(model: str, dataset, seed: int):
    from knowlyr.train.models import build_tiny_model_for, load_model

    if model == "tiny":
        return build_tiny_model_for(dataset, hidden_size=128, seed=seed)  # the flow's recipe
    return load_model(model)


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
_LR = typer.Option(None, "--lr", help="Learning rate (default: TRL's).")
_BS = typer.Option(8, "--batch-size", help="Per-device batch size.")
_LORA = typer.Option(None, "--lora-r", help="Train a LoRA adapter of this rank (needs peft).")
_SEED = typer.Option(0, "--seed", help="Random seed.")


def _common(
    output: Path, epochs: float, lr: float | None, batch_size: int, lora_r: int | None, seed: int
) -> dict:
    kw = {
        "output_dir": str(output),
        "num_train_epochs": epochs,
        "per_device_train_batch_size": batch_size,
        "lora_r": lora_r,
        "seed": seed,
    }
    if lr is not None:
        kw["learning_rate"] = lr
    return kw


def _report(result) -> None:
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float)}
    typer.echo(
        json.dumps(
            {"model": str(result.path), "seconds": round(result.seconds, 1), **metrics}, indent=2
        )
    )


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
    seed: int = _SEED,
) -> None:
    """Supervised fine-tuning (observation masking on; optional step weights and curriculum)."""
    from knowlyr.train.run import load_dataset_dir, train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    ds = load_dataset_dir(data)
    m, tok = _model(model, ds, seed)
    config = KnowlyrSFTConfig(
        **_common(output, epochs, lr, batch_size, lora_r, seed),
        step_weighted_loss=step_weighted,
        curriculum=curriculum,
    )
    _report(train_sft(ds, m, tok, config))


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
) -> None:
    """Direct preference optimisation on exported pairs."""
    from knowlyr.train.dpo_config import KnowlyrDPOConfig
    from knowlyr.train.run import load_dataset_dir, train_dpo

    ds = load_dataset_dir(data)
    m, tok = _model(model, ds, seed)
    _report(
        train_dpo(
            ds,
            m,
            tok,
            KnowlyrDPOConfig(**_common(output, epochs, lr, batch_size, lora_r, seed), beta=beta),
        )
    )


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
) -> None:
    """Online multi-turn GRPO in a knowlyr env (TRL environment_factory), step-level advantages."""
    from knowlyr.train.grpo_config import KnowlyrGRPOConfig
    from knowlyr.train.grpo_trainer import environment_factory_for
    from knowlyr.train.run import load_dataset_dir, train_grpo

    ds = load_dataset_dir(data)
    m, tok = _model(model, ds, seed)
    env_factory = environment_factory_for(
        env_id, env_kwargs=json.loads(env_kwargs), tools=ds[0]["tools"], max_steps=max_steps
    )
    config = KnowlyrGRPOConfig(
        **_common(output, epochs, lr, batch_size, lora_r, seed),
        num_generations=generations,
        max_tool_calling_iterations=max_steps,
    )
    _report(train_grpo(ds, m, tok, config, environment_factory=env_factory))
