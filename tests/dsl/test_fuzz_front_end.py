"""Fuzz the language front end: random and mutated YAML, expressions and JSON through the Python API.

The property, per input under the size limit: ``validate``/``lint``/``plan``/``graph``/``diff``
(:mod:`sealflow.dsl.api`, :mod:`sealflow.dsl.graph`, :mod:`sealflow.dsl.diff`) give a clean result or
located diagnostics, never an internal error (E000) or an uncaught exception, and each input takes
under 2 s and 512 MiB (measured with tracemalloc around the call, the example's own bound).

A few thousand examples in CI; set ``SEALFLOW_FUZZ_EXAMPLES`` for a longer local campaign.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow.dsl.api import check_bytes
from sealflow.dsl.diff import diff_plans
from sealflow.dsl.graph import to_dot, to_mermaid

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted((ROOT / "tests" / "cases" / "valid").glob("*.yaml"))
SEED_TEXT = [p.read_text(encoding="utf-8") for p in SEEDS]
BASE_PLAN = check_bytes(SEED_TEXT[0].encode(), "seed.yaml").plan
EXAMPLES = int(os.environ.get("SEALFLOW_FUZZ_EXAMPLES", "700"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("SEALFLOW_FUZZ_EXAMPLES"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MAX_SECONDS = 2.0
MAX_BYTES = 512 * 1024 * 1024

#: fragments that reached crash sites before, and YAML/expression syntax worth mixing in
TOKENS = [
    "1" * 5000, "0x" + "f" * 600, "!!float " + "9" * 400, "1e400", "-1e400", ".inf", ".nan", "9007199254740993",
    "&a", "*a", "&b [*a, *a, *a]", "[[[[[[[[", "]]]]", "{", "}", "!!python/object:os.system", "!!binary", "<<: *a",
    "${{", "}}", "${{ steps.x.output }}", "'", '"', "\\", "\t", "\x00", "\x85", "\u2028", "#", "- ", ": ", "?",
    "|", ">", "---", "...", "%YAML 1.1", "on:", "when:", "next: end", "- id: x\n    set: {a: 1}",
    "str([input.a, input.a, input.a])", "int('99999999999999999999')", "float('1e308') * 10", "1/0",
    "\n", "\n  ", "\n    ", "$ref: ../../etc/passwd", "-" * 80, "é", "\ud800",
]


def _run(data: bytes) -> None:
    """Everything a user can do with ``data`` through the API; failures of the property raise."""
    result = check_bytes(data, "fuzz.yaml", lint=True)
    for diag in result.diagnostics:
        assert diag.code != "E000", diag.format()
        assert diag.location is not None and diag.location.path == "fuzz.yaml"
    if result.plan is not None:
        to_mermaid(result.plan)
        to_dot(result.plan)
        result.plan.canonical_json()
        for finding in diff_plans(BASE_PLAN, result.plan, locate=result.document.locate, path="fuzz.yaml"):
            finding.format()
            json.dumps(finding.as_dict(), default=str)


def check_property(data: bytes) -> None:
    tracemalloc.start()
    started = time.monotonic()
    try:
        _run(data)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # tracemalloc slows Python down by a small factor: the time bound allows for it
    assert elapsed < MAX_SECONDS * 3, f"{elapsed:.1f}s for {len(data)} bytes"
    assert peak < MAX_BYTES, f"{peak / 2**20:.0f} MiB for {len(data)} bytes"


@st.composite
def mutated_yaml(draw) -> bytes:
    text = draw(st.sampled_from(SEED_TEXT))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        piece = draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)))
        if op == "insert":
            text = text[:at] + piece + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif op == "replace":
            text = text[:at] + piece + text[at + len(piece):]
        else:
            end = min(len(text), at + draw(st.integers(1, 200)))
            text = text[:end] + text[at:end] * draw(st.integers(1, 20)) + text[end:]
    return text.encode("utf-8", "surrogatepass")


EXPRESSION_PIECES = st.sampled_from([
    "input.a", "steps.fetch.output", "run.id", "1", "1.5", "'x'", "null", "true", "[1, 2]", "{'a': 1}",
    "len(", "str(", "int(", "float(", "default(", "now()", "duration('5m')", ")", "]", "+", "*", "/", "%",
    "==", "!=", " and ", " or ", " not ", " in ", "(", ",", "9" * 25, "1e999", "'" + "x" * 300 + "'", ".",
    "[0]", "['k']", "output", "env.HOME", "${{", "}}",
])


@st.composite
def expression_yaml(draw) -> bytes:
    expr = "".join(draw(st.lists(EXPRESSION_PIECES, min_size=1, max_size=30)))
    quoted = json.dumps(expr)
    where = draw(st.sampled_from(["when", "set", "with", "validate", "show"]))
    step = {
        "when": f"  - id: s\n    when: {quoted}\n    set: {{x: '1'}}\n",
        "set": f"  - id: s\n    set: {{x: {quoted}}}\n",
        "with": f"  - id: s\n    action: crm.get\n    with: {{x: {json.dumps('${{ ' + expr + ' }}')}}}\n",
        "validate": f"  - id: s\n    action: crm.get\n    validate: [{quoted}]\n",
        "show": f"  - id: s\n    approval: {{approvers: [role:x], timeout: 1h, show: {quoted}}}\n",
    }[where]
    head = "sealflow: 1\nname: fuzz\nversion: 1\nowner: team:qa\ninput:\n  schema: {type: object}\nsteps:\n"
    return (head + "  - id: fetch\n    action: crm.get\n" + step).encode("utf-8", "surrogatepass")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=40,
)


@st.composite
def json_documents(draw) -> bytes:
    seed = check_bytes(draw(st.sampled_from(SEED_TEXT)).encode(), "seed.yaml").document.data
    doc = json.loads(json.dumps(seed))
    if draw(st.booleans()):
        return json.dumps(draw(JSON_VALUES)).encode()
    # replace one field somewhere in a valid definition with a random JSON value
    node, path = doc, []
    for _ in range(draw(st.integers(1, 4))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            key = draw(st.integers(0, len(node) - 1))
        else:
            break
        path.append((node, key))
        node = node[key]
    if path:
        parent, key = path[-1]
        parent[key] = draw(JSON_VALUES)
    return json.dumps(doc, allow_nan=True).encode()


@FUZZ
@given(mutated_yaml())
def test_fuzz_mutated_yaml_gives_located_diagnostics_or_a_plan(data):
    check_property(data)


@FUZZ
@given(expression_yaml())
def test_fuzz_expressions_give_located_diagnostics_or_a_plan(data):
    check_property(data)


@FUZZ
@given(json_documents())
def test_fuzz_json_inputs_give_located_diagnostics_or_a_plan(data):
    check_property(data)


@settings(max_examples=max(50, EXAMPLES // 10), deadline=None, derandomize=not os.environ.get("SEALFLOW_FUZZ_EXAMPLES"))
@given(st.binary(max_size=2000))
def test_fuzz_random_bytes_give_located_diagnostics(data):
    check_property(data)
