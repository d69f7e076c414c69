"""Units of the interpreter: state tables, retry delays, the timed runner, fingerprints, clocks."""

from __future__ import annotations

import random
import threading
import time

import pytest
from interp_helpers import retry

from sealflow.core import states
from sealflow.core.clock import FakeClock
from sealflow.core.fingerprints import fingerprint, normalise
from sealflow.core.retry import backoff_ms, delay_seconds, should_retry
from sealflow.execution.timeouts import AttemptRunner, AttemptTimedOut

# -- states ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("before, after", [("created", "queued"), ("queued", "running"), ("running", "waiting"),
                                           ("waiting", "running"), ("running", "completed"), ("running", "failed"),
                                           ("running", "cancelling"), ("cancelling", "cancelled"),
                                           ("failed", "queued"), ("failed", "quarantined"), ("waiting", "timed_out")])
def test_legal_run_transitions(before, after):
    assert states.run_can(before, after)


@pytest.mark.parametrize("before, after", [("completed", "running"), ("completed", "cancelled"),
                                           ("queued", "completed"), ("cancelled", "queued"), ("quarantined", "queued"),
                                           ("created", "running")])
def test_illegal_run_transitions(before, after):
    assert not states.run_can(before, after)


@pytest.mark.parametrize("before, after", [("pending", "scheduled"), ("scheduled", "running"), ("running", "succeeded"),
                                           ("running", "retry_wait"), ("retry_wait", "scheduled"),
                                           ("running", "waiting"), ("waiting", "running"), ("waiting", "succeeded"),
                                           ("waiting", "failed"), ("running", "scheduled"), ("pending", "waiting")])
def test_legal_step_transitions(before, after):
    assert states.step_can(before, after)


@pytest.mark.parametrize("before, after", [("succeeded", "running"), ("failed", "scheduled"),
                                           ("scheduled", "succeeded"), ("skipped", "running"), ("pending", "running"),
                                           ("timed_out", "succeeded")])
def test_illegal_step_transitions(before, after):
    assert not states.step_can(before, after)


def test_final_states_have_no_way_out_but_redrive():
    for state in ("cancelled", "quarantined"):
        assert states.RUN_TRANSITIONS[state] == frozenset()
    # completed: only a fan-out child whose parent step failed, to undo its steps (the store refuses it otherwise)
    assert states.RUN_TRANSITIONS["completed"] == frozenset({"compensating"})
    for state in states.STEP_FINAL:
        assert states.STEP_TRANSITIONS[state] == frozenset()


# -- retry -------------------------------------------------------------------------------------------

def test_backoff_is_exponential_and_capped():
    policy = retry("network", initial_ms=200, factor=2, max_ms=1000, jitter="none", max_attempts=10)
    assert [backoff_ms(policy, n) for n in range(1, 6)] == [200, 400, 800, 1000, 1000]


def test_jitter_full_and_equal_stay_within_their_bounds():
    rng = random.Random(1)
    full = retry("network", initial_ms=1000, jitter="full")
    equal = retry("network", initial_ms=1000, jitter="equal")
    fulls = [backoff_ms(full, 1, rng) for _ in range(200)]
    equals = [backoff_ms(equal, 1, rng) for _ in range(200)]
    assert min(fulls) >= 0 and max(fulls) <= 1000 and min(fulls) < 200
    assert min(equals) >= 500 and max(equals) <= 1000


def test_retry_after_is_a_minimum():
    policy = retry("rate_limited", initial_ms=1000, jitter="none")
    assert delay_seconds(policy, 1, retry_after=5.0) == 5.0
    assert delay_seconds(policy, 1, retry_after=0.1) == 1.0


def test_only_listed_retryable_classes_with_attempts_left_are_retried():
    policy = retry("network", "invalid_request", max_attempts=3)
    assert should_retry(policy, "network", 1) and should_retry(policy, "network", 2)
    assert not should_retry(policy, "network", 3)
    assert not should_retry(policy, "invalid_request", 1)  # never retryable, whatever the policy says
    assert not should_retry(policy, "timeout", 1)  # not listed


# -- the timed runner --------------------------------------------------------------------------------

def test_the_runner_returns_results_and_reraises_errors():
    runner = AttemptRunner()
    try:
        assert runner.run(lambda: 42, 1.0) == 42
        with pytest.raises(KeyError):
            runner.run(lambda: {}["x"], 1.0)
    finally:
        runner.close()


def test_the_runner_abandons_a_blocked_call_and_stays_usable():
    runner = AttemptRunner()
    gate = threading.Event()
    try:
        job = runner.submit(lambda: gate.wait(5) and "late")
        started = time.monotonic()
        with pytest.raises(AttemptTimedOut):
            runner.wait(job, 0.1)
        assert time.monotonic() - started < 1 and job.abandoned
        assert runner.run(lambda: "next", 1.0) == "next"  # another thread serves meanwhile
        gate.set()
    finally:
        runner.close()


# -- fingerprints and clocks -------------------------------------------------------------------------

def test_fingerprints_ignore_volatile_parts_of_messages():
    a = fingerprint("call", "unavailable", "CRM 503 at 12:00:01 for request 7f3a9c2e11aa44bb")
    b = fingerprint("call", "unavailable", "CRM 503 at 13:30:59 for request 0011223344556677")
    c = fingerprint("call", "unavailable", "CRM refused the login")
    assert a == b != c
    assert fingerprint("other", "unavailable", "CRM refused the login") != c
    assert normalise("User 'ana' has 3 items") == "user <q> has <n> items"


def test_the_fake_clock_moves_only_when_told():
    clock = FakeClock(100.0)
    assert clock.now() == 100.0
    clock.sleep(2.5)
    assert clock.advance(1) == 103.5 == clock.now()
