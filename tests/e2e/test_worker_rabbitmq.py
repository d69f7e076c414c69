"""`sealflow worker` on a real RabbitMQ broker (`--broker amqp://...`): runs submitted by other processes, a
killed worker, a RabbitMQ that is down at start or killed and restarted.

Given `sealflow worker` processes on one SQLite store and a fresh queue name on the machine's RabbitMQ
(127.0.0.1:5672; only that queue's queues are deleted afterwards), when `sealflow submit` queues runs from
another process, then the workers complete them with every effect applied once. The outage tests start their
own `rabbitmq-server` on a free port (about 3-5 s) and SIGKILL it. Skipped without RabbitMQ or its binary
(CI starts it and turns skips into failures).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from rabbitmq_helpers import (
    RABBITMQ,
    RABBITMQ_SERVER,
    PrivateRabbit,
    delete_queues,
    fresh_queue,
    message_count,
    queue_names,
    rabbitmq_or_skip,
)
from test_priority_redis import critical_runs_first
from test_worker_redis import ALL_ONCE, Deployment, waits_for_the_broker_then_serves

pytestmark = pytest.mark.service


class RabbitDeployment(Deployment):
    """Workers on ``url`` (RabbitMQ) and a queue of this test's own."""

    def __init__(self, tmp_path: Path, url: str = RABBITMQ):
        super().__init__(tmp_path, None, url)
        self.queue = fresh_queue()


@pytest.fixture
def deployment(tmp_path):
    rabbitmq_or_skip().close()
    d = RabbitDeployment(tmp_path)
    yield d
    for name in list(d.workers):
        if d.workers[name].poll() is None:
            d.stop(name)
    d.kill_all()
    delete_queues(rabbitmq_or_skip(), d.queue)


def test_given_a_rabbitmq_worker_when_another_process_submits_runs_then_they_complete_with_effects_once(deployment):
    # Given a worker on RabbitMQ, logging each carried-on step too (--log-level debug)
    deployment.start_worker("a", "--allow-open", "--threads", "3", "--log-level", "debug")
    ready = deployment.wait_ready("a")
    assert ready == (f"worker ready: broker amqp://guest:***@127.0.0.1:5672/%2F, store {deployment.store}, "
                     f"queue {deployment.queue}, 3 threads")
    # When three runs are submitted from other processes
    run_ids = [deployment.submit() for _ in range(3)]
    # Then they complete, every effect once, every step run by this worker (a run's first step taken from
    # the broker, the later ones carried on in the same thread, each claimed by the commit of the one before)
    deployment.wait_completed(run_ids)
    assert deployment.per_step("effects") == {"one": 3, "two": 3, "three": 3}
    assert deployment.per_step("calls") == {"one": 3, "two": 3, "three": 3}
    for run_id in run_ids:
        assert f"run {run_id}: step one attempt 1: handled in" in deployment.log("a")
        assert f"run {run_id}: step done attempt 1: carried on in this thread" in deployment.log("a")
    # and a clean stop leaves no message behind on any of its queues
    assert deployment.stop("a") == 0
    assert "worker stopped" in deployment.log("a")
    assert "Traceback" not in deployment.log("a")
    assert {q: message_count(RABBITMQ, q) for q in queue_names(deployment.queue)[:1]} == {deployment.queue: 0}


def test_given_a_rabbitmq_worker_killed_in_a_step_then_another_worker_finishes_the_run(deployment):
    # Given worker a hangs in step two after its effect, and worker b starts while a holds the step's lease
    deployment.start_worker("a", env={"CRASH_AT": "two:after"})
    deployment.wait_ready("a")
    run_id = deployment.submit()
    deployment.wait_marker("a")  # step two started
    deployment.start_worker("b")
    deployment.wait_ready("b")
    # When a is killed, then RabbitMQ requeues what a held, b ends a's lease and finishes the run
    assert deployment.stop("a", signal.SIGKILL) == -signal.SIGKILL
    deployment.wait_completed([run_id])
    assert deployment.per_step("effects") == ALL_ONCE
    assert deployment.per_step("calls") == {"one": 1, "two": 2, "three": 1}
    assert deployment.stop("b") == 0


def test_given_a_busy_rabbitmq_worker_when_a_critical_run_follows_low_ones_then_it_runs_first(tmp_path):
    # Given a one-thread worker on RabbitMQ busy with a low run, when four low runs and a critical one follow,
    # then the critical run's step is taken first (its own queue, Dramatiq's priority in the worker)
    rabbitmq_or_skip().close()
    queue = fresh_queue()
    try:
        critical_runs_first(tmp_path, RABBITMQ, queue, lambda name: message_count(RABBITMQ, name))
    finally:
        delete_queues(rabbitmq_or_skip(), queue)


@pytest.fixture
def private(tmp_path):
    if RABBITMQ_SERVER is None:
        pytest.skip("no rabbitmq-server binary")
    rabbit = PrivateRabbit(tmp_path / "rabbit")
    d = RabbitDeployment(tmp_path, rabbit.url)
    yield rabbit, d
    d.kill_all()
    rabbit.kill()


def test_given_rabbitmq_down_when_a_worker_starts_then_it_waits_and_logs_and_serves_once_it_is_up(private):
    rabbit, d = private
    # Given no RabbitMQ on the port, when a worker starts and a run is submitted, then it waits, logging, the
    # run queued; when RabbitMQ comes up, then the worker serves and the run completes
    waits_for_the_broker_then_serves(d, rabbit.start, ready_timeout=90)


def test_given_a_serving_worker_when_rabbitmq_is_killed_and_restarted_then_runs_move_within_seconds(private):
    rabbit, d = private
    rabbit.start()
    # Given a worker serving on a private RabbitMQ, with one run completed
    d.start_worker("a")
    d.wait_ready("a")
    first = d.submit()
    d.wait_completed([first])
    # When RabbitMQ is killed, a run is submitted meanwhile, and RabbitMQ comes back
    rabbit.kill()
    run_id = d.submit()
    d.wait_log("a", "lost the broker")
    rabbit.start()
    back = time.monotonic()
    # Then the worker says the broker is back and the run completes well before redeliver_after (60 s)
    d.wait_completed([run_id], timeout=30)
    assert time.monotonic() - back < 30
    d.wait_log("a", f"the broker at {d.url.replace(':guest@', ':***@')} is back; sending again the")
    assert d.workers["a"].poll() is None
    assert d.per_step("effects") == {"one": 2, "two": 2, "three": 2}
