"""Output checks shared by the kinds that produce output: ``output_schema`` and ``validate``.

Validators are compiled once per (plan, step) and cached, never per attempt.
"""

from __future__ import annotations

from typing import Any

from sealflow.core.outcomes import Failed
from sealflow.dsl import expressions
from sealflow.execution.context import Execution


def schema_failure(x: Execution, schema: dict[str, Any] | None, output: Any) -> str | None:
    """The best-matching schema error for ``output``, or None when it conforms."""
    if schema is None:
        return None
    key = (x.plan.digest, x.step.id, "schema")
    validator = x.services.validators.get(key)
    if validator is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        validator = x.services.validators[key] = cls(schema)
    error = jsonschema_best(validator, output)
    return error


def jsonschema_best(validator: Any, output: Any) -> str | None:
    errors = list(validator.iter_errors(output))
    if not errors:
        return None
    import jsonschema

    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "(root)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"output does not match output_schema at {where}: {best.message}{more}"


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
