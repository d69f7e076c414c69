"""An ``ai`` step's ``fallback:`` models: which error classes hand the step to the next model.

The classes are one table, ``FALLS_BACK`` (``interpreter/core/errors.py``); docs/models.md's error table
says the same, column by column (checked here). Every model is a real adapter talking HTTP to a fake
server on 127.0.0.1, and the refused connection is a closed port on 127.0.0.1.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from interp_helpers import S, make_plan
from model_helpers import KEY

from sealflow.core.errors import ERROR_CLASSES, FALLS_BACK
from sealflow.dsl.plan import AiPlan
from sealflow.providers.loader import load_models

SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["high", "low"]}}}
DOCS = Path(__file__).resolve().parents[3] / "docs" / "models.md"


@pytest.fixture
def clock():
    """The real clock: a step's deadline is a wall-clock time the adapters compare with time.time()."""
    from sealflow.core.clock import SYSTEM

    return SYSTEM


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: bound, then closed, so a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def providers(server):
    entry = {"provider": "openai", "base_url": server.base_url, "api_key": {"secret": "K"}}
    return load_models({"models": {
        "backup": {**entry, "model": "gpt-4o-mini"},
        "refused": {**entry, "base_url": f"http://127.0.0.1:{closed_port()}/v1", "model": "gpt-4o-mini"},
        "dropped": {**entry, "model": "drop"},
        "slow": {**entry, "model": "slow", "timeout": "200ms"},
        "limited": {**entry, "model": "rate-limited"},
        "overloaded": {**entry, "model": "status-503"},
        "gone": {**entry, "model": "no-model"},
        "wrong-key": {**entry, "model": "gpt-4o-mini", "api_key": {"secret": "WRONG"}},
        "bad-request": {**entry, "model": "context-length"},
    }}, {"K": KEY, "WRONG": "sk-wrong-0000000000000"})


def classify(primary: str) -> dict:
    return S("classify", "ai", ai=AiPlan(model=primary, fallback=("backup",), prompt_template="Classify",
                                         output_schema=SCHEMA))


@pytest.mark.parametrize(("primary", "error_class"), [
    ("refused", "network"),        # connection refused: nothing listens on the port
    ("dropped", "network"),        # the server closes the connection without answering
    ("slow", "timeout"),           # no answer within the model's own timeout
    ("limited", "rate_limited"),   # the provider's 429
    ("overloaded", "unavailable"),  # 503
    ("gone", "configuration"),     # 404: no such model
])
def test_given_a_primary_failing_with_a_falling_back_class_when_the_step_runs_then_the_fallback_answers(
        runtime, server, primary, error_class):
    # Given an ai step whose primary model fails with `error_class` and whose fallback answers
    assert error_class in FALLS_BACK
    # When it runs
    status = runtime.run(make_plan(classify(primary), output="${{ steps.classify.output }}"), {}, initiator="u")
    # Then the run completes on the fallback's answer, in the first attempt
    assert status.state == "completed", status.run.error_message
    assert status.output["label"] in ("high", "low")
    (detail,) = [e.detail for e in runtime.store.audit(status.run.id)
                 if e.step_id == "classify" and (e.detail or {}).get("calls")]
    # and the audit records the primary's failure then the fallback's answer
    assert [(c["model"], c.get("error")) for c in detail["calls"]] == [(primary, error_class), ("backup", None)]
    assert detail["model"] == "gpt-4o-mini-2026"
    assert [a.attempt for a in runtime.store.attempts(status.run.id)] == [1]


@pytest.mark.parametrize(("primary", "model_id", "error_class"), [
    ("wrong-key", "gpt-4o-mini", "unauthorized"),
    ("bad-request", "context-length", "invalid_request"),
])
def test_given_a_primary_failing_with_a_class_that_does_not_fall_back_then_the_fallback_is_not_asked(
        runtime, server, primary, model_id, error_class):
    # Given an ai step whose primary fails with a class the table does not list
    assert error_class not in FALLS_BACK
    before = len(server.requests)
    # When it runs
    status = runtime.run(make_plan(classify(primary)), {}, initiator="u")
    # Then the step fails with that class and the fallback was never called
    assert (status.state, status.run.error_class) == ("failed", error_class)
    assert [r[2]["model"] for r in server.requests[before:]] == [model_id]


def _documented_fallbacks() -> dict[str, bool]:
    """docs/models.md's error table: class -> whether its `fallback` column says yes."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    col = next(i for i, name in enumerate(header) if "fallback" in name)
    cls_col = header.index("error class")
    found: dict[str, bool] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        (cls,) = re.findall(r"`([a-z_]+)`", cells[cls_col])
        first = re.match(r"(yes|no)\b", cells[col])
        assert first is not None, f"the fallback column says neither yes nor no: {line}"
        says = first.group(1)
        found.setdefault(cls, says == "yes")
        assert found[cls] == (says == "yes"), f"{cls} is listed as both falling back and not: {line}"
    return found


def test_the_documented_error_table_and_the_code_agree_on_which_classes_fall_back():
    # Given docs/models.md's error table / When its fallback column is read
    documented = _documented_fallbacks()
    # Then every class it marks yes is in FALLS_BACK and every one it marks no is not
    assert {c for c, yes in documented.items() if yes} == {c for c in documented if c in FALLS_BACK}
    # and the classes that fall back without a row of their own (an open breaker) are named under the table
    assert set(FALLS_BACK) <= set(documented) | {"circuit_open"}
    assert set(FALLS_BACK) <= set(ERROR_CLASSES)
    assert "`circuit_open`" in DOCS.read_text(encoding="utf-8").split("## Errors", 1)[1].split("\n## ", 1)[0]
