"""The ``@action`` decorator and the registry of actions.

Import-light on purpose: validation imports action modules to learn their
permissions and effects, so this module pulls in no broker and no store.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from sealflow.core.errors import ActionRegistrationError

EFFECTS = ("read", "write", "irreversible")
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


@dataclasses.dataclass(frozen=True)
class Action:
    """A registered action: a Python callable plus what it needs and what it does."""

    name: str
    fn: Callable[..., Any]
    permissions: tuple[str, ...] = ()
    effect: str = "read"
    secrets: tuple[str, ...] = ()
    description: str = ""
    #: ``thread`` / ``process`` (None: the step's choice, else the worker's default; see execution.isolation)
    isolation: str | None = None
    #: the action's target applies an effect once per ``ctx.idempotency_key`` (False: an SMS gateway, a legacy
    #: API: a lost attempt may or may not have acted, and waits for a person: engine/poison.py)
    honours_idempotency_key: bool = True
    #: ``@action(output_schema=...)``: what it returns, when its return annotation does not say
    declared_output: dict[str, Any] | None = None

    def __call__(self, ctx: Any, **kwargs: Any) -> Any:
        return self.fn(ctx, **kwargs)

    @property
    def parameters(self) -> list[str]:
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of its ``with:`` arguments, from the signature and type hints (action_schema)."""
        from sealflow.execution.action_schema import parameters_schema

        return parameters_schema(self.fn, kwargs_open=True)

    @functools.cached_property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of what it returns (``output_schema=``, else the return annotation), or None."""
        if self.declared_output is not None:
            return self.declared_output
        from sealflow.execution.action_schema import return_schema

        return return_schema(self.fn)

    def describe(self) -> dict[str, Any]:
        """Everything a definition's author and the compiler know of it, as JSON data."""
        from sealflow.execution.action_schema import parameter_docs, source_of, summary

        docs = parameter_docs(self.fn)
        inputs = self.input_schema
        if docs and isinstance(inputs.get("properties"), dict):
            inputs = {**inputs, "properties": {k: ({**v, "description": docs[k]} if k in docs else v)
                                               for k, v in inputs["properties"].items()}}
        return {"name": self.name, "description": summary(self.fn), "effect": self.effect,
                "permissions": list(self.permissions), "secrets": list(self.secrets),
                "honours_idempotency_key": self.honours_idempotency_key, "isolation": self.isolation,
                "input_schema": inputs, "output_schema": self.output_schema, "source": source_of(self.fn)}


class Registry:
    """Actions by name. The default registry is :data:`REGISTRY`."""

    def __init__(self) -> None:
        self._actions: dict[str, Action] = {}

    def register(self, act: Action) -> Action:
        existing = self._actions.get(act.name)
        if existing is not None and existing.fn is not act.fn:
            same_place = (
                getattr(existing.fn, "__module__", None) == getattr(act.fn, "__module__", None)
                and getattr(existing.fn, "__qualname__", None) == getattr(act.fn, "__qualname__", None)
            )
            if not same_place:
                raise ActionRegistrationError(
                    f"action {act.name!r} is registered twice "
                    f"({existing.fn.__module__}.{existing.fn.__qualname__} and "
                    f"{act.fn.__module__}.{act.fn.__qualname__}); rename one of them"
                )
        self._actions[act.name] = act
        return act

    def get(self, name: str) -> Action | None:
        return self._actions.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._actions))

    def items(self) -> list[tuple[str, Action]]:
        return sorted(self._actions.items())


REGISTRY = Registry()


def action(
    name: str,
    *,
    permissions: list[str] | tuple[str, ...] = (),
    effect: str = "read",
    secrets: list[str] | tuple[str, ...] = (),
    registry: Registry | None = None,
    isolation: str | None = None,
    honours_idempotency_key: bool = True,
    output_schema: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Action]:
    """Register a function as the action ``name``.

    ``effect`` is ``read``, ``write`` or ``irreversible``; ``permissions`` are what the
    step must hold; ``secrets`` are resolved at execution time into ``ctx.secrets``;
    ``isolation="process"`` runs every attempt in a child process unless the step says otherwise;
    ``honours_idempotency_key=False`` says the target cannot deduplicate (a ``write`` or ``irreversible``
    effect only): its steps need no ``idempotency_key``, and an attempt of it that was lost (its worker died
    mid-call) is not run again but waits for a person's decision (retry, succeeded, failed).
    ``output_schema`` (a JSON Schema) says what it returns when its return annotation does not: the compiler
    checks ``steps.X.output.FIELD`` against it, and a result that breaks it fails the step (``invalid_output``).
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ActionRegistrationError(
            f"action name {name!r} must look like 'area.verb' (lowercase, dotted), e.g. 'crm.get_lead'"
        )
    if effect not in EFFECTS:
        raise ActionRegistrationError(f"action {name!r}: effect {effect!r} must be one of {', '.join(EFFECTS)}")
    if isolation not in (None, "thread", "process"):
        raise ActionRegistrationError(f"action {name!r}: isolation {isolation!r} must be 'thread' or 'process'")
    if not isinstance(honours_idempotency_key, bool):
        raise ActionRegistrationError(f"action {name!r}: honours_idempotency_key must be True or False, not "
                                      f"{honours_idempotency_key!r}")
    if not honours_idempotency_key and effect == "read":
        raise ActionRegistrationError(f"action {name!r}: honours_idempotency_key=False says a repeated call may "
                                      "repeat an effect, but the action's effect is 'read'; declare "
                                      "effect='write' or 'irreversible', or drop honours_idempotency_key")

    if output_schema is not None:
        _check_output_schema(name, output_schema)

    def decorate(fn: Callable[..., Any]) -> Action:
        if not callable(fn):
            raise ActionRegistrationError(f"@action({name!r}) must decorate a function")
        act = Action(name, fn, tuple(permissions), effect, tuple(secrets), (fn.__doc__ or "").strip(), isolation,
                     honours_idempotency_key, output_schema)
        return (registry or REGISTRY).register(act)

    return decorate


def _check_output_schema(name: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise ActionRegistrationError(f"action {name!r}: output_schema must be a JSON Schema (a dict), not "
                                      f"{type(schema).__name__}")
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ActionRegistrationError(f"action {name!r}: output_schema is not a valid JSON Schema: "
                                      f"{exc.message}") from None
