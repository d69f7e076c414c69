"""Benchmark: the cost per attempt of process isolation, next to a threaded attempt, in one run.

    python -m tools.benchmarks.isolation [--runs 100] [--steps 10] [--rounds 500]

Two measures, each threaded and isolated in the same process:

* **durable steps**: ``--runs`` runs of a ``--steps``-step workflow of no-op actions on the embedded
  default (claimed, executed, committed), once with ``isolation: thread`` and once with
  ``isolation: process`` (a fork per attempt); milliseconds per step;
* **the call alone**: ``--rounds`` no-op calls on a pooled runner thread
  (:class:`~sealflow.execution.timeouts.AttemptRunner`) and in a forked child
  (:func:`~sealflow.execution.isolation.run_forked`); median microseconds per call.

Prints both and the ratios (isolated / threaded).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from tools.benchmarks.runtime import noop_plan


def per_step_ms(mode: str, runs: int, steps: int) -> float:
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.facade import Runtime

    registry = Registry()

    @action("bench.noop", registry=registry)
    def noop(ctx):
        return None

    plan = noop_plan(steps)
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(f"sqlite:///{tmp}/state.db", registry, config=RuntimeConfig(extra={"isolation": mode}))
        try:
            rt.run(plan, {}, initiator="user:bench")  # warm up
            t0 = time.perf_counter()
            for _ in range(runs):
                status = rt.run(plan, {}, initiator="user:bench")
                assert status.state == "completed", status.state
            elapsed = time.perf_counter() - t0
        finally:
            rt.close()
    return elapsed * 1000 / (runs * steps)


def call_us(rounds: int) -> tuple[float, float]:
    from sealflow.execution.isolation import run_forked
    from sealflow.execution.timeouts import AttemptRunner

    runner = AttemptRunner()
    threaded, forked = [], []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        runner.run(lambda: None, 10.0)
        threaded.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        run_forked(lambda cancelled: ("ok", None, None), 10.0)
        forked.append(time.perf_counter_ns() - t0)
    runner.close()
    return statistics.median(threaded) / 1000, statistics.median(forked) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args(argv)
    thread_ms = per_step_ms("thread", args.runs, args.steps)
    process_ms = per_step_ms("process", args.runs, args.steps)
    print(f"durable no-op step, isolation: thread   {thread_ms:8.3f} ms/step ({1000 / thread_ms:7.0f} steps/s)")
    print(f"durable no-op step, isolation: process  {process_ms:8.3f} ms/step ({1000 / process_ms:7.0f} steps/s)")
    print(f"  ratio process/thread: {process_ms / thread_ms:.1f}x; added per attempt: {process_ms - thread_ms:.3f} ms")
    t_us, f_us = call_us(args.rounds)
    print(f"no-op call on a pooled thread           {t_us:8.1f} us (median of {args.rounds})")
    print(f"no-op call in a forked child            {f_us:8.1f} us (median of {args.rounds})")
    print(f"  ratio fork/thread: {f_us / t_us:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
