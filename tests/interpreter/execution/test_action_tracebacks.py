"""An exception in an action keeps its traceback with the failed attempt, in the store of every backend; the
one-line summary names the action's file and line; secrets are redacted from both; an isolated child sends
its traceback back."""

from __future__ import annotations

import random

import pytest
from interp_helpers import S, line_of, make_plan

from sealflow.dsl.plan import ErrorRoutePlan
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

HERE = "tests/interpreter/execution/test_action_tracebacks.py"
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
MARK = "[redacted:api_key]"


def lookup(d):
    return d["missing"]


@pytest.fixture
def on_store(store, registry, clock):
    """A runtime on each store backend."""
    made = Runtime(store, registry, {}, clock=clock, rng=random.Random(7), worker_timeout_ms=20)
    yield made
    made.close()


def register_greet(registry, **kw):
    @action("t.greet", registry=registry, **kw)
    def greet(ctx, name):
        return {"greeting": f"hello, {lookup({'name': name})}"}

    return greet


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_failing_actions_traceback_is_stored_with_its_attempt_and_its_summary_names_the_line(
        on_store, registry, isolation):
    # Given an action with a bug two calls deep (d["missing"]), run in a thread or in a child process
    greet = register_greet(registry, isolation=isolation)
    where = f"{HERE}:{line_of(lookup, 'missing')} in lookup"
    # When a run calls it
    status = on_store.run(make_plan(S("greet", "action", action="t.greet", args={"name": "ann"})), {},
                          initiator="user:ana")
    # Then the run failed, and its one-line error, the attempt's and the dead letter's name the file and line
    assert status.state == "failed"
    assert status.error == ("internal", f"KeyError: 'missing' ({where})")
    assert on_store.store.dead_letter(status.run.id).reason == \
        f"step 'greet' failed with internal: KeyError: 'missing' ({where})"
    # and the store keeps the traceback with the attempt: each frame as file:line in function, its source line,
    # the exception last; none of sealflow's own frames that called the action
    (attempt,) = on_store.store.attempts(status.run.id)
    trace = attempt.error_trace
    assert f"  {HERE}:{line_of(greet.fn, 'lookup(')} in greet\n" in trace
    assert f"  {where}\n    return d[\"missing\"]\nKeyError: 'missing'" in trace
    assert "timeouts.py" not in trace and "calls.py" not in trace and "isolation.py" not in trace


def test_a_classified_failure_keeps_no_traceback(on_store, registry):
    # Given an action that fails on purpose with a classified error
    from sealflow.core.errors import StepError

    @action("t.refuse", registry=registry)
    def refuse(ctx):
        raise StepError("invalid_request", "no such customer")

    # When it runs / Then its message is its own, and no traceback is kept
    status = on_store.run(make_plan(S("one", "action", action="t.refuse")), {}, initiator="user:ana")
    assert status.error == ("invalid_request", "no such customer")
    assert [a.error_trace for a in on_store.store.attempts(status.run.id)] == [None]


def test_a_failure_routed_on_keeps_its_traceback(on_store, registry):
    # Given a failing action whose step routes its failure to a next step (the hot path of a PostgreSQL store
    # writes such a commit in one statement: a traceback goes the shared way)
    register_greet(registry)
    plan = make_plan(S("greet", "action", action="t.greet", args={"name": "ann"},
                       on_error=(ErrorRoutePlan(errors=("internal",), next="rescue"),)),
                     S("rescue", "set", assign={"ok": "1"}))
    # When it runs
    status = on_store.run(plan, {}, initiator="user:ana")
    # Then the run went on, and the failed attempt kept its traceback
    assert status.state == "completed", status.error
    failed = [a for a in on_store.store.attempts(status.run.id) if a.state == "failed"]
    assert len(failed) == 1 and "KeyError: 'missing'" in failed[0].error_trace


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_secret_in_an_exceptions_message_is_redacted_from_the_summary_and_the_traceback(
        on_store, registry, monkeypatch, isolation):
    # Given an action that puts its secret into the message of an unexpected exception
    monkeypatch.setenv("SEALFLOW_SECRET_API_KEY", SECRET)

    @action("t.leak", registry=registry, secrets=["api_key"], isolation=isolation)
    def leak(ctx):
        raise ValueError(f"the CRM refused key {ctx.secrets['api_key']}")

    # When it runs
    status = on_store.run(make_plan(S("one", "action", action="t.leak")), {}, initiator="user:ana")
    # Then the summary and the stored traceback name the secret, never its value
    (attempt,) = on_store.store.attempts(status.run.id)
    assert status.error[1].startswith(f"ValueError: the CRM refused key {MARK} ({HERE}:")
    assert f"ValueError: the CRM refused key {MARK}" in attempt.error_trace
    assert SECRET not in attempt.error_trace and SECRET not in attempt.error_message
    assert SECRET not in on_store.store.dead_letter(status.run.id).reason


def test_an_exception_whose_text_cannot_be_made_still_fails_its_step_saying_where(on_store, registry):
    # Given an action raising an exception whose str() itself raises
    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    @action("t.odd", registry=registry)
    def odd(ctx):
        raise Odd()

    # When it runs / Then the step fails as internal, naming the exception and where, with its traceback
    status = on_store.run(make_plan(S("one", "action", action="t.odd")), {}, initiator="user:ana")
    where = f"{HERE}:{line_of(odd.fn, 'raise Odd')} in odd"
    assert status.error == ("internal", f"Odd: <its text could not be made: RuntimeError> ({where})")
    assert where in on_store.store.attempts(status.run.id)[0].error_trace


def test_the_traceback_survives_reopening_the_store(tmp_path, registry, clock):
    # Given a SQLite store where an action failed
    register_greet(registry)
    url = f"sqlite:///{tmp_path}/kept.db"
    with Runtime(open_store(url, clock=clock), registry, {}, rng=random.Random(7)) as first:
        run_id = first.run(make_plan(S("greet", "action", action="t.greet", args={"name": "ann"})), {},
                           initiator="user:ana").run.id
        first.store.close()
    # When another process opens the store
    again = open_store(url)
    try:
        # Then the traceback is there
        (attempt,) = again.attempts(run_id)
        assert "KeyError: 'missing'" in attempt.error_trace and f"{HERE}:" in attempt.error_trace
    finally:
        again.close()
