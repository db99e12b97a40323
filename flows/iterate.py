"""``iterate``: the nightly loop collect -> reward -> export -> train -> evaluate -> promote.

The loop learns from its own rollouts:

- **The first night** (no promoted checkpoint in the store) is the warm-up: expert
  demonstrations (:class:`WarmupParams`: ~285 per family of the nightly mix) train a policy
  from scratch by SFT, after induction pretraining teaches the new model to copy. It is
  evaluated against the untrained model and promoted only when it is right significantly
  more often (the same test as every later night's): the first champion. A warm-up that
  fails the test is not promoted, and the next night warms up again.
- **Every later night** collects with the champion (the last promoted checkpoint), sampling
  ``attempts`` episodes per task at ``temperature``, its tasks split over the mix's families
  by :attr:`IterateParams.curriculum`; the reward model scores them; training
  starts from the champion with :attr:`TrainParams.method`: ``sft`` on the reward-filtered
  successes (rejection sampling), ``dpo`` on pairs from the attempts at one task, or ``grpo``
  online in the environment. The candidate is evaluated against the champion on held-out
  tasks and promoted only on a significant improvement. No expert data after the warm-up:
  the loop exports only trajectories of checkpoint agents.

Run once on embedded defaults (Prefect's ephemeral API, a local store)::

    python -m flows.iterate            # one night of the order_status recipe (make run)
    python -m flows.iterate --nightly  # one night of the nightly loop (the deployment's)
    python -m flows.iterate --small    # a seconds-long smoke run
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows._common import resolve_store, run_namer
from flows.collect import CollectParams, CollectReport, CollectSettings, TaskSource, run_collect
from flows.evaluate import EvalParams, run_evaluation
from flows.report import iteration_report
from flows.train import run_training
from knowlyr.agents.spec import recorded_prefix
from knowlyr.taskset import get_suite
from tasks._artifacts import cached_origin
from tasks.evaluate import ComparisonSummary, Decision, current_champion, promote_checkpoint
from tasks.export import DatasetRef, ExportParams, ExportSettings, export_dataset
from tasks.reward import RewardParams, RewardSummary, score_trajectories
from tasks.train import Checkpoint, TrainParams

__all__ = [
    "NIGHTLY_MIX",
    "IterateParams",
    "IterateReport",
    "WarmupParams",
    "iterate",
    "main",
]

#: The nightly task mix: every family of the conversation, engineering and advisory suites, one
#: task source each, so collection and evaluation split their episodes evenly over the 13
#: families (a source per suite gave ``order_status``, 10,000 of conversation's 22,000 tasks,
#: half of that suite's episodes and ``refund`` a few).
NIGHTLY_MIX = [
    TaskSource(env_id=f"knowlyr/{suite}", suite=suite, family=family)
    for suite in ("conversation", "engineering", "advisory")
    for family in get_suite(suite).families
]

M = TypeVar("M", bound=BaseModel)

#: The export's replay window: a night trains on what it collected and on the trajectories of
#: this many earlier versions of the table (the last nights' collections), never the whole store.
REPLAY = 2

#: Rollouts of trained policies are recorded as ``checkpoint:<name>``: what later nights train on.
MODEL_AGENTS = "checkpoint:"


class WarmupParams(BaseModel):
    """The first night: expert demonstrations that train the first policy from scratch."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(
        3700,
        gt=0,
        description="expert demonstrations (one per task; ~285 per family of the mix). With "
        "the same ~430 SFT steps, 3,700 demonstrations x 2 epochs reached 73.0% held-out and "
        "1,300 x 6 epochs 44.0% (README)",
    )
    agent: str = Field(
        "expert",
        description="the demonstrating policy (an agent spec; e.g. noisy:0.25:give_up for logs "
        "of mixed quality)",
    )
    only_success: bool = Field(
        True,
        description="train on the successful demonstrations only; false clones every one, "
        "as behaviour cloning of logs of mixed quality does",
    )
    train: TrainParams = Field(
        default_factory=lambda: TrainParams(epochs=2, restarts=1, target_eval_loss=None),
        description="SFT of the warm-up policy (from scratch: a tiny model or a base folder)",
    )


_STAGES = ("warmup", "collect", "reward", "export", "train", "evaluate")
_SET_BY_THE_ITERATION = {
    "collect": {
        "seed": "set params.seed (null: the run's date)",
        "store_url": "set params.store_url",
    },
    "export": {"kind": "it is the train method's (train.method, sft on the warm-up night)"},
}


def _merged(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``given``'s values, nested dicts merged (lists replace)."""
    out = dict(base)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


class IterateParams(BaseModel):
    """Parameters of one night; every stage's parameters are a nested model."""

    model_config = ConfigDict(extra="forbid")

    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")
    seed: int | None = Field(
        0, description="collection seed; null derives it from the run's scheduled date (nightly)"
    )
    warmup: WarmupParams = Field(default_factory=WarmupParams)
    collect: CollectSettings = Field(
        default_factory=lambda: CollectSettings(
            mix=NIGHTLY_MIX, agent="champion", episodes=800, attempts=1, temperature=0.7,
            max_steps=4, shards=1,
        ),
        description="the champion's rollouts: 800 distinct tasks, one attempt each, sampled at "
        "0.7 (README: more distinct tasks beat more attempts at fewer; a dpo night needs "
        "attempts >= 2 to pair them). The task sources also scope the warm-up, the export and "
        "the evaluation; the seed and the store are the iteration's",
    )  # fmt: skip
    reward: RewardParams = Field(default_factory=RewardParams)
    export: ExportSettings = Field(
        default_factory=lambda: ExportSettings(suite=None, family=None, replay_versions=REPLAY),
        description="which trajectories become the dataset (its kind is the train method's): "
        "tonight's collection and a bounded replay window of earlier trajectories versions",
    )
    train: TrainParams = Field(
        default_factory=lambda: TrainParams(
            epochs=2, learning_rate=3e-4, restarts=1, target_eval_loss=None, validation_fraction=0
        ),
        description="training from the champion (method: sft | dpo | grpo); 3e-4, not the "
        "warm-up's 3e-3: 1e-3 cost the 73% champion 6.7 points in one night (README)",
    )
    evaluate: EvalParams = Field(default_factory=lambda: EvalParams(episodes=300, max_steps=4))
    curriculum: Literal["even", "frontier"] = Field(
        "even",
        description="how a later night splits its attempts over the task sources: 'even' alike; "
        "'frontier' in proportion to 4p(1-p) of the champion's held-out success p on each family "
        "(most to the families it half solves; knowlyr.train.curriculum). Measured on 3 nights "
        "(README): frontier lifted the families it favoured and lost others, not better overall",
    )

    @model_validator(mode="before")
    @classmethod
    def _stages_keep_their_defaults(cls, data: Any) -> Any:
        """A stage given as a partial dict (``{"collect": {"episodes": 256}}``) changes only
        those fields of this loop's stage defaults (not of the stage model's own defaults);
        fields the iteration sets itself are refused with the field to use instead."""
        if not isinstance(data, dict):
            return data
        for stage, owned in _SET_BY_THE_ITERATION.items():
            given = data.get(stage)
            for key, instead in owned.items() if isinstance(given, dict) else ():
                if key in given:
                    raise ValueError(f"{stage}.{key} is set by the iteration: {instead}")
        out = dict(data)
        for stage in _STAGES:
            if isinstance(data.get(stage), dict):
                default = cls.model_fields[stage].get_default(call_default_factory=True)
                out[stage] = _merged(default.model_dump(), data[stage])
        return out

    @model_validator(mode="after")
    def _dpo_pairs_attempts(self) -> IterateParams:
        if self.train.method == "dpo" and self.collect.attempts < 2:
            raise ValueError(
                "train.method='dpo' pairs attempts at one task (success beats failure), and "
                f"collect.attempts is {self.collect.attempts}: set collect.attempts >= 2, e.g. "
                '{"collect": {"attempts": 4}, "train": {"method": "dpo"}}'
            )
        return self

    @classmethod
    def one_night(cls, **overrides: Any) -> IterateParams:
        """``make run``: the order_status recipe. A fresh store's night trains on 1,000 expert
        episodes (induction pretraining, then 10 epochs of SFT, ~580 steps: with 4 epochs, 232
        steps, two of three seeds stopped on a plateau at validation loss 0.022, which 560-1,140
        steps got past; ``bench/run_bench.py``); a night with a champion collects with it and
        trains on from it."""
        source = TaskSource(
            env_id="knowlyr/conversation", suite="conversation", family="order_status"
        )
        base = cls(
            warmup=WarmupParams(episodes=1000, train=TrainParams()),
            collect=CollectSettings(
                mix=[source], agent="champion", episodes=1000, attempts=2, temperature=1.0,
                shards=2,
            ),
            export=ExportSettings(
                suite="conversation", family="order_status", replay_versions=REPLAY
            ),
            evaluate=EvalParams(),
        )  # fmt: skip
        return base.model_copy(update=overrides)

    @classmethod
    def small(cls, **overrides: Any) -> IterateParams:
        """Seconds-long parameters (tests, the smoke deployment, screenshots): they export only
        the night's own collection (no replay), so a small night on a populated store takes as
        long as on a fresh one."""
        source = TaskSource(
            env_id="knowlyr/conversation", suite="conversation", family="order_status"
        )
        base = cls(
            warmup=WarmupParams(
                episodes=48,
                train=TrainParams(epochs=1, batch_size=16, restarts=2, induction_steps=0),
            ),
            collect=CollectSettings(
                mix=[source], agent="champion", episodes=24, attempts=2, temperature=1.0,
                shards=2, max_steps=3,
            ),
            export=ExportSettings(suite="conversation", family="order_status", replay_versions=0),
            train=TrainParams(epochs=1, restarts=1, target_eval_loss=None, validation_fraction=0),
            evaluate=EvalParams(episodes=6, max_new_tokens=24, max_steps=2),
        )  # fmt: skip
        return base.model_copy(update=overrides)


class IterateReport(BaseModel):
    """Everything one night produced (manifests and decisions, no data). A night whose export
    has no rows trains nothing: ``init``, ``candidate``, ``comparison`` and ``decision`` are
    then None and ``outcome`` says why."""

    store_url: str
    seed: int
    warmup: bool = Field(description="this night trained the warm-up policy")
    collect: CollectReport
    rewards: list[RewardSummary]
    dataset: DatasetRef
    init: Checkpoint | None
    candidate: Checkpoint | None
    comparison: ComparisonSummary | None
    decision: Decision | None
    outcome: str = Field(description="what the night decided, in one line")
    report_dir: str


def _nightly_seed() -> int:
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time or datetime.now(UTC)
    return int(when.strftime("%Y%m%d"))


def _describe(p: Any) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    c = get("collect") or {}
    cget = c.get if isinstance(c, dict) else lambda k, d=None: getattr(c, k, d)
    seed = get("seed", 0)
    mix = cget("mix") or []
    if len(mix) == 1:
        first = mix[0]
        where = first.get("env_id") if isinstance(first, dict) else first.env_id
    else:
        where = "mix" if mix else cget("env_id", "knowlyr/conversation")
    return f"{where}-{cget('episodes', 2000)}ep-seed{_nightly_seed() if seed is None else seed}"


def _what_runs(params: IterateParams, seed: int, warmup: bool) -> str:
    """The run's name from what this night does, known once the store says whether there is
    a champion: ``iterate-warmup-3700x-expert-seed0`` or ``iterate-night-800x1-sft-seed0``."""
    if warmup:
        w = params.warmup
        return f"iterate-warmup-{w.episodes}x-{w.agent.replace(':', '-')}-seed{seed}"
    c = params.collect
    return f"iterate-night-{c.episodes}x{c.attempts}-{params.train.method}-seed{seed}"


def _rename_run(name: str) -> None:
    """Rename the current flow run (its name was chosen from the parameters alone, before
    the flow could tell a warm-up night from a loop night)."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if flow_run.id is None or flow_run.name == name:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(flow_run.id, name=name)


def _stage(model: type[M], settings: BaseModel, **update: Any) -> M:
    """A stage's parameters: the night's ``settings`` with what the iteration sets."""
    return model.model_validate({**settings.model_dump(), **update})


@flow(
    name="iterate",
    flow_run_name=run_namer("iterate", _describe),
    retries=1,
    retry_delay_seconds=60,
)
def iterate(params: IterateParams = IterateParams()) -> IterateReport:
    """One night: collect with the champion (the warm-up demonstrations on the first night),
    reward, export, train from the champion, evaluate against it, promote if better."""
    store_url = resolve_store(params.store_url)
    seed = params.seed if params.seed is not None else _nightly_seed()
    log = get_run_logger()
    champion = current_champion(store_url)
    warmup = champion is None
    sources = params.collect.sources()
    _rename_run(_what_runs(params, seed, warmup))
    if warmup:
        w = params.warmup
        log.info(f"no champion in {store_url}: warm-up night on {w.episodes} {w.agent} episodes")
        collect = _stage(
            CollectParams,
            params.collect,
            agent=w.agent,
            episodes=w.episodes,
            attempts=1,
            temperature=0.0,
            seed=seed,
        )
        export = _stage(ExportParams, params.export, kind="sft", only_success=w.only_success)
        train, agents = w.train, recorded_prefix(w.agent)
    else:
        log.info(f"champion {champion.name} ({champion.blob[:12]}) collects tonight")
        collect = _stage(CollectParams, params.collect, seed=seed)
        if params.curriculum == "frontier" and len(sources) > 1:
            collect = _on_the_frontier(collect, store_url, champion, log)
        export = _stage(ExportParams, params.export, kind=params.train.method)
        train, agents = params.train, MODEL_AGENTS
    collected = run_collect(collect, store_url)
    trajectories = collected.trajectories.ref
    n = params.reward.shards
    rewards = [
        score_trajectories.submit(trajectories, params.reward, shard=i, n_shards=n)
        for i in range(n)
    ]
    exported = export_dataset(trajectories, rewards, export, agent_prefix=agents, return_state=True)
    dataset = exported.result()
    night = {"store_url": store_url, "seed": seed, "warmup": warmup, "collect": collected}
    if dataset.rows == 0:
        # e.g. a champion none of whose attempts succeeded: the night records why and keeps
        # the champion, instead of failing the run
        outcome = (
            f"nothing to learn from tonight: the {export.kind} export {dataset.name} has no rows "
            f"({dataset.rejected} trajectories rejected, {collected.successes} of "
            f"{collected.episodes} episodes successful); "
            + ("no champion yet" if warmup else f"the champion {champion.name} stays")
            + ". More attempts per task (collect.attempts), more episodes or a higher "
            "temperature give it more chances"
        )
        log.warning(outcome)
        rewards = [r.result() for r in rewards]
        report_dir = iteration_report(
            store_url, seed, collected, rewards, dataset, None, None, None,
            data_cached=cached_origin(exported), outcome=outcome,
        )  # fmt: skip
        return IterateReport(
            **night, rewards=rewards, dataset=dataset, init=None, candidate=None,
            comparison=None, decision=None, outcome=outcome, report_dir=report_dir,
        )  # fmt: skip
    init, candidate = run_training(dataset, train, init=champion)
    evaluation = run_evaluation(
        store_url, params.evaluate, sources=sources, init=init, candidate=candidate
    )
    decision = promote_checkpoint(
        store_url,
        candidate,
        evaluation,
        min_improvement=params.evaluate.min_improvement,
        first_champion=warmup,
    )
    outcome = f"{'promoted' if decision.promoted else 'not promoted'}: {decision.reason}"
    rewards = [r.result() for r in rewards]
    report_dir = iteration_report(
        store_url, seed, collected, rewards, dataset, candidate, evaluation, decision,
        data_cached=cached_origin(exported), outcome=outcome,
    )  # fmt: skip
    log.info(
        f"held-out success {evaluation.baseline} {evaluation.success(evaluation.baseline):.1%} "
        f"-> candidate {evaluation.success('candidate'):.1%} ({params.evaluate.episodes} tasks); "
        f"{outcome}"
    )
    log.info(f"store: {store_url}  checkpoint: {candidate.path}  report: {report_dir}")
    return IterateReport(
        **night, rewards=rewards, dataset=dataset, init=init, candidate=candidate,
        comparison=evaluation, decision=decision, outcome=outcome, report_dir=report_dir,
    )  # fmt: skip


def _on_the_frontier(collect: CollectParams, store_url: str, champion: Checkpoint, log: Any):
    """``collect`` with its sources weighted by the champion's latest held-out success on
    their families (:mod:`knowlyr.train.curriculum`); unchanged when it has no evaluation."""
    from knowlyr.store import Store
    from knowlyr.train.curriculum import family_success, frontier_weights, split_by_weight

    rates = family_success(Store.open(store_url), champion.blob)
    if not rates:
        log.info("frontier curriculum: the champion has no recorded evaluation; even split")
        return collect
    weights = frontier_weights(rates)
    mix = [s.model_copy(update={"weight": weights.get(s.family, 1.0)}) for s in collect.sources()]
    tasks = split_by_weight(max(1, collect.episodes // collect.attempts), [s.weight for s in mix])
    log.info(
        "frontier curriculum (tasks by the champion's held-out success): "
        + ", ".join(
            f"{s.family or s.suite} {rates[s.family][0]}/{rates[s.family][1]} -> {n}"
            if s.family in rates else f"{s} (not evaluated) -> {n}"
            for s, n in zip(mix, tasks, strict=True)
        )
    )  # fmt: skip
    return collect.model_copy(update={"mix": mix})


@contextmanager
def _patient_ephemeral_server() -> Iterator[None]:
    """Give Prefect's temporary local server more than its default 20 s to start (a busy
    2-core machine needs it); an explicit setting or a configured server wins."""
    import os

    from prefect.settings import (
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    # The temporary server logs tracebacks of its own services cancelled at shutdown; they say
    # nothing about the run, so keep its log to critical messages (the subprocess reads env).
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in os.environ:
        yield
        return
    with temporary_settings({PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 120}):
        yield


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.iterate``: one iteration on embedded defaults; prints the outcome."""
    ap = argparse.ArgumentParser(description="Run one knowlyr-gym iteration (Prefect flow).")
    ap.add_argument("--store", default=None, help="store root (default .knowlyr/store)")
    recipe = ap.add_mutually_exclusive_group()
    recipe.add_argument("--small", action="store_true", help="tiny parameters: a smoke run")
    recipe.add_argument(
        "--nightly", action="store_true", help="the nightly loop's parameters (the task mix)"
    )
    ap.add_argument("--seed", type=int, default=0, help="collection seed")
    args = ap.parse_args(argv)
    if args.small:
        params = IterateParams.small()
    else:
        params = IterateParams() if args.nightly else IterateParams.one_night()
    params = params.model_copy(update={"store_url": args.store, "seed": args.seed})
    with _patient_ephemeral_server():
        report = iterate(params)
    where = ", ".join(str(s) for s in params.collect.sources())
    print()
    if report.comparison is None:
        print(f"No training tonight ({where}): {report.outcome}")
    else:
        base = report.comparison.baseline
        what = "warm-up: untrained model" if report.warmup else "the champion"
        method = "sft" if report.warmup else params.train.method
        print(f"Held-out success ({where}, {params.evaluate.episodes} tasks):")
        print(f"  before training ({what}): {report.comparison.success(base):.1%}")
        print(
            f"  after training  ({method} candidate): {report.comparison.success('candidate'):.1%}"
        )
        print(f"  decision: {report.outcome}")
    print("Artifacts:")
    print(f"  store (Delta tables + blobs): {report.store_url}")
    if report.candidate is not None:
        print(f"  checkpoint:                   {report.candidate.path}")
    print(f"  iteration report:             {Path(report.report_dir) / 'report.md'}")
    print("  Prefect artifacts: `prefect artifact ls` (or the UI, `make server`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
