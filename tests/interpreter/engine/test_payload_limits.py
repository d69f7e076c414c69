"""Bounded payloads: a run's input, a step's output and a run's output are stored JSON of at most
``payloads.max_bytes`` (runtime configuration, default 2 MiB), and an error message keeps its first few
thousand characters. What is over is refused where it arrives, says what and where, and nothing of it is
stored; on every store. Given / When / Then in each test."""

from __future__ import annotations

import random
import re

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import ConfigError, StepError
from sealflow.core.jsonc import DEFAULT_MAX_PAYLOAD_BYTES, MAX_MESSAGE_CHARS
from sealflow.execution.actions import Registry, action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import auditchain

LIMIT = 64 * 1024


@pytest.fixture
def on_store(store):
    """A Runtime over each backend's ``store`` with ``payloads.max_bytes: 64KiB`` and ``registry``'s actions."""
    made = []

    def make(registry, limit: int = LIMIT):
        config = RuntimeConfig.from_dict({"payloads": {"max_bytes": limit}})
        rt = Runtime(store, registry, {}, rng=random.Random(7), worker_timeout_ms=20,
                     config=config)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def test_an_output_over_the_limit_fails_its_step_as_invalid_output_and_is_not_stored(on_store):
    # Given an action whose first answer is 100 KB of JSON (over a 64 KiB limit) and whose retry is small
    registry, calls = Registry(), []

    @action("t.big", registry=registry)
    def big(ctx):
        calls.append(1)
        return {"doc": "x" * 100_000} if len(calls) == 1 else {"key": "s3://bucket/doc-1"}

    rt = on_store(registry)
    plan = make_plan(S("a", "action", action="t.big", retry=retry("invalid_output", initial_ms=0)))
    # When a run calls it
    status = rt.run(plan, {}, initiator="user:ana")
    # Then the first attempt failed as invalid_output saying how large, the limit and the setting, with
    # nothing of the output stored; the retry's small answer completed the run; the chain verifies
    assert status.state == "completed" and len(calls) == 2
    first, second = status.attempts
    assert first.error_class == "invalid_output" and first.output is None
    assert "step 'a' produced an output of 100010 bytes of JSON" in first.error_message
    assert f"over the limit of {LIMIT} bytes (payloads.max_bytes" in first.error_message
    assert second.output == {"key": "s3://bucket/doc-1"}
    assert auditchain.verify(rt.store).ok


def test_the_limit_counts_utf8_bytes_not_characters(on_store):
    # Given an action whose output is 20,000 characters of 4-byte UTF-8 (80 KB stored), under 64 Ki characters
    registry = Registry()

    @action("t.wide", registry=registry)
    def wide(ctx):
        return "\U0001F600" * 20_000

    rt = on_store(registry)
    # When a run calls it / Then the step fails as invalid_output, counting bytes
    status = rt.run(make_plan(S("a", "action", action="t.wide")), {}, initiator="user:ana")
    assert status.state == "failed"
    assert status.attempts[0].error_class == "invalid_output"
    assert "80002 bytes of JSON" in status.attempts[0].error_message


def test_an_output_at_the_limit_is_stored_whole(on_store):
    # Given an action whose output is exactly the limit as stored JSON (a string: two quotes around it)
    registry = Registry()

    @action("t.exact", registry=registry)
    def exact(ctx):
        return "y" * (LIMIT - 2)

    rt = on_store(registry)
    # When a run calls it / Then it completes with that output
    status = rt.run(make_plan(S("a", "action", action="t.exact")), {}, initiator="user:ana")
    assert status.state == "completed" and status.attempts[0].output == "y" * (LIMIT - 2)


def test_a_workflow_output_over_the_limit_fails_the_run_as_invalid_output(on_store):
    # Given two steps of 40 KB each, under the limit alone, and a workflow output that joins them (80 KB)
    registry = Registry()

    @action("t.half", registry=registry)
    def half(ctx):
        return "z" * 40_000

    rt = on_store(registry)
    plan = make_plan(S("a", "action", action="t.half", next="b"), S("b", "action", action="t.half"),
                     output={"a": "${{ steps.a.output }}", "b": "${{ steps.b.output }}"})
    # When it runs
    status = rt.run(plan, {}, initiator="user:ana")
    # Then the run fails as invalid_output naming the workflow's output and the limit; no output is stored
    assert status.state == "failed" and status.output is None
    error_class, message = status.error
    assert error_class == "invalid_output"
    assert message.startswith("the workflow's output is 80015 bytes of JSON, over the limit of 65536 bytes")
    assert auditchain.verify(rt.store).ok


def test_an_input_over_the_limit_is_refused_at_submit_and_nothing_is_written(on_store):
    # Given an input of 70 KB of JSON
    rt = on_store(Registry())
    plan = make_plan(S("a", "set", assign={"x": "1"}))
    # When it is submitted / Then it is refused as invalid_request with its size and the limit; no run exists
    with pytest.raises(StepError, match=r"is 70011 bytes of JSON, over the limit of 65536 bytes") as got:
        rt.submit(plan, {"note": "n" * 70_000}, initiator="user:ana")
    assert got.value.error_class == "invalid_request"
    assert rt.store.list_runs(limit=10) == []


def test_an_error_message_is_kept_to_its_first_few_thousand_characters(on_store):
    # Given an action that fails with a 1 MB message (a whole response body in an exception)
    registry = Registry()

    @action("t.loud", registry=registry)
    def loud(ctx):
        raise RuntimeError("E" * 1_000_000)

    rt = on_store(registry)
    # When a run calls it
    status = rt.run(make_plan(S("a", "action", action="t.loud")), {}, initiator="user:ana")
    # Then the failure is recorded with the message's head, how much was not kept, and where it was raised
    assert status.state == "failed"
    message = status.attempts[0].error_message
    assert message.startswith("RuntimeError: EEE") and len(message) < MAX_MESSAGE_CHARS + 100
    assert re.search(r"EEE\.\.\. \(\d+ more characters not kept\) "
                     r"\(tests/interpreter/engine/test_payload_limits\.py:\d+ in loud\)$", message)
    assert auditchain.verify(rt.store).ok


def test_the_setting_reads_sizes_and_refuses_what_cannot_hold_a_payload():
    # Given configurations with and without payloads.max_bytes
    # When they are read / Then the default is 2 MiB, a size text is read, and a tiny or wrong one is refused
    assert RuntimeConfig().payload_max_bytes == DEFAULT_MAX_PAYLOAD_BYTES == 2 * 1024 * 1024
    assert RuntimeConfig.from_dict({"payloads": {"max_bytes": "512KiB"}}).payload_max_bytes == 512 * 1024
    with pytest.raises(ConfigError, match=r"payloads.max_bytes: 10 bytes is too small"):
        RuntimeConfig.from_dict({"payloads": {"max_bytes": 10}})
    with pytest.raises(ConfigError, match=r"payloads.max_bytes: 'lots' is not a size"):
        RuntimeConfig.from_dict({"payloads": {"max_bytes": "lots"}})
    with pytest.raises(ConfigError, match=r"max_byte"):
        RuntimeConfig.from_dict({"payloads": {"max_byte": 1024}})


def test_an_input_failing_its_schema_is_named_without_quoting_a_long_value_whole(on_store):
    # Given a workflow whose input schema bounds a field to 10 characters, and an input of 50,000 there
    rt = on_store(Registry())
    plan = make_plan(S("a", "set", assign={"x": "1"}),
                     input_schema={"type": "object", "properties": {"note": {"type": "string", "maxLength": 10}}})
    # When it is submitted / Then it is refused naming where and why, quoting only the value's head
    with pytest.raises(StepError, match=r"is invalid at note: 'nnn") as got:
        rt.submit(plan, {"note": "n" * 50_000}, initiator="user:ana")
    assert len(got.value.message) < 600 and "more characters not kept" in got.value.message
    assert rt.store.list_runs(limit=10) == []


@pytest.mark.parametrize("verb", ["approve", "reject", "cancel"])
def test_a_persons_comment_or_reason_over_2000_characters_is_refused_and_nothing_changes(on_store, verb):
    from interp_helpers import approval

    # Given a run waiting at an approval gate
    rt = on_store(Registry())
    plan = make_plan(S("g", "approval", approval=approval(approvers=("user:bob",))), S("b", "set", assign={"x": "1"}))
    run_id = rt.run(plan, {}, initiator="user:ana").run.id
    before = rt.status(run_id)

    def act(text):
        if verb == "approve":
            return rt.approve(run_id, actor="user:bob", comment=text)
        if verb == "reject":
            return rt.reject(run_id, actor="user:bob", reason=text)
        return rt.cancel(run_id, actor="user:ana", reason=text)

    # When a person acts with 2,001 characters / Then it is refused saying how long it may be; nothing changed
    with pytest.raises(StepError, match=r"is 2001 characters long; at most 2000 are kept") as got:
        act("r" * 2001)
    assert got.value.error_class == "invalid_request"
    after = rt.status(run_id)
    assert after.run.state == before.run.state == "waiting" and after.run.rev == before.run.rev
    # And 2,000 characters are taken, whole
    act("r" * 2000)
    assert rt.status(run_id).run.state != "waiting"


def test_an_output_that_fails_validation_and_is_over_the_limit_is_not_kept_for_replay(on_store):
    # Given an action with an idempotency key whose output fails its step's validate rule, first at 100 KB
    # (over the limit: not kept for a replay) then small (kept)
    registry, calls = Registry(), []

    @action("t.effect", registry=registry)
    def effect(ctx):
        calls.append(1)
        return {"ok": False, "pad": "p" * (100_000 if len(calls) == 1 else 10)}

    rt = on_store(registry)
    plan = make_plan(S("a", "action", action="t.effect", idempotency_key="${{ run.id }}:a",
                       retry=retry("invalid_output", max_attempts=3, initial_ms=0),
                       validations=({"check": "output.ok", "message": "not ok"},)))
    # When a run calls it
    status = rt.run(plan, {}, initiator="user:ana")
    # Then every attempt failed as invalid_output; the large output was never stored, so the second attempt
    # called the action again (same key), and the small one was kept and replayed to the third
    assert status.state == "failed" and status.error == ("invalid_output", "not ok")
    assert len(calls) == 2
    kept = rt.store.ledger_get(status.run.tenant, f"{status.run.id}:a")
    assert kept is not None and kept.result == {"ok": False, "pad": "p" * 10}
