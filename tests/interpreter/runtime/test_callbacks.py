"""Callbacks (task tokens): an action step whose result the system it called posts later. The token is bound to
the run, step and attempt, single-use, expiring, never stored or audited; every forgery is refused and audited.
On every store."""

from __future__ import annotations

import json
import random

import pytest

from sealflow.dsl.api import compile_bytes
from sealflow.execution.actions import action
from sealflow.execution.callbacks import CallbackRefused
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime

WORKFLOW = b"""\
sealflow: 1
name: render
version: 1
owner: team:t
retry:
  twice: {on: [timeout], max_attempts: 2}
steps:
  - id: generate
    action: t.generate
    with: {prompt: a cat}
    retry: twice
    callback:
      timeout: 30m
      schema: {type: object, required: [image_url], properties: {image_url: {type: string}}}
  - id: done
    succeed: {output: "${{ steps.generate.output.image_url }}"}
"""


@pytest.fixture
def handed(registry):
    """The callbacks the action was given, in order (as the called system would receive them)."""
    got = []

    @action("t.generate", registry=registry, effect="write")
    def generate(ctx, prompt):
        got.append(ctx.callback)
        return {"job": f"job-{len(got)}"}

    return got


@pytest.fixture
def rt(store, registry, handed):
    config = RuntimeConfig(extra={"callbacks": {"url": "http://127.0.0.1:8300"}})
    runtime = Runtime(store, registry, {}, rng=random.Random(3), worker_timeout_ms=20, config=config)
    yield runtime
    runtime.close()


@pytest.fixture
def plan():
    return compile_bytes(WORKFLOW, "<render>")


def refusal(rt, token, **kw) -> str:
    with pytest.raises(CallbackRefused) as caught:
        rt.complete_callback(token, **kw)
    return caught.value.reason


def test_the_action_hands_out_a_url_and_token_and_the_posted_result_completes_the_step(rt, plan, handed):
    # Given a run whose action started a job elsewhere and returned at once
    waiting = rt.run(plan, {}, initiator="user:a")
    (callback,) = handed
    # Then the step waits, holding no worker, and the action got the URL to post the result to
    assert waiting.state == "waiting" and waiting.waiting["kind"] == "wait"
    assert callback.url == f"http://127.0.0.1:8300/v1/callbacks/{callback.token}"
    assert callback.token not in repr(callback)
    # When the called system posts the result
    answer = rt.complete_callback(callback.token, data={"image_url": "https://img/cat.png"})
    # Then the step completes with it and the run goes on
    assert answer == {"run_id": waiting.run.id, "step": "generate", "result": "completed"}
    done = rt.drive(waiting.run.id, until="final")
    assert done.state == "completed" and done.output == "https://img/cat.png"


def test_forged_malformed_replayed_and_foreign_tenant_tokens_are_refused_and_audited_never_with_the_token(
        rt, plan, handed):
    # Given a run waiting for its callback
    waiting = rt.run(plan, {}, initiator="user:a")
    token = handed[0].token
    # When forged, malformed and foreign-tenant tokens come, then the real one twice
    assert refusal(rt, token[:-4] + "AAAA", data={"image_url": "x"}) == "forged"
    assert refusal(rt, "sfcb1.e30.x", data={"image_url": "x"}) == "malformed"
    assert refusal(rt, "not a token", data={"image_url": "x"}) == "malformed"
    assert refusal(rt, token, data={"image_url": "x"}, tenant="globex") == "foreign_tenant"
    rt.complete_callback(token, data={"image_url": "https://img/cat.png"})
    assert refusal(rt, token, data={"image_url": "https://evil"}) == "superseded"
    # Then only the real one counted, each refusal is audited, and the token appears in no audit event
    assert rt.drive(waiting.run.id, until="final").output == "https://img/cat.png"
    trail = rt.store.audit(None)
    reasons = [e.detail["reason"] for e in trail if e.event == "callback_refused"]
    assert sorted(reasons) == ["foreign_tenant", "forged", "malformed", "malformed", "superseded"]
    secret = token.rsplit(".", 1)[1]
    assert all(secret not in json.dumps(e.detail) for e in trail)


def test_a_result_failing_the_schema_is_refused_and_the_step_keeps_waiting(rt, plan, handed):
    waiting = rt.run(plan, {}, initiator="user:a")
    assert refusal(rt, handed[0].token, data={"url": "wrong field"}) == "invalid"
    assert rt.status(waiting.run.id).state == "waiting"
    rt.complete_callback(handed[0].token, data={"image_url": "https://img/ok.png"})
    assert rt.drive(waiting.run.id, until="final").state == "completed"


def test_a_posted_failure_fails_the_step_with_its_class(rt, plan, handed):
    waiting = rt.run(plan, {}, initiator="user:a")
    rt.complete_callback(handed[0].token, failed="invalid_request", message="the prompt was refused")
    done = rt.drive(waiting.run.id, until="final")
    assert done.state == "failed" and done.error == ("invalid_request", "the prompt was refused")
    with pytest.raises(CallbackRefused, match="not an error class"):
        rt.complete_callback(handed[0].token, failed="whatever")


def test_a_callback_that_never_comes_times_out_the_retry_gets_a_new_token_and_the_old_one_is_dead(
        rt, plan, handed, clock):
    # Given a run waiting for its callback
    waiting = rt.run(plan, {}, initiator="user:a")
    # When its 30 minutes pass
    clock.advance(1801)
    status = rt.drive(waiting.run.id, sleep_threshold=60.0)  # (through the retry's backoff, not the next wait)
    # Then the attempt timed out and the retry called the action again, with a new token
    assert [a.state for a in status.attempts if a.step_id == "generate"] == ["failed", "waiting"]
    first, second = handed
    assert first.token != second.token
    # And the first token is refused (another attempt's), the second completes the step
    assert refusal(rt, first.token, data={"image_url": "late"}) == "superseded"
    rt.complete_callback(second.token, data={"image_url": "https://img/second.png"})
    assert rt.drive(waiting.run.id, until="final").output == "https://img/second.png"
    # And once it completed the step, the second token is used: nothing more is accepted
    assert refusal(rt, second.token, data={"image_url": "again"}) == "superseded"


def test_a_run_cancelled_while_it_waits_for_its_callback_refuses_the_late_result(rt, plan, handed):
    waiting = rt.run(plan, {}, initiator="user:a")
    rt.cancel(waiting.run.id, reason="no longer needed")
    assert rt.drive(waiting.run.id, until="final").state == "cancelled"
    assert refusal(rt, handed[0].token, data={"image_url": "https://img/late.png"}) == "superseded"
    assert rt.status(waiting.run.id).state == "cancelled"
