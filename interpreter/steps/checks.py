"""Output checks shared by the kinds that produce output: ``output_schema`` and ``validate``.

Validators are compiled once per (plan, step) and cached, never per attempt.
"""

from __future__ import annotations

from typing import Any

from sealflow.core.outcomes import Failed
from sealflow.dsl import expressions
from sealflow.execution import schemacheck
from sealflow.execution.context import Execution


def schema_failure(x: Execution, schema: dict[str, Any] | None, output: Any) -> str | None:
    """The best-matching schema error for ``output``, or None when it conforms."""
    found = schemacheck.problem(x, schema, output, "schema")
    return None if found is None else f"output does not match output_schema {found}"


def jsonschema_best(validator: Any, output: Any) -> str | None:
    found = schemacheck.best_error(validator, output)
    if found is None:
        return None
    where, why, count = found
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"output does not match output_schema at {where}: {why}{more}"


def validation_failure(x: Execution, output: Any) -> Failed | None:
    """The first ``validate`` rule that is false for ``output``, as an ``invalid_output`` failure."""
    for rule in x.step.validations:
        try:
            ok = expressions.truthy(x.evaluate(rule.check, output=output, with_output=True))
        except expressions.EvaluationError as exc:
            return Failed("invalid_output", f"validate rule {rule.check!r} could not be evaluated: {exc}")
        if not ok:
            return Failed("invalid_output", rule.message or f"validate rule failed: {rule.check}")
    return None
