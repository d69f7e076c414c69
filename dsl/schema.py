"""Validate a loaded definition against ``schemas/workflow.schema.json``.

Every JSON Schema error becomes a located :class:`~sealflow.dsl.errors.Diagnostic` that
names the field in readable form (``steps[2].retry.max_attempts: ...``), says
what was expected in YAML terms, and carries a one-line hint. ``anyOf``/``oneOf``
failures are resolved to the branch the author evidently meant, so the message is
specific. All errors are reported, best first, without duplicates.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
import zoneinfo
from typing import Any, Callable, Iterable, Iterator

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from sealflow import schemas

from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.loader import Document, Pointer

DURATION_WORDS = "a whole number followed by ms, s, m, h or d, like 500ms, 30s, 15m, 24h, 7d"
_YAML_TYPES = {"object": "map", "array": "list", "string": "string", "integer": "integer",
               "number": "number", "boolean": "boolean", "null": "null"}
_CODES = {
    "required": "S201",
    "additionalProperties": "S202", "unevaluatedProperties": "S202",
    "type": "S203",
    "enum": "S204", "const": "S204", "pattern": "S204",
    "minimum": "S205", "maximum": "S205", "exclusiveMinimum": "S205", "exclusiveMaximum": "S205",
    "minLength": "S205", "maxLength": "S205", "minItems": "S205", "maxItems": "S205",
    "uniqueItems": "S205", "minProperties": "S205", "maxProperties": "S205",
    "format": "S209",
}
_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


# ---------------------------------------------------------------- validator

def _is_cron(value: object) -> bool:
    if not isinstance(value, str):
        return True
    from croniter import croniter

    return bool(croniter.is_valid(value))


def _is_timezone(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return not zoneinfo.available_timezones()  # no tz database on this machine: cannot tell
    return True


def format_checker() -> FormatChecker:
    """The format checker of the workflow schema: ``cron`` and ``timezone``."""
    checker = FormatChecker(formats=())
    checker.checks("cron")(_is_cron)
    checker.checks("timezone")(_is_timezone)
    return checker


@functools.lru_cache(maxsize=None)
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schemas.load(), format_checker=format_checker())


@functools.lru_cache(maxsize=None)
def _meta_validator() -> Draft202012Validator:
    meta = Draft202012Validator.META_SCHEMA
    return Draft202012Validator(meta, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_for_docs() -> dict:
    """A copy of the workflow schema (for documentation generators and editors)."""
    return copy.deepcopy(schemas.load())


# ---------------------------------------------------------------- public API

def validate(doc: Document) -> list[Diagnostic]:
    """Every schema diagnostic for ``doc``, best first; embedded JSON Schemas included."""
    mapper = _Mapper(doc, schemas.load())
    found = [d for error in _validator().iter_errors(doc.data) for d in mapper.map(error)]
    for pointer, schema in _embedded_schemas(doc.data):
        found.extend(validate_embedded_schema(schema, doc, pointer))
    return _rank(found)


def validate_embedded_schema(schema: Any, doc: Document, pointer: Pointer) -> list[Diagnostic]:
    """Check an inline JSON Schema (``input.schema``, ``output_schema``) against the 2020-12
    metaschema; every problem is S208, located inside the embedded schema."""
    pointer = tuple(pointer)
    meta = _meta_validator()
    mapper = _Mapper(doc, meta.schema, base=pointer, code="S208")
    found = [d for error in meta.iter_errors(schema) for d in mapper.map(error)]
    if isinstance(schema, dict):
        dialect = schema.get("$schema")
        if isinstance(dialect, str) and dialect.rstrip("#") != meta.schema["$id"].rstrip("#"):
            found.append(mapper.diag(
                pointer + ("$schema",), f"only JSON Schema draft 2020-12 is supported, not {dialect!r}",
                hint="remove $schema or set it to https://json-schema.org/draft/2020-12/schema"))
        found.extend(_misspelt_keywords(schema, pointer, mapper))
    return _rank(found)


# ---------------------------------------------------------------- helpers

def readable(pointer: Iterable) -> str:
    """``("steps", 2, "retry")`` -> ``steps[2].retry``; the root is ``workflow``."""
    text = ""
    for part in pointer:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT.match(part):
            text += ("." if text else "") + part
        else:
            text += f"[{part!r}]"
    return text or "workflow"


def _pointer_text(pointer: Pointer) -> str:
    return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in pointer)


def _yaml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    for kind, name in ((str, "string"), (int, "integer"), (float, "number"), (list, "list"), (dict, "map")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _show(value: Any) -> str:
    """A short rendering of a value for a message."""
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


def _flow(value: Any) -> str:
    """A value written as one line of YAML, for hints."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str):
        plain = re.match(r"^[A-Za-z0-9_][A-Za-z0-9_ .:/@-]*$", value) and ": " not in value
        return value if plain and value not in ("true", "false", "null") else '"' + value.replace('"', '\\"') + '"'
    return _show(value)


def _type_words(types: Any) -> str:
    names = [types] if isinstance(types, str) else list(types)
    words = sorted({_YAML_TYPES.get(t, t) for t in names})
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _suggest(word: Any, choices: Iterable[Any]) -> str | None:
    if not isinstance(word, str):
        return None
    names = [c for c in choices if isinstance(c, str)]
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if not close:
        close = [c for c in names if c.lower() == word.lower()]
    return close[0] if close else None


def _duration_hint(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"add a unit: '{int(value)}s' for seconds, '{int(value)}m' for minutes"
    if isinstance(value, str):
        squeezed = value.replace(" ", "")
        if squeezed != value and re.fullmatch(r"[0-9]+(ms|s|m|h|d)", squeezed):
            return f"remove the space: {squeezed}"
        if re.fullmatch(r"([0-9]+(ms|s|m|h|d)){2,}", value):
            return "use a single unit, e.g. 90m instead of 1h30m"
        if re.fullmatch(r"[0-9]*\.[0-9]+(ms|s|m|h|d)", value):
            return "use a whole number with a smaller unit, e.g. 1500ms instead of 1.5s"
        if re.fullmatch(r"[0-9]+", value):
            return f"add a unit: {value}s"
    return "write it like 500ms, 30s, 15m, 24h or 7d"


def _rank(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Best first: shallower fields, then stronger kinds of problem, then file order; no duplicates."""
    order = {"S202": 0, "S201": 1, "S203": 2, "C409": 3, "S204": 4, "S209": 4, "S205": 5, "S208": 6, "S206": 7}
    seen, unique = set(), []
    for d in diagnostics:
        key = (d.code, d.message, d.location)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    depth = lambda d: d.pointer.count("/") + 1 if d.pointer else 0  # noqa: E731
    return sorted(unique, key=lambda d: (depth(d), order.get(d.code, 9), d.location.line, d.location.column))


def _embedded_schemas(data: Any) -> Iterator[tuple[Pointer, dict]]:
    def inline(value: Any) -> bool:
        ref = value.get("$ref") if isinstance(value, dict) else None
        return isinstance(value, dict) and not (isinstance(ref, str) and not ref.startswith("#"))

    if not isinstance(data, dict):
        return
    section = data.get("input")
    if isinstance(section, dict) and inline(section.get("schema")):
        yield ("input", "schema"), section["schema"]
    steps = data.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        for kind in ("ai", "agent"):
            body = step.get(kind) if isinstance(step, dict) else None
            if isinstance(body, dict) and inline(body.get("output_schema")):
                yield ("steps", i, kind, "output_schema"), body["output_schema"]


_KEYWORDS = frozenset(Draft202012Validator.VALIDATORS) | {
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "$vocabulary", "definitions",
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
    "contentEncoding", "contentMediaType", "contentSchema",
}
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains",
                  "propertyNames", "not", "if", "then", "else")


def _misspelt_keywords(schema: Any, pointer: Pointer, mapper: "_Mapper") -> Iterator[Diagnostic]:
    """Keys of an embedded schema that look like a misspelt keyword (``proprties``)."""
    if not isinstance(schema, dict):
        return
    for key in schema:
        if key not in _KEYWORDS and not key.startswith(("x-", "$")):
            guess = _suggest(key, _KEYWORDS)
            if guess and difflib.SequenceMatcher(None, key, guess).ratio() >= 0.8:
                yield mapper.diag(pointer + (key,), f"unknown JSON Schema keyword {key!r}; did you mean {guess!r}?",
                                  hint=f"rename it to {guess!r}", key=True)
    for name in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(name), dict):
            for k, sub in schema[name].items():
                yield from _misspelt_keywords(sub, pointer + (name, k), mapper)
    for name in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(name), list):
            for i, sub in enumerate(schema[name]):
                yield from _misspelt_keywords(sub, pointer + (name, i), mapper)
    for name in _SUBSCHEMA_ONE:
        yield from _misspelt_keywords(schema.get(name), pointer + (name,), mapper)


# ---------------------------------------------------------------- error mapping

class _Mapper:
    """Turns jsonschema errors into diagnostics for one document."""

    def __init__(self, doc: Document, root: dict, base: Pointer = (), code: str | None = None):
        self.doc, self.root, self.base, self.code = doc, root, tuple(base), code
        self.duration = root.get("$defs", {}).get("duration")

    def diag(self, pointer: Pointer, message: str, code: str = "S206", hint: str | None = None,
             key: bool = False) -> Diagnostic:
        return Diagnostic(
            code=self.code or code,
            message=f"{readable(pointer)}: {message}",
            location=self.doc.locate(pointer, key=key),
            hint=hint,
            pointer=_pointer_text(pointer),
        )

    def map(self, error: ValidationError) -> list[Diagnostic]:
        pointer = self.base + tuple(error.absolute_path)
        if self.duration is not None and error.schema == self.duration:
            return [self._duration(error, pointer)]
        if "propertyNames" in error.relative_schema_path:
            return [self._property_name(error, pointer)]
        handler: Callable = getattr(self, "_" + str(error.validator), None) or self._other
        return list(handler(error, pointer))

    # -- one method per keyword family

    def _duration(self, error: ValidationError, pointer: Pointer) -> Diagnostic:
        message = f"{_show(error.instance)} is not a valid duration; write {DURATION_WORDS}"
        return Diagnostic("C409", f"{readable(pointer)}: {message}", self.doc.locate(pointer),
                          hint=_duration_hint(error.instance), pointer=_pointer_text(pointer))

    def _property_name(self, error: ValidationError, pointer: Pointer) -> Diagnostic:
        words = error.message
        if error.validator == "pattern":
            words = error.schema.get("patternErrorMessage") or f"must match the pattern {error.validator_value}"
        key = pointer + (error.instance,)
        message = f"{readable(pointer)}: {error.instance!r} is not a valid name; it {words}"
        return Diagnostic(self.code or "S204", message, self.doc.locate(key, key=True), pointer=_pointer_text(key))

    def _additionalProperties(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        allowed = sorted(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        if error.validator == "unevaluatedProperties":
            inside = error.message[error.message.find("(") + 1 : error.message.rfind(" ")]
            extras = [a or b for a, b in re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", inside)]
        else:
            extras = [k for k in error.instance if k not in allowed and not any(re.search(p, k) for p in patterns)]
        where = "at the top level" if not pointer else f"in {readable(pointer)}"
        for extra in extras:
            guess = _suggest(extra, allowed)
            message = f"unknown field {extra!r} {where}" + (f"; did you mean {guess!r}?" if guess else "")
            hint = f"rename it to {guess!r}" if guess else (
                f"allowed fields: {', '.join(allowed)}" if allowed else "remove it")
            yield Diagnostic(self.code or "S202", message, self.doc.locate(pointer + (extra,), key=True),
                             hint=hint, pointer=_pointer_text(pointer + (extra,)))

    _unevaluatedProperties = _additionalProperties

    def _required(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        props = error.schema.get("properties", {})
        for name in error.validator_value:
            if isinstance(error.instance, dict) and name not in error.instance:
                examples = self._resolve(props.get(name, {})).get("examples") or props.get(name, {}).get("examples")
                hint = f"add {name}: {_flow(examples[0])}" if examples else f"add the field {name!r}"
                yield self.diag(pointer, f"missing required field {name!r}", "S201", hint)

    def _type(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        expected = _type_words(error.validator_value)
        title = error.schema.get("title") if self.code is None else None  # the metaschema's titles are noise
        if self.code is not None and expected == "boolean or map":
            title = "JSON Schema"
        noun = f"{title} ({expected})" if title else expected
        got = _yaml_type(error.instance)
        message = f"expected {_article(noun)}, got {got}"
        if not isinstance(error.instance, (dict, list)):
            message += f" {_show(error.instance)}"
        hint = None
        as_text = _show(error.instance)
        pattern = error.schema.get("pattern")
        if expected == "string" and not isinstance(error.instance, (dict, list)) and (
            pattern is None or re.search(pattern, as_text)
        ):
            hint = f'quote the value: "{as_text}"'
        elif expected == "list" and not isinstance(error.instance, (dict, list)):
            hint = f"write a list: [{_flow(error.instance)}]"
        elif error.schema.get("examples"):
            hint = f"for example: {_flow(error.schema['examples'][0])}"
        yield self.diag(pointer, message, "S203", hint)

    def _enum(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        allowed = error.validator_value if error.validator == "enum" else [error.validator_value]
        guess = _suggest(error.instance, allowed)
        words = ", ".join(a if isinstance(a, str) else _show(a) for a in allowed)
        if error.validator == "const":
            message = f"must be {words}, got {_show(error.instance)}"
        else:
            message = f"{_show(error.instance)} is not allowed; expected one of: {words}"
        if guess:
            message += f"; did you mean {guess!r}?"
        hint = f"use {guess}" if guess else None
        if error.validator == "const" and pointer == ("sealflow",):
            hint = "this interpreter reads language version 1: write sealflow: 1"
        yield self.diag(pointer, message, "S204", hint)

    _const = _enum

    def _pattern(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        words = error.schema.get("patternErrorMessage") or f"must match the pattern {error.validator_value}"
        yield self.diag(pointer, f"{_show(error.instance)} {words}", "S204")

    def _format(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        if error.validator_value == "cron":
            yield self.diag(pointer, f"{_show(error.instance)} is not a valid cron expression", "S209",
                            "five fields: minute hour day-of-month month day-of-week, e.g. '0 6 * * 1-5'")
        elif error.validator_value == "timezone":
            yield self.diag(pointer, f"{_show(error.instance)} is not an IANA time zone", "S209",
                            "use a name from the tz database, e.g. UTC or Europe/Paris")
        else:
            yield self.diag(pointer, f"{_show(error.instance)} is not a valid {error.validator_value}", "S204")

    def _range(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        n, v = error.validator_value, error.validator
        plural = "" if n == 1 else "s"
        words = {
            "minimum": f"must be at least {n}", "maximum": f"must be at most {n}",
            "exclusiveMinimum": f"must be greater than {n}", "exclusiveMaximum": f"must be less than {n}",
            "minLength": "must not be empty" if n == 1 else f"must be at least {n} characters long",
            "maxLength": f"must be at most {n} characters long",
            "minItems": "must list at least one item" if n == 1 else f"must list at least {n} items",
            "maxItems": f"must list at most {n} item{plural}",
            "minProperties": f"must have at least {n} field{plural}",
            "maxProperties": f"must have at most {n} field{plural}",
        }[v]
        if v in ("minProperties", "maxProperties") and error.schema.get("errorMessage"):
            words = error.schema["errorMessage"]
        if v.endswith(("imum", "Minimum", "Maximum")):
            words += f", got {_show(error.instance)}"
        yield self.diag(pointer, words, "S205")

    _minimum = _maximum = _exclusiveMinimum = _exclusiveMaximum = _range
    _minLength = _maxLength = _minItems = _maxItems = _minProperties = _maxProperties = _range

    def _uniqueItems(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        seen: list = []
        for i, item in enumerate(error.instance):
            if item in seen:
                yield self.diag(pointer + (i,), f"{_show(item)} is listed more than once", "S205",
                                "remove the duplicate")
                return
            seen.append(item)

    def _not(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        words = error.schema.get("errorMessage") or f"{_show(error.instance)} is not allowed here"
        yield self.diag(pointer, words, "S204")

    def _other(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        words = error.schema.get("errorMessage") if isinstance(error.schema, dict) else None
        yield self.diag(pointer, words or error.message, _CODES.get(str(error.validator), "S206"))

    # -- anyOf / oneOf: pick the branch the author meant

    def _anyOf(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        if not error.context:  # oneOf matched more than one branch
            words = error.schema.get("errorMessage") or "matches more than one of the allowed forms"
            yield self.diag(pointer, words, "S206", "make it match exactly one form")
            return
        branches: dict[int, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        mismatched = {i: errs for i, errs in branches.items()
                      if any(e.validator == "type" and not e.relative_path for e in errs)}
        candidates = {i: errs for i, errs in branches.items() if i not in mismatched}
        if not candidates:
            words = error.schema.get("errorMessage")
            types = [t for errs in branches.values() for e in errs
                     if e.validator == "type" and not e.relative_path
                     for t in ([e.validator_value] if isinstance(e.validator_value, str) else e.validator_value)]
            got = _yaml_type(error.instance)
            shown = "" if isinstance(error.instance, (dict, list)) else f" {_show(error.instance)}"
            if words:
                message = f"{words} (got {got}{shown})"
            else:
                message = f"expected {_article(_type_words(types))}, got {got}{shown}"
            yield self.diag(pointer, message, "S203")
            return
        chosen = max(candidates, key=lambda i: self._score(error, i, candidates[i]))
        errs = candidates[chosen]
        at_root = all(not e.relative_path and e.validator in ("const", "enum") for e in errs)
        if error.schema.get("errorMessage") and at_root:
            yield self.diag(pointer, f"{error.schema['errorMessage']}, got {_show(error.instance)}", "S204")
            return
        for sub in errs:
            yield from self.map(sub)

    _oneOf = _anyOf

    def _score(self, error: ValidationError, index: int, errs: list[ValidationError]) -> tuple:
        """Prefer the branch that knows most of the instance's keys, then the one whose problems are deepest."""
        overlap = 0
        branch = error.validator_value[index] if isinstance(error.validator_value, list) else {}
        props = self._resolve(branch).get("properties", {})
        if isinstance(error.instance, dict):
            overlap = sum(1 for k in error.instance if k in props)
        depth = max(len(e.relative_path) for e in errs)
        return (overlap, depth, -len(errs), -index)

    def _resolve(self, schema: Any) -> dict:
        """Follow local ``$ref`` (``#/$defs/x``) through the root schema; anything else as is."""
        for _ in range(16):
            if not isinstance(schema, dict):
                return {}
            ref = schema.get("$ref")
            if not (isinstance(ref, str) and ref.startswith("#/")):
                return schema
            target: Any = self.root
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
            schema = target
        return {}


def _article(words: str) -> str:
    return ("an " if words[0] in "aeiou" else "a ") + words


__all__ = ["validate", "validate_embedded_schema", "schema_for_docs", "format_checker", "readable", "DURATION_WORDS"]
