"""Actions describe themselves (issue 32): input and output schemas from Python declarations."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pydantic
import pytest

from sealflow.core.errors import ActionRegistrationError
from sealflow.execution.action_schema import parameter_docs, parameters_schema, return_schema
from sealflow.execution.actions import Registry, action


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Lead(TypedDict):
    id: str
    score: int
    tags: NotRequired[list[str]]


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


def test_given_each_supported_annotation_then_its_schema():
    def fn(ctx, s: str, i: int, f: float, b: bool, items: list[int], m: dict[str, float], lit: Literal["a", "b"],
           colour: Colour, opt: Optional[str], lead: Lead, address: Address, point: Point,  # noqa: UP045
           refined: Annotated[str, {"maxLength": 5}], anything: Any, untyped, with_default: int = 3):
        ...

    props = parameters_schema(fn)["properties"]
    assert props["s"] == {"type": "string"} and props["i"] == {"type": "integer"}
    assert props["f"] == {"type": "number"} and props["b"] == {"type": "boolean"}
    assert props["items"] == {"type": "array", "items": {"type": "integer"}}
    assert props["m"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["lit"] == {"enum": ["a", "b"]} and props["colour"] == {"enum": ["red", "blue"]}
    assert props["opt"] == {"type": ["string", "null"]}
    assert props["lead"] == {"type": "object", "required": ["id", "score"], "additionalProperties": False,
                             "properties": {"id": {"type": "string"}, "score": {"type": "integer"},
                                            "tags": {"type": "array", "items": {"type": "string"}}}}
    assert props["address"]["properties"]["city"] == {"type": "string"} and props["address"]["required"] == ["city"]
    assert props["point"]["properties"]["x"] == {"type": "number"} and props["point"]["required"] == ["x"]
    assert props["refined"] == {"type": "string", "maxLength": 5}
    assert props["anything"] == {} and props["untyped"] == {}
    schema = parameters_schema(fn)
    assert "with_default" not in schema["required"] and "s" in schema["required"]
    assert schema["additionalProperties"] is False


def test_given_kwargs_then_other_arguments_are_accepted():
    def fn(ctx, a: str, **rest):
        ...

    assert parameters_schema(fn, kwargs_open=True)["additionalProperties"] is True
    assert parameters_schema(fn)["additionalProperties"] is False  # as a tool for a model: only what it names


def test_given_a_return_annotation_then_the_output_schema_and_none_without_one():
    def typed(ctx) -> Lead:
        ...

    def bare(ctx):
        ...

    def any_(ctx) -> Any:
        ...

    assert return_schema(typed)["properties"]["score"] == {"type": "integer"}
    assert return_schema(bare) is None and return_schema(any_) is None


def test_given_an_unresolvable_annotation_then_any_value_not_an_error():
    def fn(ctx, x: "NoSuchType") -> "AlsoMissing":  # noqa: F821, UP037 - the point of the test
        ...

    assert parameters_schema(fn)["properties"] == {"x": {}} and return_schema(fn) is None


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


def test_given_a_recursive_model_then_the_recursion_is_any_value():
    def fn(ctx, tree: Node):
        ...

    tree = parameters_schema(fn)["properties"]["tree"]
    assert tree["properties"]["name"] == {"type": "string"}
    assert tree["properties"]["children"]["items"] == {}


def test_given_declared_output_schema_then_it_wins_and_an_invalid_one_is_refused_at_registration():
    registry = Registry()

    @action("t.declared", output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            registry=registry)
    def declared(ctx) -> dict:
        return {"ok": True}

    assert declared.output_schema == {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    with pytest.raises(ActionRegistrationError, match="output_schema is not a valid JSON Schema"):
        action("t.bad", output_schema={"type": "nope"}, registry=registry)
    with pytest.raises(ActionRegistrationError, match="must be a JSON Schema"):
        action("t.bad", output_schema=["x"], registry=registry)  # type: ignore[arg-type]


def test_given_a_docstring_then_describe_gives_summary_and_parameter_descriptions():
    registry = Registry()

    @action("t.doc", effect="write", permissions=["t:w"], secrets=["tok"], registry=registry)
    def doc(ctx, name: str, count: int = 1) -> Lead:
        """Do the thing.

        More words.

        Args:
            name: who it is for
            count (int): how many times
        """

    described = doc.describe()
    assert described["description"] == "Do the thing."
    assert described["input_schema"]["properties"]["name"] == {"type": "string", "description": "who it is for"}
    assert described["input_schema"]["properties"]["count"]["description"] == "how many times"
    assert described["effect"] == "write" and described["secrets"] == ["tok"]
    assert described["source"].endswith(f"test_action_schema.py:{doc.fn.__code__.co_firstlineno}")
    assert parameter_docs(lambda ctx: None) == {}
