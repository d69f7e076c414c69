"""The provider interface, the provider registry and the deterministic local model."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow.core.errors import StepError
from sealflow.providers import (
    PROVIDERS,
    LocalModel,
    ModelRequest,
    ModelResult,
    Provider,
    ProviderRegistry,
    assess_lead,
    default_registry,
    error_for_status,
    remaining_seconds,
)
from sealflow.providers.synth import fit, sample_pattern

ROOT = Path(__file__).resolve().parents[3]

LEAD_SCHEMA = {
    "type": "object",
    "required": ["classification", "reason"],
    "properties": {"classification": {"enum": ["high", "medium", "low"]}, "reason": {"type": "string"}},
}


def complete(prompt: str, schema: dict | None = None, **kw) -> ModelResult:
    return PROVIDERS.get("default").complete(ModelRequest("default", prompt, output_schema=schema, **kw))


def valid(schema: dict, value) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)


# --- the interface ---------------------------------------------------------------------------

def test_request_and_result_are_frozen_dataclasses_with_the_documented_fields():
    assert [f.name for f in dataclasses.fields(ModelRequest)] == [
        "model", "prompt", "system", "output_schema", "max_tokens", "temperature", "idempotency_key", "deadline",
        "tools", "transcript"]
    assert [f.name for f in dataclasses.fields(ModelResult)] == [
        "output", "text", "input_tokens", "output_tokens", "cost_usd", "model", "tool_call"]
    assert (ModelRequest("default", "hi").tools, ModelRequest("default", "hi").transcript) == ((), ())
    assert ModelResult(output=1, text="1").tool_call is None
    request = ModelRequest("default", "hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.prompt = "changed"  # type: ignore[misc]
    assert ModelResult(output=1, text="1", input_tokens=2, output_tokens=3).total_tokens == 5


def test_the_local_model_is_a_provider():
    assert isinstance(LocalModel(), Provider)
    assert isinstance(PROVIDERS.get("default"), LocalModel)


@pytest.mark.parametrize("status, error_class", [
    (429, "rate_limited"), (500, "unavailable"), (503, "unavailable"), (408, "timeout"), (504, "timeout"),
    (400, "invalid_request"), (422, "invalid_request"), (401, "unauthorized"), (403, "unauthorized"),
    (404, "configuration"),
])
def test_http_statuses_map_to_error_classes(status, error_class):
    err = error_for_status(status, retry_after=3.0)
    assert isinstance(err, StepError) and err.error_class == error_class
    assert err.retry_after == (3.0 if error_class in ("rate_limited", "unavailable") else None)


def test_remaining_seconds_counts_down_to_the_deadline():
    assert remaining_seconds(ModelRequest("m", "p")) is None
    assert remaining_seconds(ModelRequest("m", "p", deadline=110.0), now=100.0) == 10.0


# --- the registry ----------------------------------------------------------------------------

class Echo:
    def __init__(self, name: str):
        self.name = name

    def complete(self, request: ModelRequest) -> ModelResult:
        return ModelResult(output=request.prompt, text=request.prompt, model=request.model)


def test_registry_routes_exact_names_before_the_longest_prefix():
    reg = ProviderRegistry()
    general, special, exact = Echo("general"), Echo("special"), Echo("exact")
    reg.register(general, prefixes=["openai/"])
    reg.register(special, prefixes=["openai/gpt-4"])
    reg.register(exact, "openai/gpt-4o-mini")
    assert reg.get("openai/o3") is general
    assert reg.get("openai/gpt-4o") is special
    assert reg.get("openai/gpt-4o-mini") is exact
    assert "openai/anything" in reg and "anthropic/x" not in reg


def test_unknown_model_is_a_configuration_error_naming_the_known_models():
    reg = default_registry()
    reg.register(Echo("e"), prefixes=["acme/"])
    with pytest.raises(StepError) as info:
        reg.get("gpt-9")
    assert info.value.error_class == "configuration"
    assert info.value.message == "unknown model 'gpt-9'; known: default, acme/*"


def test_register_needs_a_name():
    with pytest.raises(ValueError):
        ProviderRegistry().register(Echo("e"))


# --- the local model: the lead-qualification example ----------------------------------------

@pytest.mark.parametrize("lead, label", [
    ({"company": "Acme Corporation", "employees": 5000, "budget_usd": 250000, "notes": "Enterprise plan"}, "high"),
    ({"company": "Globex", "employees": 12000, "budget_usd": 1200000}, "high"),
    ({"company": "Small but rich", "employees": 8, "budget_usd": 150000}, "high"),
    ({"company": "MidCo", "employees": 180, "budget_usd": 40000}, "medium"),
    ({"company": "Mixed", "employees": 20, "budget_usd": 40000}, "medium"),
    ({"company": "QuietCo", "employees": None, "budget_usd": None}, "medium"),
    ({"company": "Bob's Bikes", "employees": 2, "budget_usd": 500}, "low"),
    ({"company": "Tiny Cafe", "employees": 4, "budget_usd": None}, "low"),
])
def test_leads_are_classified_by_the_documented_rule(lead, label):
    # Given the prompt the example renders (a map interpolates as compact JSON)
    prompt = "Classify this lead: " + json.dumps(lead, separators=(",", ":"))
    # When the local model answers
    result = complete(prompt, LEAD_SCHEMA)
    # Then the output satisfies the schema, carries the rule's label and a reason
    assert valid(LEAD_SCHEMA, result.output)
    assert result.output["classification"] == label
    assert result.output["reason"].startswith(f"{label} value: ")
    # and the example's validate rule holds
    assert result.output["classification"] != "high" or len(result.output["reason"]) > 0


@pytest.mark.parametrize("text, label", [
    ("An enterprise with 5,000 employees", "high"),
    ("budget of $250k, 30 staff", "high"),
    ("headcount: 12; budget: 3000", "low"),
    ("a solo freelancer", "low"),
    ("{'employees': 400, 'budget_usd': 20000.0}", "medium"),
    ("nothing useful here", "medium"),
])
def test_the_lead_rule_reads_prose_and_python_reprs(text, label):
    assert assess_lead(text).label == label


def test_the_reason_lists_the_evidence():
    assert assess_lead('{"employees":5000,"budget_usd":250000,"notes":"Enterprise plan"}').reason == \
        "high value: enterprise account, 5,000 employees, a $250,000 budget"
    assert assess_lead("hello").reason == "medium value: the lead gives no size or budget signal"


def test_the_same_request_always_gets_the_same_answer():
    prompt = 'Classify this lead: {"employees":180}'
    first, second = complete(prompt, LEAD_SCHEMA, temperature=1.0), LocalModel().complete(
        ModelRequest("default", prompt, output_schema=LEAD_SCHEMA, temperature=0.0))
    assert first == second


def test_usage_is_estimated_and_free():
    result = complete("x" * 40, LEAD_SCHEMA, system="y" * 8)
    assert result.input_tokens == 12
    assert result.output_tokens == max(1, len(result.text) // 4)
    assert result.cost_usd == 0.0 and result.model == "default"
    assert json.loads(result.text) == result.output


# --- the local model: other schemas and plain text ------------------------------------------

def test_without_a_schema_the_output_is_a_deterministic_summary():
    result = complete("Please summarise: the quarterly numbers look good. See https://x.example/a")
    assert result.output == result.text == "Summary: Please summarise: the quarterly numbers look good. See"
    assert len(complete("word " * 500, max_tokens=10).text) <= 40


def test_bad_requests_are_invalid_request():
    for request in (ModelRequest("default", "p", max_tokens=0), ModelRequest("default", "p", output_schema="x")):
        with pytest.raises(StepError) as info:
            LocalModel().complete(request)
        assert info.value.error_class == "invalid_request"


def _definition_model_steps():
    from sealflow.dsl.api import compile_file

    for path in sorted((ROOT / "definitions").glob("*.yaml")):
        plan = compile_file(path)
        for step in plan.steps:
            spec = step.ai or step.agent
            if spec is not None and spec.output_schema:
                yield pytest.param(spec, id=f"{plan.name}:{step.id}")


@pytest.mark.parametrize("spec", list(_definition_model_steps()))
def test_every_model_step_of_the_example_definitions_gets_a_valid_output(spec):
    prompt = getattr(spec, "prompt_template", None) or getattr(spec, "goal", "")
    result = complete(prompt, spec.output_schema, system=spec.system)
    assert valid(spec.output_schema, result.output), result.output
    assert "http" not in result.text  # links in the prompt never leak into generated text


def test_image_enhancement_output_passes_the_pipeline_rules():
    schema = json.loads((ROOT / "schemas" / "image-upload-pipeline-enhancement.json").read_text())
    out = complete("Describe the image at https://media.demo.invalid/p/img_1/medium.jpg (1024x768 pixels).",
                   schema).output
    assert valid(schema, out)
    assert "http" not in out["alt_text"].lower() and not out["alt_text"].lower().startswith("image of")
    assert len(out["tags"]) > 0 and out["content_rating"] == "safe"


def test_refs_combinators_and_formats():
    schema = {
        "$defs": {"point": {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer",
                                                                                       "minimum": 3}}}},
        "type": "object",
        "required": ["p", "any", "all", "when", "language", "maybe"],
        "properties": {
            "p": {"$ref": "#/$defs/point"},
            "any": {"anyOf": [{"type": "string", "minLength": 3}, {"type": "null"}]},
            "all": {"allOf": [{"type": "object", "required": ["a"]}, {"required": ["b"],
                                                                       "properties": {"b": {"const": 7}}}]},
            "when": {"type": "string", "format": "date-time"},
            "language": {"type": "string", "pattern": "^[a-z]{2}$"},
            "maybe": {"type": ["null", "boolean"]},
        },
        "additionalProperties": False,
    }
    out = complete("anything", schema).output
    assert valid(schema, out)
    assert out["p"] == {"x": 3} and out["all"]["b"] == 7 and out["language"] == "en" and out["maybe"] is False


@pytest.mark.parametrize("pattern", [
    "^[a-z]{2}$", "^[a-z0-9][a-z0-9-]{0,31}$", "^lead_[a-z0-9]+$", "^[A-Z]{3}-[0-9]{4}$", r"^\d{3}$",
    "colou?r", "^(yes|no)$", "[^a-z0-9]+", r"^(kb|order|ticket):[A-Za-z0-9_-]{1,64}$", r"^\w+@\w+\.com$",
])
def test_pattern_samples_match(pattern):
    assert re.search(pattern, sample_pattern(pattern))


def test_fit_cuts_at_a_word_and_pads_to_the_minimum():
    assert fit("one two three", 0, 9) == "one two"
    assert len(fit("ab", 10, 12)) >= 10
    assert fit("anything", 0, 0) == ""


# --- property: random simple schemas ---------------------------------------------------------

PATTERNS = ["^[a-z]{2}$", "^[a-z0-9][a-z0-9-]{0,31}$", "^lead_[a-z0-9]+$", "^[A-Z]{3}-[0-9]{4}$", r"^\d{3}$",
            "^(yes|no)$", "x"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.text(max_size=6))


@st.composite
def string_schemas(draw):
    schema: dict = {"type": "string"}
    kind = draw(st.sampled_from(["plain", "bounded", "pattern", "format"]))
    if kind == "bounded":
        low = draw(st.integers(0, 30))
        if draw(st.booleans()):
            schema["minLength"] = low
        if draw(st.booleans()):
            schema["maxLength"] = draw(st.integers(max(low, 0) if "minLength" in schema else 0, low + 40))
    elif kind == "pattern":
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    elif kind == "format":
        schema["format"] = draw(st.sampled_from(["email", "date", "date-time", "uri", "uuid", "ipv4"]))
    return schema


@st.composite
def number_schemas(draw):
    integer = draw(st.booleans())
    schema: dict = {"type": "integer" if integer else "number"}
    low = draw(st.integers(-1000, 1000))
    step = draw(st.integers(1, 7)) if integer and draw(st.booleans()) else None
    if step:
        schema["multipleOf"] = step
    gap = draw(st.integers((step or 1) + 1, 500))
    if draw(st.booleans()):
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if draw(st.booleans()):
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = low + gap
    if not integer and draw(st.booleans()):  # fractional bounds
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key in schema:
                schema[key] = schema[key] / 8
    return schema


LEAVES = st.one_of(
    string_schemas(), number_schemas(), st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.lists(SCALARS, min_size=1, max_size=4).map(lambda e: {"enum": e}),
    SCALARS.map(lambda c: {"const": c}),
    st.just({}),
)
UNIQUE_FRIENDLY = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "number"}])


def _extend(children):
    names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)

    @st.composite
    def objects(draw):
        props = draw(st.dictionaries(names, children, min_size=1, max_size=4))
        schema = {"type": "object", "properties": props,
                  "required": draw(st.lists(st.sampled_from(sorted(props)), unique=True))}
        if draw(st.booleans()):
            schema["additionalProperties"] = False
        return schema

    @st.composite
    def arrays(draw):
        unique = draw(st.booleans())
        items = draw(UNIQUE_FRIENDLY if unique else children)
        low = draw(st.integers(0, 3))
        schema = {"type": "array", "items": items, "minItems": low}
        if draw(st.booleans()):
            schema["maxItems"] = draw(st.integers(low, low + 3))
        if unique:
            schema["uniqueItems"] = True
        return schema

    return st.one_of(objects(), arrays())


SCHEMAS = st.recursive(LEAVES, _extend, max_leaves=10)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, prompt=st.text(max_size=200))
def test_outputs_satisfy_random_schemas_and_are_deterministic(schema, prompt):
    first = complete(prompt, schema)
    assert valid(schema, first.output), (schema, first.output)
    assert complete(prompt, schema) == first
