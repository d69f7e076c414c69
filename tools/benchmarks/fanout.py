"""Benchmark: a map of N no-op items in one run, next to N single-step runs, on the embedded default.

    python -m tools.benchmarks.fanout [--items 1000] [--concurrency 100] [--rounds 2]

Sealflow's fan-out: one run whose ``map`` step runs a one-step sub-flow (a no-op action) per item, each item
a child run (created in the map step's commit, at most ``--concurrency`` in flight, each claimed, executed
and committed durably, the parent woken once at the end). Peer, in the same process and run: N runs of a
one-step workflow of the same no-op action, all submitted first and then driven by the same worker (the same
threads, the same store): the cost of N independent durable executions. The ratio is time per item of the
map over time per run of the peer (aim: no more than 1.0, the map costs no more per item). Rounds alternate
map and peer in one store, so both see the same store size.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time


def plans(concurrency: int, items: int):
    from sealflow.dsl.api import compile_bytes

    single = compile_bytes(b"sealflow: 1\nname: bench-single\nversion: 1\nowner: team:bench\n"
                           b"defaults: {timeout: 10s}\nsteps:\n  - {id: one, action: bench.noop}\n", "single.yaml")
    fan = compile_bytes((f"sealflow: 1\nname: bench-map\nversion: 1\nowner: team:bench\n"
                         f"budget: {{max_steps: {items + 10}}}\n"
                         f"defaults: {{timeout: 10s}}\nsteps:\n  - id: each\n    map:\n      items: \"input.items\"\n"
                         f"      concurrency: {concurrency}\n      max_items: {max(items, 1)}\n"
                         f"      steps: [{{id: item_step, action: bench.noop}}]\n").encode(), "map.yaml")
    return single, fan


def run_map(rt, plan, items: int) -> float:
    started = time.perf_counter()
    status = rt.run(plan, {"items": list(range(items))}, initiator="user:bench", until="final")
    elapsed = time.perf_counter() - started
    assert status.state == "completed", (status.state, status.run.error_message)
    return elapsed


def run_singles(rt, plan, items: int) -> float:
    started = time.perf_counter()
    ids = [rt.submit(plan, {}, initiator="user:bench") for _ in range(items)]
    for run_id in ids:
        state = rt.drive(run_id, until="final").state
        assert state == "completed", state
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.facade import Runtime

    registry = Registry()

    @action("bench.noop", registry=registry)
    def noop(ctx):
        return None

    single, fan = plans(args.concurrency, args.items)
    maps, peers = [], []
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(f"sqlite:///{tmp}/state.db", registry, worker_threads=args.threads)
        try:
            run_map(rt, fan, 10)  # warm up: actors, plan caches, statements
            run_singles(rt, single, 10)
            for _ in range(args.rounds):
                gc.collect()
                maps.append(run_map(rt, fan, args.items))
                gc.collect()
                peers.append(run_singles(rt, single, args.items))
        finally:
            rt.close()
    m, p = min(maps), min(peers)
    n = args.items
    print(f"map of {n} no-op items in one run (concurrency {args.concurrency}): {m:7.2f} s  "
          f"{m / n * 1000:6.2f} ms/item  {n / m:7.0f} items/s")
    print(f"{n} single-step runs (peer, same worker):            {p:7.2f} s  "
          f"{p / n * 1000:6.2f} ms/run   {n / p:7.0f} runs/s")
    print(f"ratio map per item / single run: {m / p:.2f}x  (best of {args.rounds} rounds each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
