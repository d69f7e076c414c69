"""`sealflow worker` on a real Redis broker: runs submitted by other processes, several workers, a killed worker.

Given `sealflow worker` processes on one SQLite store and one Redis queue (a fresh queue per test; only
its keys are removed afterwards), when `sealflow submit` queues runs from another process, then the
workers pick them up, complete them with every effect applied exactly once, and a worker killed with
SIGKILL in the middle of a step has that step finished by another worker. Needs Redis at 127.0.0.1:6379
(skipped without it; CI starts one and turns skips into failures).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from private_services import stop_process
from worker_helpers import REDIS, redis_or_skip

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKFLOW = HERE / "crash.v1.yaml"
ACTIONS = HERE / "crash_actions.py"
ALL_ONCE = {"one": 1, "two": 1, "three": 1}


class Deployment:
    """Workers (subprocesses) on one store and one queue, and the commands of the test."""

    def __init__(self, tmp_path: Path, redis, url: str = REDIS):
        self.tmp, self.redis, self.url = tmp_path, redis, url
        self.queue = "q_" + uuid.uuid4().hex
        self.store = f"sqlite:///{tmp_path / 'state.db'}"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CRASH_") and k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER", "SEALFLOW_STORE")}
        self.env.update({"PYTHONPATH": str(ROOT), "CRASH_EFFECTS_DB": str(tmp_path / "effects.db"),
                         "CRASH_MARKER": str(tmp_path / "marker"), "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
        self.workers: dict[str, subprocess.Popen] = {}

    def sealflow(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sealflow", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def worker_args(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "sealflow", "worker", "--broker", self.url, "--store", self.store,
                "--actions", str(ACTIONS), "--queue", self.queue, *extra]

    def start_worker(self, name: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
        with open(self.tmp / f"{name}.out", "w") as out, open(self.tmp / f"{name}.err", "w") as err:
            proc = subprocess.Popen(self.worker_args("--allow-unsigned", *(extra or ("--allow-open",))), cwd=ROOT,
                                    env={**self.env, **(env or {})}, stdout=out, stderr=err, text=True)
        self.workers[name] = proc
        return proc

    def log(self, name: str, stream: str = "err") -> str:
        return (self.tmp / f"{name}.{stream}").read_text()

    def wait_ready(self, name: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = [line for line in self.log(name, "out").splitlines() if line.startswith("worker ready:")]
            if ready:
                return ready[0]
            if self.workers[name].poll() is not None:
                raise AssertionError(f"worker {name} exited with {self.workers[name].returncode}: {self.log(name)}")
            time.sleep(0.05)
        raise AssertionError(f"worker {name} never said it was ready: {self.log(name)}")

    def submit(self, *extra: str) -> str:
        done = self.sealflow("submit", str(WORKFLOW), "--store", self.store, "--actions", str(ACTIONS), *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def run_states(self, run_ids) -> dict[str, str]:
        from sealflow.store import NotFound, open_store

        store = open_store(self.store)
        try:
            states = {}
            for run_id in run_ids:
                try:
                    states[run_id] = store.get_run(run_id).state
                except NotFound:
                    pass
            return states
        finally:
            store.close()

    def wait_completed(self, run_ids, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.run_states(run_ids)
            if len(states) == len(run_ids) and set(states.values()) == {"completed"}:
                return
            time.sleep(0.1)
        logs = {name: self.log(name)[-3000:] for name in self.workers}
        raise AssertionError(f"runs not completed in {timeout:.0f}s: {self.run_states(run_ids)}; logs: {logs}")

    def table(self, name: str) -> list[tuple]:
        conn = sqlite3.connect(self.env["CRASH_EFFECTS_DB"], timeout=10)
        try:
            return conn.execute(f"SELECT step, key FROM {name}").fetchall()
        finally:
            conn.close()

    def per_step(self, name: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for step, _ in self.table(name):
            counts[step] = counts.get(step, 0) + 1
        return counts

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        proc = self.workers[name]
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout=timeout)

    def wait_log(self, name: str, text: str, timeout: float = 60) -> None:
        """Waits (bounded) for ``text`` in worker ``name``'s log, failing if the worker exits first."""
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            assert self.workers[name].poll() is None, \
                f"worker exited {self.workers[name].returncode}: {self.log(name)[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} in the log: {self.log(name)[-3000:]}"
            time.sleep(0.05)

    def wait_marker(self, name: str, timeout: float = 60) -> Path:
        """Waits (bounded) for the crash marker worker ``name`` writes when it reaches its ``CRASH_AT``."""
        marker = Path(self.env["CRASH_MARKER"])
        deadline = time.monotonic() + timeout
        while not marker.exists():
            assert time.monotonic() < deadline, f"the crash point was never reached: {self.log(name)[-3000:]}"
            time.sleep(0.05)
        return marker

    def kill_all(self) -> None:
        """SIGKILLs every worker still running (a broker of the test's own: nothing to clean there)."""
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                stop_process(proc, signal.SIGTERM, timeout=10)
        # only this test's keys: its queue (with its acks), and the heartbeats of its workers
        keys = list(self.redis.scan_iter(match=f"*{self.queue}*", count=1000))
        if keys:
            self.redis.delete(*keys)
        for name in self.workers:
            for broker_id in re.findall(r"dramatiq broker id (\S+)", self.log(name)):
                self.redis.zrem("dramatiq:__heartbeats__", broker_id)


def waits_for_the_broker_then_serves(d: Deployment, start_broker, ready_timeout: float) -> None:
    """With no broker at ``d.url``: a worker started and a run submitted, then the worker keeps running (not
    exited 2), saying it cannot reach the broker, the run queued; once ``start_broker()`` brings the broker up,
    the worker serves (within ``ready_timeout`` s) and the run completes, the log telling of the retries."""
    # Given no broker on the port, when a worker starts and a run is submitted
    d.start_worker("a")
    d.wait_log("a", "cannot reach the broker")
    run_id = d.submit()
    time.sleep(0.5)
    # Then it is still running (not exited 2) and the run waits, queued
    assert d.workers["a"].poll() is None and "worker ready" not in d.log("a", "out")
    assert d.run_states([run_id]) == {run_id: "queued"}
    # When the broker comes up, then the worker serves and the run completes
    start_broker()
    d.wait_ready("a", timeout=ready_timeout)
    d.wait_completed([run_id], timeout=60)
    assert "retrying in" in d.log("a")


@pytest.fixture
def deployment(tmp_path):
    d = Deployment(tmp_path, redis_or_skip())
    yield d
    d.close()


def log_time(line: str) -> float:
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_given_a_worker_when_another_process_submits_a_run_then_it_completes_with_effects_once(deployment):
    deployment.start_worker("a", "--allow-open", "--log-level", "debug")  # (debug: each carried-on step too)
    ready = deployment.wait_ready("a")
    assert ready == f"worker ready: broker {REDIS}, store {deployment.store}, queue {deployment.queue}, 32 threads"

    run_id = deployment.submit()
    submitted = time.time()
    deadline = time.monotonic() + 60
    while True:
        status = deployment.sealflow("status", run_id, "--store", deployment.store, "--json")
        detail = json.loads(status.stdout)
        if detail["state"] == "completed" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status.returncode == 0 and detail["state"] == "completed", detail
    assert [s["id"] for s in detail["steps"]] == ["one", "two", "three", "done"]
    assert deployment.per_step("effects") == ALL_ONCE and deployment.per_step("calls") == ALL_ONCE

    # picked up from the outbox by the worker's serve loop (0.2 s polls; the bound is loose for loaded CI hosts)
    started = next(line for line in deployment.log("a").splitlines() if f"run {run_id}: step one attempt 1: started"
                   in line)
    assert log_time(started) - submitted < 5.0
    # the later steps carried on in the same thread (each claimed by the commit of the one before), logged too
    # at debug level
    assert f"run {run_id}: step done attempt 1: carried on in this thread" in deployment.log("a")

    assert deployment.stop("a") == 0
    assert "worker stopped" in deployment.log("a")
    assert list(deployment.redis.scan_iter(match=f"*{deployment.queue}*")) == []  # a clean stop leaves nothing


def test_given_two_workers_under_a_policy_when_ten_runs_are_submitted_then_all_complete_with_effects_once(deployment):
    policy = deployment.tmp / "access.yaml"
    policy.write_text(json.dumps({"tenants": {"default": {"roles": {"crash": ["crash:write"]},
                                                          "members": {"user:ana": ["crash"]}}}}))
    for name in ("a", "b"):
        deployment.start_worker(name, "--access", str(policy), "--threads", "3", "--log-level", "debug")
    for name in ("a", "b"):
        deployment.wait_ready(name)

    submits = [subprocess.Popen([sys.executable, "-m", "sealflow", "submit", str(WORKFLOW), "--store", deployment.store,
                                 "--actions", str(ACTIONS), "--as", "user:ana", "--access", str(policy)],
                                cwd=ROOT, env=deployment.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(10)]
    run_ids = []
    for proc in submits:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
        run_ids.append(out.strip())
    assert len(set(run_ids)) == 10

    deployment.wait_completed(run_ids)
    assert deployment.per_step("effects") == {"one": 10, "two": 10, "three": 10}
    calls = deployment.table("calls")
    assert len(calls) == 30 and len({key for _, key in calls}) == 30  # no action was called twice
    # every step is logged: a message's first (started), the rest carried on in its thread
    ran = {name: deployment.log(name).count(": started") + deployment.log(name).count(": carried on in this thread")
           for name in ("a", "b")}
    # 10 runs x 4 steps, each once, by the two workers together (which of them takes how many is timing: a
    # worker prefetches several messages and carries each run on in its thread, so one may take them all)
    assert sum(ran.values()) == 40, ran
    assert deployment.stop("a") == 0 and deployment.stop("b") == 0


@pytest.fixture(params=["sqlite", "postgres"])
def any_store_deployment(request, tmp_path):
    """A deployment on SQLite, or on a PostgreSQL schema of its own (the shared test server)."""
    d = Deployment(tmp_path, redis_or_skip())
    schema = None
    if request.param == "postgres":
        sys.path.insert(0, str(ROOT / "tests" / "interpreter"))
        import pg_helpers

        schema = pg_helpers.Schema()
        d.store = schema.url(migrate="1")
        policy = tmp_path / "access.yaml"  # a shared store refuses open development mode
        policy.write_text(json.dumps({"tenants": {"default": {"roles": {"crash": ["crash:write"]},
                                                              "members": {"user:ana": ["crash"]}}}}))
        d.env.update(SEALFLOW_ACCESS=str(policy), SEALFLOW_USER="ana")
    yield d
    d.close()
    if schema is not None:
        schema.drop()


def test_given_a_worker_killed_in_the_middle_of_a_step_then_another_worker_finishes_the_run(any_store_deployment):
    # Given a workflow with no retry class (a lost attempt is not a failed try: it runs again), on each store
    deployment = any_store_deployment
    # worker a hangs in step two after its effect; worker b starts while a holds the step's lease
    deployment.start_worker("a", env={"CRASH_AT": "two:after"})
    deployment.wait_ready("a")
    run_id = deployment.submit()
    marker = deployment.wait_marker("a")  # step two started
    assert int(marker.read_text()) == deployment.workers["a"].pid
    deployment.start_worker("b")
    deployment.wait_ready("b")

    assert deployment.stop("a", signal.SIGKILL) == -signal.SIGKILL
    # b ends the dead worker's lease (same machine: at once; elsewhere: at lease expiry) and reruns step two
    deployment.wait_completed([run_id])
    assert deployment.per_step("effects") == ALL_ONCE
    assert deployment.per_step("calls") == {"one": 1, "two": 2, "three": 1}  # the killed attempt, and b's
    assert f"run {run_id}: step two attempt 1: started" in deployment.log("b")
    assert deployment.stop("b") == 0


def test_given_a_step_outlasting_the_grace_when_a_worker_is_stopped_then_it_abandons_it_to_another(deployment):
    deployment.start_worker("a", "--allow-open", "--grace", "1", env={"CRASH_AT": "three:before"})
    deployment.wait_ready("a")
    run_id = deployment.submit()
    marker = Path(deployment.env["CRASH_MARKER"])
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, f"step three never started: {deployment.log('a')}"
        time.sleep(0.05)
    deployment.start_worker("b")
    deployment.wait_ready("b")

    stopping = time.monotonic()
    assert deployment.stop("a", signal.SIGTERM) == 0
    assert time.monotonic() - stopping < 15
    assert f"run {run_id}: step three attempt 1: abandoned" in deployment.log("a")
    deployment.wait_completed([run_id])
    assert deployment.per_step("effects") == ALL_ONCE
    assert deployment.per_step("calls") == {"one": 1, "two": 1, "three": 2}
    assert deployment.stop("b") == 0


def test_given_a_worker_without_allow_unsigned_when_an_unsigned_run_arrives_then_it_refuses_to_execute_it(
        deployment):
    with open(deployment.tmp / "strict.out", "w") as out, open(deployment.tmp / "strict.err", "w") as err:
        proc = subprocess.Popen(deployment.worker_args("--allow-open"), cwd=ROOT, env=deployment.env, stdout=out,
                                stderr=err, text=True)
    deployment.workers["strict"] = proc
    deployment.wait_ready("strict")
    run_id = deployment.submit()
    deadline = time.monotonic() + 60
    while deployment.run_states([run_id]).get(run_id) not in ("failed",) and time.monotonic() < deadline:
        time.sleep(0.1)
    status = json.loads(deployment.sealflow("status", run_id, "--store", deployment.store, "--json").stdout)
    assert status["state"] == "failed" and status["error"]["class"] == "unauthorized", status
    assert "unsigned definition" in status["error"]["message"]
    assert not Path(deployment.env["CRASH_EFFECTS_DB"]).exists()  # the action never ran: no effect, no call


def test_given_no_access_policy_when_a_worker_starts_then_it_refuses(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SEALFLOW_ACCESS", "SEALFLOW_BROKER")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "sealflow", "worker", "--broker", REDIS, "--store",
                           f"sqlite:///{tmp_path / 'state.db'}", "--queue", "q_" + uuid.uuid4().hex], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sealflow worker refuses to start without an access policy" in done.stderr
    assert "--access FILE" in done.stderr and "worker ready" not in done.stdout
    assert "OPEN DEVELOPMENT MODE" not in done.stderr  # refused: no warning that it would run in open mode


@pytest.mark.parametrize("url, says", [("http://127.0.0.1:6379/0", "the scheme 'http://' is not a broker's"),
                                       ("redis://127.0.0.1:notaport/0", "error: --broker redis://127.0.0.1:notaport/0"),
                                       ("redis://127.0.0.1:6379/x", "the Redis database 'x' is not a number"),
                                       ("redis://127.0.0.1:6379/?db=1x", "the Redis database '1x' is not a number")])
def test_given_a_bad_broker_url_when_a_worker_starts_then_it_is_a_usage_error(tmp_path, url, says):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "sealflow", "worker", "--broker", url, "--allow-open", "--store",
                           f"sqlite:///{tmp_path / 'state.db'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "worker ready" not in done.stdout


@pytest.mark.parametrize("url, shown", [("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
                                        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
                                        ("rediss://app:s3cret@cache/1", "rediss://app:***@cache/1"),
                                        ("unix:///run/redis.sock?db=0&password=s3cret",
                                         "unix:///run/redis.sock?db=0&password=***")])
def test_given_a_broker_url_with_a_password_when_shown_then_the_password_is_hidden(url, shown):
    from sealflow.cli.commands.worker import redact

    assert redact(url) == shown


def test_given_forged_and_garbage_messages_on_its_queue_when_a_worker_meets_them_then_it_refuses_each_in_a_line(
        deployment):
    # Given a worker, and messages on its queue that are no step messages of a run: wrong types, a huge id, too
    # few arguments, keyword arguments, an actor it does not have, bytes that are no message at all
    from dramatiq import Message
    from dramatiq.brokers.redis import RedisBroker

    deployment.start_worker("a", "--allow-open")
    deployment.wait_ready("a")
    sender = RedisBroker(url=deployment.url)
    forged = [((123, None, "x", "y", None), {}), (("r" * 100_000, "one", 1, 5, "default"), {}), (("run_x",), {}),
              ((), {"evil": 1})]
    try:
        for args, kwargs in forged:
            sender.enqueue(Message(queue_name=deployment.queue, actor_name="sealflow_step", args=args, kwargs=kwargs,
                                   options={}))
        sender.enqueue(Message(queue_name=deployment.queue, actor_name="os_system", args=("id",), kwargs={},
                               options={}))
        deployment.redis.hset(f"dramatiq:{deployment.queue}.msgs", "garbage", "{not json")
        deployment.redis.rpush(f"dramatiq:{deployment.queue}", "garbage")
        # When it meets them, and then a genuine run is submitted
        deployment.wait_log("a", "failed to decode message '{not json'")
        run_id = deployment.submit()
        deployment.wait_completed([run_id])
    finally:
        sender.close()
    # Then each forged step message is refused in one bounded line saying what is wrong, nothing ran for them,
    # Dramatiq's own refusals say why without a traceback, the worker stayed up and ran the genuine run
    log = deployment.log("a")
    refusals = [line for line in log.splitlines() if "refused a malformed step message" in line]
    assert len(refusals) == len(forged) and all(len(line) < 500 for line in refusals), refusals
    assert any("run_id is int 123, not an id" in line for line in refusals)
    assert any("run_id is text of 100000 characters" in line for line in refusals)
    assert "undefined actor 'os_system'" in log and "Traceback" not in log, log[-3000:]
    assert deployment.per_step("effects") == ALL_ONCE
    assert deployment.stop("a") == 0
