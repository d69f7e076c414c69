"""Benchmark: Sealflow's distributed path on Redis and on RabbitMQ, each next to a bare Dramatiq chain on the
same broker.

    python -m tools.benchmarks.brokers [--runs 200] [--steps 10] [--threads 4] [--brokers redis,amqp]

For each broker (Redis at 127.0.0.1:6379, RabbitMQ at 127.0.0.1:5672 as guest), in this one process:

* peer: a bare Dramatiq chain of ``--steps`` no-op actors (each sends the next), ``--runs`` chains started at
  once, on a broker built exactly as Sealflow builds it (:func:`sealflow.runtime.brokers
  .broker_from_url`: on RabbitMQ, publisher confirms on) and an in-process ``Worker`` of ``--threads``;
* Sealflow: ``--runs`` runs of a ``--steps``-step no-op workflow submitted at once to a SQLite store, served by
  a runtime on that broker with an in-process worker of ``--threads`` and its serve loop (outbox dispatch,
  sweeps), as ``sealflow worker`` does: every step claimed, executed, committed durably, then sent through
  the broker.

Prints steps per second, the ratio of each to its peer, and RabbitMQ / Redis for both. Every queue used is
fresh and deleted afterwards.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid

URLS = {"redis": "redis://127.0.0.1:6379/0", "amqp": "amqp://guest:guest@127.0.0.1:5672/%2F"}


def _cleanup(url: str, queue: str) -> None:
    """Remove this benchmark's queues (only those) from the broker."""
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"*{queue}*", count=1000))
        if keys:
            client.delete(*keys)
        return
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        for p in ("", ".critical", ".high", ".low"):
            for s in ("", ".DQ", ".XQ"):
                channel.queue_delete(queue + p + s)
    finally:
        conn.close()


def bench_dramatiq(url: str, runs: int, steps: int, threads: int) -> float:
    from sealflow.runtime.brokers import broker_from_url
    from tools.benchmarks.runtime import noop_chain

    queue = "bench_" + uuid.uuid4().hex[:12]
    broker = broker_from_url(url)
    first, done, worker = noop_chain(broker, steps, threads, queue)
    try:
        first.send()  # warm up
        done.acquire()
        started = time.perf_counter()
        for _ in range(runs):
            first.send()
        for _ in range(runs):
            done.acquire()
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
        broker.close()
        _cleanup(url, queue)
    return runs * steps / elapsed


def bench_sealflow(url: str, runs: int, steps: int, threads: int) -> float:
    from sealflow.execution.actions import Registry, action
    from sealflow.runtime.brokers import broker_from_url
    from sealflow.runtime.facade import Runtime
    from tools.benchmarks.runtime import noop_plan

    registry = Registry()

    @action("bench.noop", registry=registry)
    def noop(ctx):
        return None

    plan = noop_plan(steps)
    queue = "bench_" + uuid.uuid4().hex[:12]
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(f"sqlite:///{tmp}/state.db", registry, broker=broker_from_url(url), queue_name=queue,
                     worker_threads=threads)
        serving = threading.Thread(target=rt.serve, args=(stop,), kwargs={"allow_open": True}, daemon=True)
        try:
            rt.start()
            serving.start()
            _wait_all(rt, [rt.submit(plan, {}, initiator="user:bench")])  # warm up
            started = time.perf_counter()
            run_ids = [rt.submit(plan, {}, initiator="user:bench") for _ in range(runs)]
            _wait_all(rt, run_ids)
            elapsed = time.perf_counter() - started
        finally:
            stop.set()
            serving.join(timeout=30)
            rt.close()
            _cleanup(url, queue)
    return runs * steps / elapsed


def _wait_all(rt, run_ids: list[str], timeout: float = 600) -> None:
    pending = set(run_ids)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(pending)} runs not completed in {timeout:.0f} s")
        for run_id in list(pending):
            state = rt.store.get_run(run_id).state
            if state == "completed":
                pending.discard(run_id)
            elif state in ("failed", "cancelled"):
                raise SystemExit(f"run {run_id} ended {state}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--brokers", default="redis,amqp", help="which of redis, amqp (comma-separated)")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    results: dict[str, tuple[float, float]] = {}
    for name in [b.strip() for b in args.brokers.split(",") if b.strip()]:
        url = URLS[name]
        peer = bench_dramatiq(url, args.runs, args.steps, args.threads)
        ours = bench_sealflow(url, args.runs, args.steps, args.threads)
        results[name] = (peer, ours)
        print(f"{name:5s} bare Dramatiq chain: {peer:8.0f} steps/s   sealflow (durable): {ours:8.0f} steps/s   "
              f"ratio {ours / peer:.2f}x")
    if "redis" in results and "amqp" in results:
        print(f"RabbitMQ / Redis: bare chain {results['amqp'][0] / results['redis'][0]:.2f}x, "
              f"sealflow {results['amqp'][1] / results['redis'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
