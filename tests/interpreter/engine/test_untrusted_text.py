"""Text from outside (an action's exception, an output, a run's input) that no store can hold: a NUL character
(PostgreSQL text) or an unpaired surrogate (no UTF-8 form; ``json.loads`` gives one for a lone ``\\ud800``
escape, as a model's or a web service's answer may hold). The run never hangs on it: a failure is recorded
with that text replaced, an output is refused as ``invalid_output``, an input is refused at submit; on every
store. Given / When / Then in each test."""

from __future__ import annotations

import json
import random

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import auditchain

LONE = json.loads('"\\ud800"')


@pytest.fixture
def on_store(store):
    """A Runtime over each backend's ``store``, with ``registry`` actions."""
    made = []

    def make(registry):
        rt = Runtime(store, registry, {}, rng=random.Random(7), worker_timeout_ms=20)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.mark.parametrize("text", ["NUL \x00 here", f"lone {LONE} surrogate", f"both \x00 and {LONE}"])
def test_an_exception_whose_text_no_store_holds_fails_the_run_with_that_text_replaced(on_store, text):
    # Given an action that raises with text a store cannot hold as it is
    registry = Registry()

    @action("t.raise", registry=registry)
    def boom(ctx):
        raise RuntimeError(text)

    rt = on_store(registry)
    # When a run calls it
    status = rt.run(make_plan(S("a", "action", action="t.raise")), {}, initiator="user:ana")
    # Then the run fails (it does not hang in `running`), with the message recorded, what no store holds
    # replaced by U+FFFD; and the tenant's audit chain still verifies
    assert status.state == "failed"
    (attempt,) = status.attempts
    assert attempt.state == "failed" and attempt.error_class == "internal"
    assert attempt.error_message.startswith("RuntimeError: ") and "\ufffd" in attempt.error_message
    assert "\x00" not in attempt.error_message
    attempt.error_message.encode()
    assert auditchain.verify(rt.store).ok


def test_an_output_holding_text_that_is_not_unicode_is_refused_as_invalid_output(on_store):
    # Given an action whose output holds an unpaired surrogate (as a decoded lone escape would), retried on
    # invalid_output
    registry, calls = Registry(), []

    @action("t.answer", registry=registry)
    def answer(ctx):
        calls.append(1)
        return {"reply": {"text": f"half {LONE}"}} if len(calls) == 1 else {"reply": {"text": "whole"}}

    rt = on_store(registry)
    plan = make_plan(S("a", "action", action="t.answer", retry=retry("invalid_output", initial_ms=0)))
    # When a run calls it
    status = rt.run(plan, {}, initiator="user:ana")
    # Then the first attempt fails as invalid_output naming where the text is, nothing of it is stored, and
    # the retry's whole answer completes the run
    assert status.state == "completed" and len(calls) == 2
    first, second = status.attempts
    assert first.error_class == "invalid_output" and "output.reply.text" in first.error_message
    assert first.output is None
    assert second.output == {"reply": {"text": "whole"}}


def test_an_output_with_nul_characters_is_json_and_reads_back_the_same(on_store):
    # Given an action whose output holds NUL characters and non-ASCII text (JSON escapes the NUL)
    registry = Registry()
    out = {"bytes": "a\x00b\x00", "name": "Zoë 漢字"}

    @action("t.nul", registry=registry)
    def nul(ctx):
        return out

    rt = on_store(registry)
    # When a run calls it / Then it completes with that output, exactly
    status = rt.run(make_plan(S("a", "action", action="t.nul")), {}, initiator="user:ana")
    assert status.state == "completed"
    assert status.attempts[0].output == out


def test_an_input_holding_text_that_is_not_unicode_is_refused_at_submit(on_store):
    # Given a run's input with an unpaired surrogate
    rt = on_store(Registry())
    plan = make_plan(S("a", "set", assign={"x": "1"}))
    # When it is submitted / Then it is refused as invalid_request naming where, and no run exists
    with pytest.raises(StepError, match=r"not valid Unicode at input\.lead\.name") as got:
        rt.submit(plan, {"lead": {"name": f"x{LONE}"}}, initiator="user:ana")
    assert got.value.error_class == "invalid_request"
    assert rt.store.list_runs(limit=10) == []


@pytest.mark.parametrize("text", ["NUL \x00 here", f"lone {LONE} surrogate"])
@pytest.mark.parametrize("verb", ["approve", "reject", "cancel"])
def test_a_persons_comment_or_reason_no_store_holds_is_kept_with_that_text_replaced(on_store, verb, text):
    from interp_helpers import approval

    # Given a run waiting at an approval gate
    rt = on_store(Registry())
    plan = make_plan(S("g", "approval", approval=approval(approvers=("user:bob",))), S("b", "set", assign={"x": "1"}))
    run_id = rt.run(plan, {}, initiator="user:ana").run.id
    # When a person approves, rejects or cancels it with text a store cannot hold as it is
    if verb == "approve":
        rt.approve(run_id, actor="user:bob", comment=text)
    elif verb == "reject":
        rt.reject(run_id, actor="user:bob", reason=text)
    else:
        rt.cancel(run_id, actor="user:ana", reason=text)
    status = rt.run_until_settled(run_id) if hasattr(rt, "run_until_settled") else rt.status(run_id)
    # Then the decision takes effect (never refused by the store, never failing the run for its text), with
    # the text recorded, what no store holds replaced
    expected = {"approve": ("running", "completed"), "reject": ("failed",), "cancel": ("cancelled",)}[verb]
    assert status.run.state in expected
    if verb == "approve":
        (decided,) = status.attempts[0].output["approvals"]
        assert "\ufffd" in decided["comment"]
    else:
        assert "\ufffd" in status.run.error_message and "\x00" not in status.run.error_message
    assert auditchain.verify(rt.store).ok


def test_an_output_nested_past_the_recursion_limit_fails_its_step_and_never_hangs_the_run(on_store):
    # Given an action whose output nests lists 5,000 deep (no JSON writer goes that deep)
    registry = Registry()

    @action("t.deep", registry=registry)
    def deep(ctx):
        v: list = []
        for _ in range(5_000):
            v = [v]
        return {"v": v}

    rt = on_store(registry)
    # When a run calls it / Then the step fails as internal saying why, and the run ends failed
    status = rt.run(make_plan(S("a", "action", action="t.deep")), {}, initiator="user:ana")
    assert status.state == "failed"
    assert status.attempts[0].error_class == "internal" and "nests too deeply" in status.attempts[0].error_message
