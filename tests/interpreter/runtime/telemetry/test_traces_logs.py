"""Traces (a span per step attempt, in the run's trace; the OTel SDK's in-memory exporter) and JSON log lines
carrying the run, step, attempt and trace ids."""

from __future__ import annotations

import io
import json
import logging

import pytest
from interp_helpers import S, make_plan, retry
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sealflow.core.errors import StepError
from sealflow.execution.actions import action
from sealflow.runtime.telemetry import tracing
from sealflow.runtime.telemetry.logging import JsonFormatter


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(exporter):
    """An OTel SDK provider exporting to memory; the ``runtime`` fixture is built with it (tests/interpreter/
    conftest.py)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def spans(runtime, tracer_provider, exporter):
    return exporter


@pytest.fixture
def plan(registry):
    calls = {"n": 0}

    @action("t.flaky", registry=registry)
    def flaky(ctx):
        calls["n"] += 1
        logging.getLogger("test.action").info("calling the flaky service")
        if calls["n"] == 1:
            raise StepError("network", "reset")
        return {"ok": True}

    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        return kw

    return make_plan(S("call", "action", action="t.flaky", retry=retry("network", initial_ms=1000)),
                     S("note", "action", action="t.echo", args={"x": 1}))


def test_each_step_attempt_is_a_span_in_the_runs_trace(runtime, spans, plan):
    # When a run with a retried step runs to completion
    status = runtime.run(plan, {}, initiator="user:ana", until="final")
    assert status.state == "completed"
    # Then there is one span per step attempt, all in the trace derived from the run id
    steps = [s for s in spans.get_finished_spans() if s.name == "sealflow.step"]
    assert [(s.attributes["sealflow.step_id"], s.attributes["sealflow.attempt"], s.attributes["sealflow.outcome"])
            for s in steps] == [("call", 1, "failed"), ("call", 2, "succeeded"), ("note", 1, "succeeded")]
    assert {s.context.trace_id for s in steps} == {tracing.trace_id_of(status.run.id)}
    assert all(s.attributes["sealflow.run_id"] == status.run.id for s in steps)
    assert steps[0].attributes["sealflow.error_class"] == "network"


def test_a_traceparent_carried_in_the_message_is_the_attempts_parent():
    # Given a traceparent of the run's trace, as a sender stamps it into the message options
    run_id = "run_x"
    tp = f"00-{tracing.trace_id_of(run_id):032x}-{0xabc:016x}-01"
    # When the receiver starts its attempt span in that context
    ctx = tracing.parent_context(run_id, tp)
    from opentelemetry import trace

    parent = trace.get_current_span(ctx).get_span_context()
    # Then the sender's span is the parent; a traceparent of another trace is ignored
    assert parent.span_id == 0xabc
    other = trace.get_current_span(tracing.parent_context(run_id, f"00-{1:032x}-{0xabc:016x}-01"))
    assert other.get_span_context().trace_id == tracing.trace_id_of(run_id)
    assert other.get_span_context().span_id != 0xabc


def run_logging_json(runtime, plan):
    """Run ``plan`` to its end with the actions' logger writing JSON lines; the run's status and the lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.action")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        status = runtime.run(plan, {}, initiator="user:ana", until="final")
    finally:
        logger.removeHandler(handler)
    return status, [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_log_lines_carry_run_step_attempt_and_trace_ids(runtime, spans, plan):
    # Given JSON logs on a stream, when a run logs from inside its steps
    status, lines = run_logging_json(runtime, plan)
    # Then each line is JSON with the attempt's ids and the run's trace id
    assert [(ln["run_id"], ln["step_id"], ln["attempt"]) for ln in lines] == [
        (status.run.id, "call", 1), (status.run.id, "call", 2)]
    assert {ln["trace_id"] for ln in lines} == {f"{tracing.trace_id_of(status.run.id):032x}"}
    assert lines[0]["message"] == "calling the flaky service" and lines[0]["level"] == "info"


@pytest.fixture
def one_step_per_message(monkeypatch):
    """Every step message goes through the broker (no in-thread continuation), as on Redis."""
    from sealflow.runtime import actors

    monkeypatch.setattr(actors, "CONTINUE_LIMIT", 1)


def test_the_next_steps_message_carries_the_previous_attempts_span(one_step_per_message, runtime, spans, registry):
    # Given a two-step run whose messages go through the broker
    @action("t.one", registry=registry)
    def one(ctx):
        return {}

    plan = make_plan(S("a", "action", action="t.one"), S("b", "action", action="t.one"))
    # When it runs
    rt_plan_status = runtime.run(plan, {}, initiator="user:ana", until="final")
    assert rt_plan_status.state == "completed"
    a, b = [s for s in spans.get_finished_spans() if s.name == "sealflow.step"]
    # Then step b's span is a child of step a's, in the same trace
    assert b.parent is not None and b.parent.span_id == a.context.span_id
    assert a.context.trace_id == b.context.trace_id == tracing.trace_id_of(rt_plan_status.run.id)


def test_without_a_tracer_sdk_no_span_is_started_and_logs_carry_the_runs_trace(runtime, plan, monkeypatch):
    # Given the runtime's telemetry on the global tracer, with no SDK provider installed (the default)
    assert not tracing.records(runtime.telemetry.tracer)
    started = []
    monkeypatch.setattr(tracing, "attempt_span", lambda *a: started.append(a))  # must not be reached
    # When a run logs from inside its steps (as JSON lines)
    status, lines = run_logging_json(runtime, plan)
    # Then no span was started, and each line carries the ids the no-op span would have had: the run's trace
    # and its root span (what the general path gives without an SDK)
    assert status.state == "completed" and started == []
    root = tracing._run_root(status.run.id)
    assert [(ln["trace_id"], ln["span_id"]) for ln in lines] == [
        (f"{root.trace_id:032x}", f"{root.span_id:016x}")] * 2
    # And the attempts were counted
    assert runtime.telemetry.metrics.registry.get_sample_value(
        "sealflow_step_attempts_total", {"kind": "action", "outcome": "succeeded", "error_class": ""}) == 2


def test_without_a_tracer_sdk_a_message_from_a_recording_sender_takes_the_general_path(runtime, monkeypatch):
    # Given a message that carried a span of the run's trace other than its root (its sender records spans)
    import threading

    run_id = "run_y"
    sender = f"00-{tracing.trace_id_of(run_id):032x}-{0xdef:016x}-01"
    monkeypatch.setitem(tracing._incoming, threading.get_ident(), sender)
    # When the receiver, which records nothing, asks for its ids
    # Then it is sent to the general path (which makes that span the parent), and the root's ids are given
    # when the message carried the root or nothing
    assert tracing.untraced_ids(run_id) is None
    monkeypatch.setitem(tracing._incoming, threading.get_ident(), None)
    root = tracing._run_root(run_id)
    assert tracing.untraced_ids(run_id) == (f"{root.trace_id:032x}", f"{root.span_id:016x}")


def test_dramatiqs_lines_about_an_unknown_actor_or_an_undecodable_message_keep_their_reason_without_a_traceback():
    # Given the worker's log set-up on a stream, and Dramatiq's consumer meeting a message naming an actor this
    # worker lacks and one it cannot decode (forged, or another application's on the queue)
    from dramatiq.errors import ActorNotFound, DecodeError

    from sealflow.runtime.telemetry.logging import setup

    stream = io.StringIO()
    touched = [logging.getLogger(name) for name in ("", "dramatiq", "psycopg.pool")]
    levels = [logger.level for logger in touched]
    handler = setup("text", stream)
    root = logging.getLogger()
    consumer = logging.getLogger("dramatiq.worker.ConsumerThread(q_test)")
    try:
        try:
            raise ActorNotFound("os_system")
        except ActorNotFound:
            consumer.error("Received message for undefined actor %r. Moving it to the DLQ.", "os_system",
                           exc_info=True)
        try:
            try:
                raise DecodeError("failed to decode message '{not json'", "{not json", ValueError("x"))
            except DecodeError as inner:
                raise DecodeError("Failed to decode message.", b"{not json", inner) from inner
        except DecodeError:
            consumer.critical("Consumer encountered an unexpected error.", exc_info=True)
        # and a bug of its own, anywhere else, as it comes
        try:
            raise KeyError("a bug")
        except KeyError:
            logging.getLogger("dramatiq.worker.WorkerThread").error("Failed to process message", exc_info=True)
    finally:
        root.removeHandler(handler)
        for logger, level in zip(touched, levels, strict=True):
            logger.setLevel(level)
    # When the lines are written / Then the first two say what happened, with the reason, in one line each
    lines = stream.getvalue().splitlines()
    assert "Received message for undefined actor 'os_system'. Moving it to the DLQ. (os_system)" in lines[0]
    assert "Consumer encountered an unexpected error. (failed to decode message '{not json')" in lines[1]
    assert lines[2].endswith("Failed to process message") and lines[3] == "Traceback (most recent call last):"
    assert stream.getvalue().count("Traceback") == 1
