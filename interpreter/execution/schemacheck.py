"""Checking a value against a JSON Schema the plan declares: one compiled validator per (plan, step, what), kept in
the runtime's validator cache (never compiled per attempt or per offer), and the best-matching error, located.

Used for a step's ``output_schema`` (:mod:`sealflow.steps.checks`), a wait's event ``schema``, a callback's result
``schema`` (:mod:`sealflow.runtime.hearing`) and an editable gate's ``editable.schema``
(:mod:`sealflow.policy.approvals`).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from sealflow.execution.context import Execution


def validator(x: Execution, schema: dict[str, Any], what: str) -> Any:
    """The compiled validator of ``schema``, the ``what`` schema of ``x``'s step (cached per plan and step)."""
    key = (x.plan.digest, x.step.id, what)
    found = x.services.validators.get(key)
    if found is None:
        found = x.services.validators[key] = jsonschema.validators.validator_for(schema)(schema)
    return found


def best_error(checker: Any, value: Any) -> tuple[str, str, int] | None:
    """Where ``value`` breaks the schema (a ``/``-path, ``(root)`` for the whole), why, and how many errors in all;
    None when it conforms."""
    errors = list(checker.iter_errors(value))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    return "/".join(str(p) for p in best.absolute_path) or "(root)", best.message, len(errors)


def problem(x: Execution, schema: dict[str, Any] | None, value: Any, what: str) -> str | None:
    """``at WHERE: WHY`` for ``value`` against the ``what`` schema of ``x``'s step, or None when it conforms (or
    there is no schema)."""
    if schema is None:
        return None
    found = best_error(validator(x, schema, what), value)
    if found is None:
        return None
    where, why, count = found
    return f"at {where}: {why}" + (f" (and {count - 1} more)" if count > 1 else "")
