"""An action's arguments and result checked at run time against its declaration (issue 32, execution/arguments.py).

A null never reaches an action as the text ``None``; an argument it does not take fails the step with
``invalid_request`` (never ``internal: TypeError``); a result that breaks its declared output fails it with
``invalid_output``, and the effect is recorded so that a retry replays rather than acts again.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from typing import TypedDict

import pydantic
import pytest
from interp_helpers import S, make_plan

from sealflow.core.errors import StepError
from sealflow.dsl.plan import RetryPolicy
from sealflow.execution import arguments
from sealflow.execution.actions import action


class Greeting(TypedDict):
    greeting: str


class Colour(enum.Enum):
    RED = "red"


class Address(pydantic.BaseModel):
    city: str


@dataclasses.dataclass
class Point:
    x: float


def failure(status, step: str):
    (attempt,) = [a for a in status.attempts if a.step_id == step]
    return attempt.error_class, attempt.error_message


def test_given_a_null_into_a_string_parameter_then_invalid_request_naming_the_reference(runtime, registry):
    # Given the scaffold's action, and an input missing the field the template reads
    calls = []

    @action("t.greet", registry=registry)
    def greet(ctx, name: str) -> Greeting:
        calls.append(name)
        return {"greeting": f"hello, {name}"}

    plan = make_plan(S("greet", "action", action="t.greet", args={"name": "${{ input.nme }}"}))
    # When it runs
    status = runtime.run(plan, {"name": "world"}, initiator="user:ana")
    # Then the action was never called, and the step failed with invalid_request naming the argument and template
    assert status.state == "failed" and calls == []
    error_class, message = failure(status, "greet")
    assert error_class == "invalid_request"
    assert "argument 'name' of action t.greet is null (from '${{ input.nme }}')" in message


def test_given_an_argument_the_action_does_not_take_then_submit_refuses_and_the_call_never_happens(runtime,
                                                                                                 registry):
    # Given a plan compiled without the action's metadata, whose with: names an argument the action does not take
    @action("t.greet", registry=registry)
    def greet(ctx, name: str) -> Greeting:
        return {"greeting": name}

    plan = make_plan(S("greet", "action", action="t.greet", args={"nam": "x"}))
    # When it is submitted, Then it is refused before a run exists, naming what does not fit
    with pytest.raises(StepError) as caught:
        runtime.submit(plan, {}, initiator="user:ana")
    assert caught.value.error_class == "invalid_request"
    assert "names 'nam', which action t.greet does not take (it takes: name)" in caught.value.message
    assert "leaves out 'name'" in caught.value.message
    assert runtime.store.list_runs() == []
    # And at call time (an action registered later, a plan already stored) the same is invalid_request, never
    # internal: TypeError
    args, wrong = arguments.prepare(registry.get("t.greet"), {"nam": "x"}, {"nam": "x"})
    assert wrong == "action t.greet has no parameter 'nam'; it takes: name"


def test_given_a_value_of_the_wrong_type_then_invalid_request_naming_the_argument(runtime, registry):
    @action("t.count", registry=registry)
    def count(ctx, n: int):
        return n

    status = runtime.run(make_plan(S("c", "action", action="t.count", args={"n": "${{ input.n }}"})),
                         {"n": "three"}, initiator="user:ana")
    error_class, message = failure(status, "c")
    assert error_class == "invalid_request" and "argument 'n' of action t.count" in message
    assert "'three' is not of type 'integer'" in message


def test_given_model_dataclass_and_enum_parameters_then_the_action_receives_instances(runtime, registry):
    got = []

    @action("t.typed", registry=registry)
    def typed(ctx, address: Address, point: Point, colour: Colour):
        got.append((address, point, colour))
        return "ok"

    plan = make_plan(S("t", "action", action="t.typed",
                       args={"address": {"city": "Oslo"}, "point": {"x": 1.5}, "colour": "red"}))
    assert runtime.run(plan, {}, initiator="user:ana").state == "completed"
    assert got == [(Address(city="Oslo"), Point(x=1.5), Colour.RED)]


def test_given_a_result_breaking_the_declared_output_then_invalid_output_and_a_retry_replays_it(runtime, registry):
    # Given a keyed action whose result breaks its return annotation, retried on invalid_output
    calls = []

    @action("t.send", effect="write", registry=registry)
    def send(ctx) -> Greeting:
        calls.append(ctx.attempt)
        return {"greting": "typo"}  # type: ignore[typeddict-unknown-key]

    plan = make_plan(S("send", "action", action="t.send", idempotency_key="${{ run.id }}:send",
                       retry=RetryPolicy(name="r", on=("invalid_output",), max_attempts=2, initial_ms=0)))
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the step failed with invalid_output naming the schema, and the effect ran once (the retry replayed it)
    assert status.state == "failed" and calls == [1]
    errors = [(a.error_class, a.error_message) for a in status.attempts]
    assert all(c == "invalid_output" for c, _ in errors)
    assert "breaks its declared output schema" in errors[0][1] and "'greeting' is a required property" in errors[0][1]


def test_given_an_action_without_annotations_then_anything_passes_as_before(runtime, registry):
    got = []

    @action("t.loose", registry=registry)
    def loose(ctx, a, b=None):
        got.append((a, b))
        return {"any": "thing"}

    plan = make_plan(S("l", "action", action="t.loose", args={"a": None, "b": [1]}))
    assert runtime.run(plan, {}, initiator="user:ana").state == "completed" and got == [(None, [1])]


@dataclasses.dataclass
class Locked:
    lock: threading.Lock  # a field pydantic cannot describe or build


def test_given_a_parameter_type_pydantic_cannot_build_then_it_is_any_value_and_the_action_runs(runtime, registry):
    # Given an action whose parameter is a dataclass with a field of an arbitrary class
    got = []

    @action("t.locked", registry=registry)
    def locked(ctx, p: Locked):
        got.append(p)
        return "ok"

    # When it runs with a map for it, Then the map passes as it is (no crash building a converter)
    plan = make_plan(S("l", "action", action="t.locked", args={"p": {"lock": "none"}}))
    assert runtime.run(plan, {}, initiator="user:ana").state == "completed" and got == [{"lock": "none"}]
