"""A SIGKILLed worker's fetched-but-unstarted Redis messages go back on the queue once its store heartbeat lapses.

Dramatiq keeps the messages a worker fetched (its prefetch buffer) in a per-worker set in Redis and gives
them back only when that worker's *Redis* heartbeat is a minute old; the sweeper resends them after
``--redeliver-after``. Workers on PostgreSQL now record their Dramatiq broker id with their store heartbeat,
and the others requeue a silent worker's unacknowledged messages (service/liveness.py ``requeue_silent``).
Needs PostgreSQL and Redis at 127.0.0.1 (skipped without them; CI turns skips into failures).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from private_services import stop_process
from worker_helpers import REDIS, redis_or_skip

from sealflow.runtime import liveness
from sealflow.store import open_store
from sealflow.store.capabilities import Capabilities

ROOT = Path(__file__).resolve().parents[3]
E2E = ROOT / "tests" / "e2e"


def wait_until(check, timeout: float, what, poll: float = 0.1):
    """``check()``'s first true value within ``timeout`` s, else fail saying ``what`` (a text, or a callable
    giving it at that moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError(f"{what() if callable(what) else what}: not within {timeout:.0f}s")


class Workers:
    #: the action modules every worker loads
    actions = str(E2E / "crash_actions.py")

    def __init__(self, tmp: Path, store_url: str, redis):
        self.tmp, self.store_url, self.redis = tmp, store_url, redis
        self.queue = "q_" + uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CRASH_") and k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER", "SEALFLOW_STORE")}
        self.env.update({"PYTHONPATH": str(ROOT), "CRASH_EFFECTS_DB": str(tmp / "effects.db"),
                         "CRASH_MARKER": str(tmp / "marker")})
        self.procs: dict[str, subprocess.Popen] = {}
        self.policy = tmp / "access.yaml"
        self.policy.write_text('{"tenants": {"default": {"roles": {"crash": ["crash:write"]}, '
                               '"members": {"user:crash": ["crash"]}}}}')

    def start(self, name: str, *extra: str, env: dict | None = None) -> None:
        args = [sys.executable, "-m", "sealflow", "worker", "--broker", REDIS, "--store", self.store_url,
                "--actions", self.actions, "--queue", self.queue, "--allow-unsigned",
                "--access", str(self.policy), "--redeliver-after", "600", *extra]
        with open(self.tmp / f"{name}.out", "w") as out, open(self.tmp / f"{name}.err", "w") as err:
            self.procs[name] = subprocess.Popen(args, cwd=ROOT, env={**self.env, **(env or {})}, stdout=out,
                                                stderr=err, text=True)
        wait_until(lambda: "worker ready:" in (self.tmp / f"{name}.out").read_text() or self._died(name), 60,
                   f"worker {name} ready")
        assert self.procs[name].poll() is None, self.log(name)

    def _died(self, name: str) -> bool:
        return self.procs[name].poll() is not None

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text()

    def broker_id(self, name: str) -> str:
        return wait_until(lambda: (re.findall(r"dramatiq broker id (\S+)", self.log(name)) or [None])[0], 30,
                          f"worker {name} logs its broker id")

    def submit(self) -> str:
        done = subprocess.run([sys.executable, "-m", "sealflow", "submit", str(E2E / "crash.v1.yaml"), "--store",
                               self.store_url, "--actions", str(E2E / "crash_actions.py"), "--access", str(self.policy),
                               "--as", "user:crash"], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def unacked(self, broker_id: str) -> int:
        keys = list(self.redis.scan_iter(match=f"dramatiq:__acks__.{broker_id}.*", count=1000))
        return sum(self.redis.scard(k) for k in keys)

    def close(self) -> None:
        ids = []
        for name, proc in self.procs.items():
            ids += re.findall(r"dramatiq broker id (\S+)", self.log(name))
            if proc.poll() is None:
                stop_process(proc, signal.SIGTERM, timeout=10)
        keys = list(self.redis.scan_iter(match=f"*{self.queue}*", count=1000))
        for broker_id in ids:
            keys += list(self.redis.scan_iter(match=f"dramatiq:__acks__.{broker_id}.*", count=1000))
            self.redis.zrem("dramatiq:__heartbeats__", broker_id)
        if keys:
            self.redis.delete(*keys)


@pytest.fixture
def workers(tmp_path, pg_schema):
    w = Workers(tmp_path, pg_schema.url(migrate="1"), redis_or_skip())
    yield w
    w.close()


def run_states(pg_schema, run_ids) -> dict[str, str]:
    with pg_schema.connect() as conn:
        return dict(conn.execute("SELECT id, state FROM runs WHERE id = ANY(%s)", (list(run_ids),)).fetchall())


def test_a_killed_workers_fetched_messages_are_requeued_when_its_heartbeat_lapses(workers, pg_schema):
    # Given worker A (one thread, so Dramatiq prefetches two messages) that hangs in the first step it runs
    workers.start("a", "--threads", "1", env={"CRASH_AT": "one:before"})
    a_id = workers.broker_id("a")
    runs = [workers.submit() for _ in range(3)]
    wait_until((workers.tmp / "marker").exists, 60, "worker A starts a step")
    # and holds a second message it fetched but never started (plus the one it runs)
    wait_until(lambda: workers.unacked(a_id) == 2, 30, "worker A holds two fetched messages")
    # and its store heartbeat names its broker id
    with pg_schema.connect() as conn:
        assert conn.execute("SELECT count(*) FROM workers WHERE broker_id = %s", (a_id,)).fetchone()[0] == 1
    # and worker B, with the sweeper's resend put off to 600 s (so only the requeue can move A's messages)
    workers.start("b", "--threads", "2")

    # When A is SIGKILLed
    os.kill(workers.procs["a"].pid, signal.SIGKILL)
    workers.procs["a"].wait(timeout=10)

    # Then within the heartbeat window (15 s of silence), well before Dramatiq's 60 s or the 600 s resend,
    # A's unacknowledged messages are back on the queue and every run completes
    wait_until(lambda: set(run_states(pg_schema, runs).values()) == {"completed"}, 50,
               lambda: f"runs completed (states {run_states(pg_schema, runs)}; B's log {workers.log('b')[-2000:]})",
               poll=0.5)
    assert workers.unacked(a_id) == 0
    assert "requeued them" in workers.log("b")
    # and A's broker id is marked handled, so it is not requeued again
    with pg_schema.connect() as conn:
        assert conn.execute("SELECT count(*) FROM workers WHERE broker_id = %s", (a_id,)).fetchone()[0] == 0


def test_requeue_silent_does_nothing_without_heartbeats_or_redis(tmp_path):
    # Given a SQLite store (no heartbeats) and the embedded broker (no Redis)
    from sealflow.runtime.actors import embedded_broker

    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        # When requeueing silent workers' messages, Then nothing is attempted
        beats = Capabilities.of(store).heartbeats
        assert beats is None
        assert liveness.requeue_silent(beats, embedded_broker(), 15.0) == 0
        assert liveness.requeue_silent(beats, embedded_broker(), None) == 0
        assert liveness.broker_id_of(embedded_broker()) is None
    finally:
        store.close()


def test_silent_brokers_names_lapsed_heartbeats_once(pg_schema):
    # Given two workers that beat with their broker ids, and one that beats without
    store = open_store(pg_schema.url(migrate="1"))
    try:
        store.heartbeat("host:1:a", "broker-a")
        store.heartbeat("host:2:b", "broker-b")
        store.heartbeat("host:3:c")
        store.heartbeat("host:1:a")  # a beat without the id keeps the one recorded
        # When nothing beat for an hour, Then none is silent
        assert store.silent_brokers(3600.0) == []
        # When the limit is below the age of every beat, Then both ids are named (not the worker without one)
        assert store.silent_brokers(-1.0) == [("host:1:a", "broker-a"), ("host:2:b", "broker-b")]
        # When one is handled, Then it is marked once and no longer named
        assert store.forget_broker("host:1:a", "broker-a") is True
        assert store.forget_broker("host:1:a", "broker-a") is False
        assert store.silent_brokers(-1.0) == [("host:2:b", "broker-b")]
    finally:
        store.close()
