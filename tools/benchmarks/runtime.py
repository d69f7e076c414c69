"""Benchmark: durable steps per second on the embedded default, next to a bare Dramatiq chain.

    python -m tools.benchmarks.runtime [--runs 1000] [--steps 10] [--rounds 3]

Sealflow: ``--runs`` runs of a ``--steps``-step workflow of no-op actions, each
step claimed, executed and committed durably (SQLite WAL, fenced commit, audit,
outbox) through a Dramatiq ``StubBroker`` and an in-process ``Worker``.
Peer, in the same process and run: a bare Dramatiq chain of ``--steps`` no-op
actors on a ``StubBroker`` (each actor sends the next), ``--runs`` times: the
cost of the broker alone, with no durability at all.

The two sides take turns, ``--rounds`` times (peer, Sealflow, peer, ...): on a
shared machine either one's speed moves from minute to minute, and a ratio of
figures taken in the same minute moves less. Prints, per round, steps per second
and the CPU time per step of the whole process (every thread: steadier than the
wall clock where other work shares the cores) for both, their ratios, and the
median ratio; then the process's resident memory after each quarter of the last
round's runs, to show whether memory stays flat as finished runs accumulate in
the store.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time


def rss_mib() -> float:
    """Current resident set size (Linux /proc), in MiB."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # pragma: no cover - not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def noop_plan(steps: int, *, chained: bool = False):
    """``steps`` no-op action steps; ``chained``: each (but the first) takes the previous one's output."""
    from sealflow.dsl.api import compile_bytes

    lines = ["sealflow: 1", "name: bench-noop", "version: 1", "owner: team:bench", "permissions: []",
             "defaults: {timeout: 10s}", "steps:"]
    lines += [f"  - {{id: s{i}, action: bench.noop}}" if i == 0 or not chained else
              f"  - {{id: s{i}, action: bench.noop, with: {{prev: '${{{{ steps.s{i - 1}.output }}}}'}}}}"
              for i in range(steps)]
    return compile_bytes(("\n".join(lines) + "\n").encode(), "bench-noop.v1.yaml")


def bench_sealflow(runs: int, steps: int, *, chained: bool = False) -> tuple[float, list[tuple[int, float]]]:
    """Steps per second of ``runs`` runs (and resident memory after each quarter)."""
    sps, _cpu, memory = bench_sealflow_cpu(runs, steps, chained=chained)
    return sps, memory


def noop_runtime(folder: str):
    """A ``Runtime`` on the embedded default with its store in ``folder``, knowing the action ``bench.noop``."""
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.facade import Runtime

    registry = Registry()

    @action("bench.noop", registry=registry)
    def noop(ctx, prev=None):
        return {"n": 1}

    return Runtime(f"sqlite:///{folder}/state.db", registry)


def bench_sealflow_cpu(runs: int, steps: int, *, chained: bool = False
                       ) -> tuple[float, float, list[tuple[int, float]]]:
    """Steps per second, the process's CPU seconds per step, and resident memory after each quarter."""
    plan = noop_plan(steps, chained=chained)
    memory = []
    with tempfile.TemporaryDirectory() as tmp:
        rt = noop_runtime(tmp)
        try:
            rt.run(plan, {}, initiator="user:bench")  # warm up: actor, plan cache, statements
            gc.collect()
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(1, runs + 1):
                status = rt.run(plan, {}, initiator="user:bench")
                assert status.state == "completed", status.state
                if i % max(runs // 4, 1) == 0:
                    memory.append((i, rss_mib()))
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        finally:
            rt.close()
    return runs * steps / elapsed, cpu / (runs * steps), memory


def noop_chain(broker, steps: int, threads: int, queue: str | None = None):
    """On ``broker``: a chain of ``steps`` no-op Dramatiq actors, each sending the next, the last releasing the
    returned semaphore once per chain, and a started in-process ``Worker`` of ``threads`` (the caller stops it).
    Returns ``(first actor, semaphore, worker)``."""
    import threading

    import dramatiq

    broker.emit_after("process_boot")
    done = threading.Semaphore(0)
    actors: list = []
    on_queue = {} if queue is None else {"queue_name": queue}

    def make(i: int):
        def fn():
            if i + 1 < steps:
                actors[i + 1].send()
            else:
                done.release()

        fn.__name__ = f"noop_{i}"
        return dramatiq.actor(fn, broker=broker, actor_name=f"noop_{i}", max_retries=0, **on_queue)

    actors.extend(make(i) for i in range(steps))
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100)
    worker.start()
    return actors[0], done, worker


def bench_dramatiq(runs: int, steps: int) -> float:
    return bench_dramatiq_cpu(runs, steps)[0]


def bench_dramatiq_cpu(runs: int, steps: int) -> tuple[float, float]:
    """Steps per second of the bare chain, and the process's CPU seconds per step."""
    from dramatiq.brokers.stub import StubBroker

    broker = StubBroker()
    first, done, worker = noop_chain(broker, steps, threads=2)
    try:
        first.send()
        done.acquire()
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(runs):
            first.send()
            done.acquire()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        worker.stop()
        broker.close()
    return runs * steps / elapsed, cpu / (runs * steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="turns of each side, alternating")
    args = parser.parse_args(argv)
    for name in ("runs", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1 (got {getattr(args, name)})")
    import logging
    import statistics

    logging.disable(logging.WARNING)
    ratios, cpu_ratios = [], []
    for n in range(1, args.rounds + 1):
        peer, peer_cpu = bench_dramatiq_cpu(args.runs, args.steps)
        ours, our_cpu, memory = bench_sealflow_cpu(args.runs, args.steps)
        ratios.append(ours / peer)
        cpu_ratios.append(peer_cpu / our_cpu)
        print(f"round {n}: bare Dramatiq chain (StubBroker, no durability) {peer:7.0f} steps/s, "
              f"{peer_cpu * 1e6:5.0f} us CPU/step; sealflow embedded (durable) {ours:7.0f} steps/s, "
              f"{our_cpu * 1e6:5.0f} us CPU/step; ratio {ours / peer:.2f}x (CPU {peer_cpu / our_cpu:.2f}x)")
    print(f"ratio sealflow / bare Dramatiq: {statistics.median(ratios):.2f}x (median of {args.rounds}; "
          f"{min(ratios):.2f}x to {max(ratios):.2f}x); CPU per step: {statistics.median(cpu_ratios):.2f}x")
    print("resident memory as finished runs accumulate: "
          + ", ".join(f"{n} runs {mib:.1f} MiB" for n, mib in memory))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
