"""Process isolation: an attempt in a child process; a timeout kills it, a crash ends only the attempt."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import ConfigError, StepError
from sealflow.execution import isolation
from sealflow.execution.actions import ActionRegistrationError, action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


def one_step(name: str, **fields):
    return make_plan(S("one", "action", action=name, **fields), output="${{ steps.one.output }}")


def test_an_isolated_action_runs_in_a_child_and_its_result_and_failures_come_back(runtime, registry):
    # Given actions registered with process isolation
    @action("t.pid", registry=registry, isolation="process")
    def pid(ctx, n):
        return {"pid": os.getpid(), "n": n + 1}

    @action("t.limited", registry=registry, isolation="process")
    def limited(ctx):
        raise StepError("rate_limited", "slow down", retry_after=3.0)

    # When they run
    ok = runtime.run(one_step("t.pid", args={"n": 1}), {}, initiator="u")
    failed = runtime.run(one_step("t.limited"), {}, initiator="u")
    # Then the result came from another process, and a failure kept its class and message
    assert ok.state == "completed" and ok.output["n"] == 2 and ok.output["pid"] != os.getpid()
    assert failed.state == "failed" and failed.error == ("rate_limited", "slow down")


def test_the_step_chooses_over_the_registration(runtime, registry):
    # Given an action registered for process isolation, and a step that asks for a thread
    @action("t.pid", registry=registry, isolation="process")
    def pid(ctx):
        return os.getpid()

    # When each runs, Then the step's choice wins
    assert runtime.run(one_step("t.pid", isolation="thread"), {}, initiator="u").output == os.getpid()
    assert runtime.run(one_step("t.pid"), {}, initiator="u").output != os.getpid()


def test_a_crash_in_the_child_ends_only_the_attempt_and_the_same_try_runs_again(runtime, registry):
    # Given an isolated action that SIGKILLs its own process on its first execution only, and no retry class
    @action("t.pill", registry=registry)
    def pill(ctx):
        if ctx.fence == 1 << 20:  # attempt 1, never lost: the first execution
            os.kill(os.getpid(), signal.SIGKILL)
        return "survived"

    plan = one_step("t.pill", isolation="process")
    # When it runs
    status = runtime.run(plan, {}, initiator="u")
    # Then the worker lived on, the crashed attempt is recorded with what was seen, and the same try ran again
    assert status.state == "completed" and status.output == "survived"
    first, second = status.attempts
    assert first.error_class == "worker_lost" and "killed by signal SIGKILL" in first.error_message
    assert (first.try_no, second.try_no, second.state) == (1, 1, "succeeded")
    assert [e.event for e in runtime.audit(status.run.id)].count("attempt_lost") == 1


def test_a_child_that_always_crashes_is_poison_after_lost_attempts(runtime, registry):
    # Given an isolated action that always SIGKILLs its own process, with retries for everything
    calls = []

    @action("t.pill", registry=registry)
    def pill(ctx):
        os.kill(os.getpid(), signal.SIGKILL)

    plan = one_step("t.pill", isolation="process", retry=retry("worker_lost", max_attempts=5, initial_ms=0))
    # When it runs
    status = runtime.run(plan, {}, initiator="u")
    # Then it ran lost_attempts (3) times, not max_attempts, and the run is quarantined: never a loop
    assert status.state == "quarantined" and status.error[1].startswith("poison: step 'one' was lost 3 times")
    assert len(status.attempts) == 3 and calls == []
    (letter,) = runtime.store.dead_letters()
    assert letter.status == "quarantined"


def test_a_gil_holding_c_call_is_timed_out_on_time_under_isolation(runtime, registry):
    # Given a catastrophic regular expression (hours of backtracking in C, the GIL held) and a 1 s timeout
    @action("t.regex", registry=registry)
    def regex(ctx):
        return bool(re.match(r"^(a+)+$", "a" * 40 + "b"))

    started = time.monotonic()
    # When it runs in a child process
    status = runtime.run(one_step("t.regex", isolation="process", timeout_ms=1000), {}, initiator="u")
    # Then the attempt timed out about on time and the child was killed
    assert status.state == "failed" and status.error[0] == "timeout"
    assert "isolated process was killed" in status.error[1]
    assert time.monotonic() - started < 5


def test_the_child_sees_a_cancellation_through_its_pipe():
    # Given a child that waits for ctx.cancelled(), and a worker that asks it to stop after 0.3 s
    asked = time.monotonic() + 0.3

    def body(cancelled):
        start = time.monotonic()
        while not cancelled() and time.monotonic() - start < 10:
            time.sleep(0.01)
        return ("ok", cancelled(), None)

    # When it runs
    started = time.monotonic()
    kind, saw, _ = isolation.run_forked(body, 10, lambda: time.monotonic() >= asked)
    # Then the child saw it and stopped early
    assert kind == "ok" and saw is True and time.monotonic() - started < 2


def test_the_worker_default_comes_from_the_configuration_or_the_environment(tmp_path, registry, monkeypatch):
    @action("t.pid", registry=registry)
    def pid(ctx):
        return os.getpid()

    # Given a worker configured for process isolation
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/a.db"), registry, {},
                 config=RuntimeConfig(extra={"isolation": "process"}), worker_timeout_ms=20)
    try:
        # Then a step that does not choose runs in a child
        assert rt.run(one_step("t.pid"), {}, initiator="u").output != os.getpid()
    finally:
        rt.close()
        rt.store.close()
    monkeypatch.setenv(isolation.ENV, "process")
    assert isolation.worker_default(RuntimeConfig()) == "process"
    # And a wrong value is refused when the runtime starts, naming it
    store = open_store(f"sqlite:///{tmp_path}/b.db")
    with pytest.raises(ConfigError, match="isolation 'forked' must be one of thread, process"):
        Runtime(store, registry, {}, config=RuntimeConfig(extra={"isolation": "forked"}))
    store.close()


def test_a_wrong_isolation_on_a_registration_is_refused(registry):
    with pytest.raises(ActionRegistrationError, match="isolation 'fork' must be 'thread' or 'process'"):
        action("t.bad", registry=registry, isolation="fork")(lambda ctx: None)


def test_a_child_sending_back_more_than_the_payload_limit_is_killed_and_its_step_fails(tmp_path, registry):
    # Given an isolated action whose result is 4 MB, on a worker whose payloads.max_bytes is 64 KiB
    @action("t.flood", registry=registry, isolation="process")
    def flood(ctx):
        return "f" * 4_000_000

    rt = Runtime(open_store(f"sqlite:///{tmp_path}/a.db"), registry, {},
                 config=RuntimeConfig.from_dict({"payloads": {"max_bytes": "64KiB"}}), worker_timeout_ms=20)
    try:
        # When it runs
        status = rt.run(one_step("t.flood"), {}, initiator="u")
    finally:
        rt.close()
        rt.store.close()
    # Then the worker stopped reading after twice the limit (and the slack), killed the child, and the step
    # failed as invalid_output naming the limit
    assert status.state == "failed" and status.error[0] == "invalid_output"
    assert "sent back more than 196608 bytes and was killed" in status.error[1]
    assert "over the limit of 65536 bytes (payloads.max_bytes" in status.error[1]


def test_run_forked_stops_reading_at_its_bound():
    # Given a child that would send 50 MB back
    def body(cancelled):
        return ("ok", b"b" * 50_000_000, None)

    # When it runs with a 1 MB bound / Then the parent refuses it without reading the rest
    with pytest.raises(isolation.ChildTooLarge, match="more than 1000000 bytes"):
        isolation.run_forked(body, 30, max_bytes=1_000_000)
