"""Episodes per second: a checkpoint in-process (AgentInference) vs served over HTTP.

The same checkpoint plays ``order_status`` episodes of the conversation env through
``collect`` at 1, 8 and 32 episodes in flight (threads), three ways:

- **in-process** (the baseline): :class:`~knowlyr.agents.inference.AgentInference`, one model
  shared by the threads;
- **served**: ``transformers serve`` on a loopback port (:func:`~knowlyr.agents.serve.serve_checkpoint`),
  each episode an agent that calls ``/v1/chat/completions`` with the official ``openai`` SDK
  and turns the reply into an action with :func:`~knowlyr.agents.serve.reply_action`
  (``parse_action_text`` underneath);
- **served + CB**: the same with ``--continuous-batching``.

All decode greedily with the checkpoint's system prompt and tools, so the three should take the
same actions; the success and invalid-action columns show whether they do (after an HTTP 500
for an unparseable tool call the served history lacks the raw text, so they can drift).
Without ``--checkpoint`` a tiny Qwen2 is trained for ~10 s first (the tool-call format learned,
order ids not copied: success ~0); pass a trained one (e.g. the closed-loop recipe) for
episodes that succeed. On a 2-CPU machine the in-process threads share one model and fight
over the cores, so its rate falls as episodes in flight rise.

Usage: .venv/bin/python bench/serve_bench.py [--checkpoint DIR] [--episodes 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from knowlyr.agents import ExpertAgent
from knowlyr.agents.action_format import INVALID_ACTION_TOOL, render_action
from knowlyr.agents.base import Agent
from knowlyr.agents.inference import AgentInference, read_marker
from knowlyr.agents.serve import reply_action, serve_checkpoint
from knowlyr.rollout import collect

ENV = "knowlyr/conversation"
HELDOUT = {"family": "order_status", "split": "heldout"}
SYSTEM = "You answer customers' questions about their orders."
IN_FLIGHT = (1, 8, 32)
MAX_STEPS = 3
MAX_TOKENS = 64


class ServedAgent(Agent):
    """The in-process ModelAgent's conversation, sent to a served checkpoint over HTTP."""

    def __init__(self, client: Any, model: str, system_prompt: str | None, tools: list | None):
        self.client = client
        self.model = model
        self.system_prompt = system_prompt
        self.tools = tools
        self.name = "served"
        self.messages: list[dict[str, Any]] = []
        self._instruction: str | None = None

    def reset(self, info: dict[str, Any] | None = None) -> None:
        self.messages = []
        task = (info or {}).get("task") or {}
        self._instruction = (
            task.get("instruction")
            if isinstance(task, dict)
            else getattr(task, "instruction", None)
        )

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        import openai

        if not self.messages:
            if self.system_prompt:
                self.messages.append({"role": "system", "content": self.system_prompt})
            self.messages.append({"role": "user", "content": self._instruction or observation})
        else:
            self.messages.append({"role": "tool", "content": observation})
        kwargs = {"model": self.model, "messages": self.messages, "tools": self.tools}
        for attempt in range(2):
            try:
                reply = self.client.chat.completions.create(
                    **kwargs, temperature=0, max_tokens=MAX_TOKENS
                )
                action = reply_action(reply.choices[0].message)
                break
            except openai.InternalServerError as e:  # transformers serve: an unparseable call
                action = {"tool": INVALID_ACTION_TOOL, "params": {"raw": "", "error": str(e)}}
                break
            except openai.APIConnectionError:  # a keep-alive connection closed after a 500
                if attempt:
                    raise
        if action["tool"] == INVALID_ACTION_TOOL:
            self.messages.append({"role": "assistant", "content": action["params"]["raw"]})
        else:  # as text: the server would drop the thought of a tool_calls message
            self.messages.append({"role": "assistant", "content": render_action(action)})
        return action


def train_checkpoint(out: Path) -> Path:

    from knowlyr.export import export_sft
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    trajs = collect(
        ENV, ExpertAgent, 200, seed=0, env_kwargs={"family": "order_status", "split": "train"}
    )
    ds = export_sft(trajs, system_prompt=SYSTEM).dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(out),
        learning_rate=3e-3,
        per_device_train_batch_size=16,
        max_steps=80,
        logging_steps=1000,
        disable_tqdm=True,
        seed=0,
    )
    return train_sft(ds, model, tok, config).path  # one torch thread: see knowlyr._threads


def run(factory, n: int, in_flight: int) -> tuple[float, float, float]:
    """(episodes/s, success rate, invalid actions per episode)."""
    t0 = time.perf_counter()
    trajs = collect(
        ENV, factory, n, seed=50_000, concurrency=in_flight, max_steps=MAX_STEPS, env_kwargs=HELDOUT
    )
    rate = n / (time.perf_counter() - t0)
    success = sum(bool(t.outcome.success) for t in trajs) / n
    invalid = sum(
        s.action is not None and s.action.tool == INVALID_ACTION_TOOL
        for t in trajs
        for s in t.steps
    )
    return rate, success, invalid / n


def served_rates(ckpt: Path, n: int, *, continuous_batching: bool) -> dict[int, tuple]:
    import openai

    marker = read_marker(ckpt)
    out = {}
    t0 = time.perf_counter()
    with serve_checkpoint(ckpt, continuous_batching=continuous_batching) as served:
        label = "served + CB" if continuous_batching else "served"
        print(f"{label}: healthy after {time.perf_counter() - t0:.1f} s at {served.base_url}")
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)

        def factory():
            return ServedAgent(
                client, served.model, marker.get("system_prompt"), marker.get("tools")
            )

        run(factory, min(n, 4), 4)  # warm-up (first request, CB worker start)
        for k in IN_FLIGHT:
            out[k] = run(factory, max(n, k), k)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--checkpoint", type=Path, help="a checkpoint folder (default: train a tiny one)"
    )
    ap.add_argument("--episodes", type=int, default=32, help="episodes per measurement")
    ap.add_argument(
        "--in-process-only",
        action="store_true",
        help="skip the served columns (a machine without transformers serve's packages)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint
        if ckpt is None:
            t0 = time.perf_counter()
            ckpt = train_checkpoint(Path(tmp) / "sft")
            print(f"trained a tiny checkpoint in {time.perf_counter() - t0:.1f} s")
        bridge = AgentInference.from_pretrained(ckpt, max_new_tokens=MAX_TOKENS)
        local = {}
        run(lambda: bridge.create_agent(name="in-process"), min(args.episodes, 4), 1)  # warm-up
        for k in IN_FLIGHT:
            local[k] = run(lambda: bridge.create_agent(name="in-process"), max(args.episodes, k), k)
            print(f"in-process, {k} in flight: {local[k]}", flush=True)
        plain = cb = None
        if not args.in_process_only:
            plain = served_rates(ckpt, args.episodes, continuous_batching=False)
            cb = served_rates(ckpt, args.episodes, continuous_batching=True)

    import torch

    on_gpu = bridge.model.device.type == "cuda"
    where = torch.cuda.get_device_name(bridge.model.device) if on_gpu else "the CPU"
    dtype = str(bridge.model.dtype).removeprefix("torch.")
    print(
        f"\n{ENV} order_status held-out, greedy, <= {MAX_STEPS} steps, {args.episodes} episodes "
        f"per cell, acting on {where} in {dtype}, torch {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs"
    )
    print("episodes/s (success rate, invalid actions per episode)")
    head = f"{'in flight':>9} | {'in-process':>22} | {'served':>22} | {'served + CB':>22}"
    print(head)
    print("-" * len(head))
    for k in IN_FLIGHT:
        cells = [
            f"{c[k][0]:7.2f} ({c[k][1]:.0%}, {c[k][2]:.2f})" if c else "not run"
            for c in (local, plain, cb)
        ]
        print(f"{k:>9} | " + " | ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
