"""Benchmark: Sealflow on many machines' pieces (PostgreSQL + Redis, worker processes) next to a bare Dramatiq chain.

    python -m tools.benchmarks.distributed [--runs 1000] [--steps 10] [--latency-runs 50]

In one run, on this machine's PostgreSQL (127.0.0.1:5432, user postgres) and Redis (127.0.0.1:6379):

* **Sealflow distributed**: a fresh database (created here, dropped at the end), a unique queue, ``--workers``
  ``sealflow worker`` processes of ``--sealflow-threads`` threads (32, the worker's default: a worker thread
  waits for the store between steps, so more of them keep a process busy; 8 is the bare chain's count).
  ``--runs`` runs of a ``--steps``-step workflow of no-op actions are submitted from ``--submitters`` threads
  of this process (as ``sealflow submit`` does: the run and its outbox row; the workers dispatch them, woken
  by LISTEN/NOTIFY), and timed from the first submit to the last run completed.
* **Bare Dramatiq chain** (the peer): ``--steps`` no-op actors, each sending the next, on a unique Redis
  namespace, Dramatiq's own ``RedisBroker`` with the same middleware as Sealflow's broker (``Retries`` at zero;
  not Sealflow's waking consumers), in ``python -m dramatiq`` with ``--workers``
  processes of ``--threads`` threads; ``--runs`` chains sent from this process, timed the same way.
* **Latency**: ``--latency-runs`` single runs one after the other on each side: the median time from submit
  (send) to completed (the store's ``created_at`` to ``updated_at``; the chain's last actor's clock).
* **Embedded** (:mod:`tools.benchmarks.runtime`, SQLite + ``StubBroker`` in this process): steps/s of
  ``--runs`` 10-step runs next to the in-process bare chain, and the per-step cost of one ``--long-steps``-step
  run next to a 10-step run's.

Prints steps/s, the p50 latencies and the ratios (aims of issue 11: distributed >= 0.6x, p50 latency <= 1.5x,
embedded >= 0.5x, long-run per-step cost within 1.2x); the embedded comparison takes ``--rounds`` alternating
turns of each side and gives the median ratio (either side's speed moves from minute to minute here). The
workers' logs are kept in a temporary directory shown on a failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PEER = "tools.benchmarks.distributed_peer"
# (the run states: sealflow.core.states, imported when the benchmark runs)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
    env.pop("SEALFLOW_CONFIG", None)
    return env


@contextmanager
def processes(cmds: list[list[str]], env: dict[str, str], logs: Path, name: str,
              ready: str | None = None) -> Iterator[list[subprocess.Popen]]:
    """Start ``cmds`` (stderr to ``logs/name-N.log``); with ``ready``, wait for that line on each's stdout.
    SIGTERM and wait for each at the end."""
    procs: list[subprocess.Popen] = []
    try:
        for i, cmd in enumerate(cmds):
            err = open(logs / f"{name}-{i}.log", "wb")  # noqa: SIM115 - closed with the process below
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE if ready else err,
                                          stderr=err, start_new_session=True))
            err.close()
        for p in procs:
            if ready is not None:
                line = p.stdout.readline().decode() if p.stdout else ""
                if ready not in line:
                    raise RuntimeError(f"{name} did not start (see {logs}): {line!r}")
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new PostgreSQL database on 127.0.0.1:5432 (dropped at the end); yields its URL."""
    import psycopg

    name = "sealflow_bench_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_keys(client, *patterns: str) -> None:
    for pattern in patterns:
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)


def _wait(what: str, done, timeout: float, every: float = 0.02) -> None:
    stop_at = time.monotonic() + timeout
    while not done():
        if time.monotonic() > stop_at:
            raise RuntimeError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(every)


def tree_cpu(procs: list[subprocess.Popen]) -> float:
    """CPU seconds (user + system) used so far by ``procs`` and every process below them (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    todo, total = [p.pid for p in procs], 0.0
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # ended meanwhile
            continue
    return total


def bench_sealflow(args, logs: Path) -> tuple[float, list[float], float]:
    """Steps/s of ``args.runs`` runs and the latencies of ``args.latency_runs`` single runs (seconds)."""
    import psycopg
    import redis

    from sealflow.core import states
    from sealflow.execution.actions import REGISTRY
    from sealflow.runtime.actors import redis_broker
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store
    from tools.benchmarks.runtime import noop_plan

    __import__(PEER)  # bench.noop, for the submitter's registry (the workers import it themselves)
    plan = noop_plan(args.steps)
    queue = "bench_" + uuid.uuid4().hex[:12]
    with fresh_database() as url:
        open_store(url, migrate=True).close()
        cmd = [sys.executable, "-m", "sealflow", "worker", "--broker", args.redis, "--store", url, "--actions", PEER,
               "--allow-open", "--allow-unsigned", "--threads", str(args.sealflow_threads), "--queue", queue]
        broker = redis_broker(args.redis)
        rt = Runtime(url, REGISTRY, broker=broker, queue_name=queue)
        try:
            with processes([cmd] * args.workers, _env(), logs, "sealflow-worker", ready="worker ready") as procs, \
                    psycopg.connect(url, autocommit=True) as db:
                final = tuple(sorted(states.RUN_FINAL))
                active = tuple(sorted(set(states.RUN_STATES) - states.RUN_FINAL))

                def unfinished() -> int:
                    # the runs not final yet, read from the state index (a count of every run, 50 times a second,
                    # would load the database under test more than the bare chain's LLEN loads Redis)
                    return db.execute(f"SELECT count(*) FROM runs WHERE state IN {active!r}").fetchone()[0]

                def failed() -> None:
                    got = db.execute(f"SELECT count(*) FROM runs WHERE state IN {final!r} AND state <> 'completed'"
                                     ).fetchone()[0]
                    if got:
                        raise RuntimeError(f"{got} runs ended otherwise than completed (see {logs})")

                def one() -> float:
                    run_id = rt.submit(plan, {}, initiator="user:bench")
                    _wait("a single run", lambda: rt.store.get_run(run_id).state in states.RUN_FINAL, 60,
                          every=0.002)
                    run = rt.store.get_run(run_id)
                    if run.state != "completed":
                        raise RuntimeError(f"run {run_id} ended {run.state} (see {logs})")
                    return run.updated_at - run.created_at

                one()  # warm up: both workers' plan caches, connections
                cpu = tree_cpu(procs)
                started = time.perf_counter()
                with ThreadPoolExecutor(args.submitters) as pool:  # as several clients would
                    list(pool.map(lambda _: rt.submit(plan, {}, initiator="user:bench"), range(args.runs)))
                submitted = time.perf_counter() - started
                _wait(f"{args.runs} runs", lambda: unfinished() == 0, args.timeout)
                failed()
                elapsed = time.perf_counter() - started
                cpu = tree_cpu(procs) - cpu  # the workers', over the timed runs
                latencies = [one() for _ in range(args.latency_runs)]
        finally:
            rt.close(grace=0)
            _drop_keys(redis.Redis.from_url(args.redis), f"dramatiq:*{queue}*")
    print(f"  (sealflow: {args.runs} submits took {submitted:.2f} s of the {elapsed:.2f} s)")
    return args.runs * args.steps / elapsed, latencies, cpu / (args.runs * args.steps)


def bench_chain(args, logs: Path) -> tuple[float, list[float], float]:
    """The same for the bare Dramatiq chain."""
    import redis

    from sealflow.runtime.actors import redis_broker
    from tools.benchmarks.distributed_peer import chain

    ns = "bench_" + uuid.uuid4().hex[:12]
    client = redis.Redis.from_url(args.redis)
    broker = redis_broker(args.redis, namespace=ns, waking=False)
    actors = chain(broker, args.steps, ns)
    done_key = f"{ns}:done"
    cmd = [sys.executable, "-m", "dramatiq", PEER, "--processes", str(args.workers), "--threads", str(args.threads)]
    env = _env(BENCH_PEER_NAMESPACE=ns, BENCH_PEER_REDIS=args.redis, BENCH_PEER_STEPS=str(args.steps))
    try:
        with processes([cmd], env, logs, "dramatiq") as procs:
            def one() -> float:
                actors[0].send(-1, time.time())
                got = client.blpop([done_key], timeout=60)
                if got is None:
                    raise RuntimeError(f"the bare chain did not finish in 60 s (see {logs})")
                return json.loads(got[1])[1]

            one()  # warm up (and wait until the workers are up)
            cpu = tree_cpu(procs)
            started = time.perf_counter()
            for i in range(args.runs):
                actors[0].send(i, time.time())
            _wait(f"{args.runs} chains", lambda: client.llen(done_key) >= args.runs, args.timeout)
            elapsed = time.perf_counter() - started
            cpu = tree_cpu(procs) - cpu  # the worker processes' (and Dramatiq's main process), over the timed runs
            client.delete(done_key)
            latencies = [one() for _ in range(args.latency_runs)]
    finally:
        broker.close()
        _drop_keys(client, f"{ns}:*")
    return args.runs * args.steps / elapsed, latencies, cpu / (args.runs * args.steps)


def bench_embedded(runs: int, long_steps: int, rounds: int = 3) -> tuple[list[tuple[float, float]], float, float,
                                                                         float, float]:
    """([(bare in-process chain steps/s, embedded 10-step steps/s)] for each of ``rounds`` alternating turns,
    10-step again, the long run's steps/s, and the last two again with each step taking the previous one's
    output)."""
    from tools.benchmarks.runtime import bench_dramatiq
    from tools.benchmarks.runtime import bench_sealflow as embedded

    turns = [(bench_dramatiq(runs, 10), embedded(runs, 10)[0]) for _ in range(rounds)]
    long_run, _ = embedded(1, long_steps)
    short_again, _ = embedded(max(runs // 10, 10), 10)  # the 10-step figure next to the long run's, in turn
    long_chained, _ = embedded(1, long_steps, chained=True)
    short_chained, _ = embedded(max(runs // 10, 10), 10, chained=True)
    return turns, short_again, long_run, short_chained, long_chained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency-runs", type=int, default=50)
    parser.add_argument("--long-steps", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes on each side")
    parser.add_argument("--threads", type=int, default=8, help="threads per bare Dramatiq worker process")
    parser.add_argument("--sealflow-threads", type=int, default=32,
                        help="threads per `sealflow worker` process (its --threads; 32 is its default: a thread "
                             "waits for the store between steps, so a worker keeps more of them busy than a bare "
                             "chain needs)")
    parser.add_argument("--submitters", type=int, default=4, help="threads submitting Sealflow's runs")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--only", choices=("distributed", "embedded"), default=None)
    parser.add_argument("--rounds", type=int, default=3, help="alternating turns of the embedded comparison")
    args = parser.parse_args(argv)
    for name in ("runs", "steps", "latency_runs", "long_steps", "workers", "threads", "sealflow_threads",
                 "submitters", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    logging.disable(logging.WARNING)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="sealflow-bench-") as tmp:
        logs = Path(tmp)
        if args.only != "embedded":
            peer, peer_lat, peer_cpu = bench_chain(args, logs)
            ours, our_lat, our_cpu = bench_sealflow(args, logs)
            p50_peer, p50_ours = statistics.median(peer_lat), statistics.median(our_lat)
            print(f"distributed, {args.runs} runs x {args.steps} no-op steps, {args.workers} processes each side "
                  f"(bare chain: {args.threads} threads each; sealflow worker --threads {args.sealflow_threads}):")
            print(f"  bare Dramatiq chain (Redis):         {peer:8.0f} steps/s   p50 latency {p50_peer * 1000:7.1f} ms")
            print(f"  sealflow (PostgreSQL + Redis):       {ours:8.0f} steps/s   p50 latency {p50_ours * 1000:7.1f} ms")
            print(f"  ratio: throughput {ours / peer:.2f}x (aim >= 0.6x), p50 latency {p50_ours / p50_peer:.2f}x "
                  "(aim <= 1.5x)")
            print(f"  workers' CPU per step (the worker processes only, not PostgreSQL or Redis): bare chain "
                  f"{peer_cpu * 1000:.3f} ms, sealflow {our_cpu * 1000:.3f} ms")
    if args.only != "distributed":
        turns, short_again, long_run, short_chained, long_chained = bench_embedded(args.runs, args.long_steps,
                                                                                   args.rounds)
        print(f"embedded (SQLite + StubBroker, one process; {args.rounds} alternating turns):")
        for peer, ours in turns:
            print(f"  bare Dramatiq chain (StubBroker): {peer:8.0f} steps/s; sealflow embedded: {ours:8.0f} steps/s; "
                  f"ratio {ours / peer:.2f}x")
        ratio = statistics.median(ours / peer for peer, ours in turns)
        print(f"  ratio, median of the turns: {ratio:.2f}x (aim >= 0.5x)")
        print(f"  per step: 10-step runs {1000 / short_again:.3f} ms, one {args.long_steps}-step run "
              f"{1000 / long_run:.3f} ms: {short_again / long_run:.2f}x (aim <= 1.2x)")
        print(f"  the same, each step taking the previous one's output: {1000 / short_chained:.3f} ms, "
              f"{1000 / long_chained:.3f} ms: {short_chained / long_chained:.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
