"""Map JSON Schema errors to located, readable diagnostics: one mapper for every schema.

:class:`SchemaErrorMapper` turns each ``jsonschema`` error about one loaded document into
:class:`~sealflow.dsl.errors.Diagnostic` s that name the field in readable form
(``steps[2].retry.max_attempts: ...``), say what was expected in YAML terms, and carry a one-line
hint. ``anyOf``/``oneOf`` failures are resolved to the branch the author evidently meant, so the
message is specific. :func:`rank` orders them best first, without duplicates. The workflow schema
(:mod:`sealflow.dsl.schema`), the trust policy and the access policy all map their errors here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from jsonschema.exceptions import ValidationError

from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.loader import Document

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


# ---------------------------------------------------------------- the mapper

class SchemaErrorMapper:
    """Turns the jsonschema errors of one document against the schema ``root`` into diagnostics.

    ``base`` is where the validated value sits in the document (an embedded schema), ``code`` a
    code for every diagnostic instead of one per kind of problem, and ``subject`` the name of the
    document's root in messages (``workflow``, ``policy``, ``access policy``).
    """

    def __init__(self, doc: Document, root: Mapping[str, Any], *, base: Pointer = (), code: str | None = None,
                 subject: str = "workflow"):
        self.doc, self.root, self.base, self.code, self.subject = doc, root, tuple(base), code, subject
        self.duration = root.get("$defs", {}).get("duration")

    def diagnostics(self, errors: Iterable[ValidationError]) -> list[Diagnostic]:
        """Every diagnostic for ``errors``, best first (:func:`rank`)."""
        return rank([d for error in errors for d in self.map(error)])

    def readable(self, pointer: Iterable[str | int]) -> str:
        """:func:`readable` with this document's root named :attr:`subject`."""
        return readable(pointer, self.subject)

    def diag(self, pointer: Pointer, message: str, code: str = "S206", hint: str | None = None,
             key: bool = False) -> Diagnostic:
        return Diagnostic(
            code=self.code or code,
            message=f"{self.readable(pointer)}: {message}",
            location=self.doc.locate(pointer, key=key),
            hint=hint,
            pointer=pointer_text(pointer),
        )

    def map(self, error: ValidationError) -> list[Diagnostic]:
        pointer = self.base + tuple(error.absolute_path)
        if self.duration is not None and error.schema == self.duration:
            return [self._duration(error, pointer)]
        if "propertyNames" in error.relative_schema_path:
            return [self._property_name(error, pointer)]
        handler: Callable[[ValidationError, Pointer], Iterable[Diagnostic]] = (
            getattr(self, "_" + str(error.validator), None) or self._other)
        return list(handler(error, pointer))

    # -- one method per keyword family

    def _duration(self, error: ValidationError, pointer: Pointer) -> Diagnostic:
        message = f"{_show(error.instance)} is not a valid duration; write {DURATION_WORDS}"
        return Diagnostic("C409", f"{self.readable(pointer)}: {message}", self.doc.locate(pointer),
                          hint=_duration_hint(error.instance), pointer=pointer_text(pointer))

    def _property_name(self, error: ValidationError, pointer: Pointer) -> Diagnostic:
        words = error.message
        if error.validator == "pattern":
            words = _schema(error).get("patternErrorMessage") or f"must match the pattern {error.validator_value}"
        key = pointer + (cast(str, error.instance),)  # (propertyNames: the instance is the key)
        message = f"{self.readable(pointer)}: {error.instance!r} is not a valid name; it {words}"
        return Diagnostic(self.code or "S204", message, self.doc.locate(key, key=True), pointer=pointer_text(key))

    def _additionalProperties(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        allowed = sorted(_schema(error).get("properties", {}))
        patterns = list(_schema(error).get("patternProperties", {}))
        if error.validator == "unevaluatedProperties":
            inside = error.message[error.message.find("(") + 1 : error.message.rfind(" ")]
            extras = [a or b for a, b in re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", inside)]
        else:
            instance = error.instance if isinstance(error.instance, dict) else {}
            extras = [k for k in instance if k not in allowed and not any(re.search(p, k) for p in patterns)]
        where = "at the top level" if not pointer else f"in {self.readable(pointer)}"
        for extra in extras:
            guess = suggest(extra, allowed)
            message = f"unknown field {extra!r} {where}" + (f"; did you mean {guess!r}?" if guess else "")
            hint = f"rename it to {guess!r}" if guess else (
                f"allowed fields: {', '.join(allowed)}" if allowed else "remove it")
            yield Diagnostic(self.code or "S202", message, self.doc.locate(pointer + (extra,), key=True),
                             hint=hint, pointer=pointer_text(pointer + (extra,)))

    _unevaluatedProperties = _additionalProperties

    def _required(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        props = _schema(error).get("properties", {})
        for name in _listed(error.validator_value):
            if isinstance(error.instance, dict) and name not in error.instance:
                examples = self._resolve(props.get(name, {})).get("examples") or props.get(name, {}).get("examples")
                hint = f"add {name}: {_flow(examples[0])}" if examples else f"add the field {name!r}"
                yield self.diag(pointer, f"missing required field {name!r}", "S201", hint)

    def _type(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        expected = _type_words(error.validator_value)
        title = _schema(error).get("title") if self.code is None else None  # the metaschema's titles are noise
        if self.code is not None and expected == "boolean or map":
            title = "JSON Schema"
        noun = f"{title} ({expected})" if title else expected
        got = _yaml_type(error.instance)
        message = f"expected {_article(noun)}, got {got}"
        if not isinstance(error.instance, (dict, list)):
            message += f" {_show(error.instance)}"
        hint = None
        as_text = _show(error.instance)
        pattern = _schema(error).get("pattern")
        if expected == "string" and not isinstance(error.instance, (dict, list)) and (
            pattern is None or re.search(pattern, as_text)
        ):
            hint = f'quote the value: "{as_text}"'
        elif expected == "list" and not isinstance(error.instance, (dict, list)):
            hint = f"write a list: [{_flow(error.instance)}]"
        elif _schema(error).get("examples"):
            hint = f"for example: {_flow(_schema(error)['examples'][0])}"
        yield self.diag(pointer, message, "S203", hint)

    def _enum(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        allowed = _listed(error.validator_value) if error.validator == "enum" else [error.validator_value]
        guess = suggest(error.instance, allowed)
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
        words = _schema(error).get("patternErrorMessage") or f"must match the pattern {error.validator_value}"
        yield self.diag(pointer, f"{_show(error.instance)} {words}", "S204")

    def _format(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        why = str(error.cause) if error.cause is not None else None  # (sealflow.dsl.crons: the checker's words)
        if error.validator_value == "cron":
            never = why is not None and why.startswith("never fires")
            yield self.diag(pointer, f"{_show(error.instance)} {why or 'is not a valid cron expression'}", "S209",
                            "February has at most 29 days; April, June, September and November 30"
                            if never else
                            "five fields: minute hour day-of-month month day-of-week, e.g. '0 6 * * 1-5'")
        elif error.validator_value == "timezone":
            yield self.diag(pointer, f"{_show(error.instance)} {why or 'is not an IANA time zone'}", "S209",
                            "use a zone of the tz database, e.g. UTC, Europe/Paris or America/New_York")
        else:
            yield self.diag(pointer, f"{_show(error.instance)} is not a valid {error.validator_value}", "S204")

    def _range(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        n, v = error.validator_value, str(error.validator)
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
        if v in ("minProperties", "maxProperties") and _schema(error).get("errorMessage"):
            words = _schema(error)["errorMessage"]
        if v.endswith(("imum", "Minimum", "Maximum")):
            words += f", got {_show(error.instance)}"
        yield self.diag(pointer, words, "S205")

    _minimum = _maximum = _exclusiveMinimum = _exclusiveMaximum = _range
    _minLength = _maxLength = _minItems = _maxItems = _minProperties = _maxProperties = _range

    def _uniqueItems(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        seen: list[Any] = []
        for i, item in enumerate(_listed(error.instance)):
            if item in seen:
                yield self.diag(pointer + (i,), f"{_show(item)} is listed more than once", "S205",
                                "remove the duplicate")
                return
            seen.append(item)

    def _not(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        words = _schema(error).get("errorMessage") or f"{_show(error.instance)} is not allowed here"
        yield self.diag(pointer, words, "S204")

    def _other(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        words = _schema(error).get("errorMessage")
        yield self.diag(pointer, words or error.message, _CODES.get(str(error.validator), "S206"))

    # -- anyOf / oneOf: pick the branch the author meant

    def _anyOf(self, error: ValidationError, pointer: Pointer) -> Iterator[Diagnostic]:
        if not error.context:  # oneOf matched more than one branch
            words = _schema(error).get("errorMessage") or "matches more than one of the allowed forms"
            yield self.diag(pointer, words, "S206", "make it match exactly one form")
            return
        branches: dict[int, list[ValidationError]] = {}
        for sub in error.context:
            index = sub.relative_schema_path[0]  # the branch's position in the anyOf/oneOf list
            assert isinstance(index, int)
            branches.setdefault(index, []).append(sub)
        mismatched = {i: errs for i, errs in branches.items()
                      if any(e.validator == "type" and not e.relative_path for e in errs)}
        candidates = {i: errs for i, errs in branches.items() if i not in mismatched}
        if not candidates:
            words = _schema(error).get("errorMessage")
            types = [t for errs in branches.values() for e in errs
                     if e.validator == "type" and not e.relative_path
                     for t in ([e.validator_value] if isinstance(e.validator_value, str)
                               else _listed(e.validator_value))]
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
        if _schema(error).get("errorMessage") and at_root:
            yield self.diag(pointer, f"{_schema(error)['errorMessage']}, got {_show(error.instance)}", "S204")
            return
        for sub in errs:
            yield from self.map(sub)

    _oneOf = _anyOf

    def _score(self, error: ValidationError, index: int, errs: list[ValidationError]) -> tuple[int, int, int, int]:
        """Prefer the branch that knows most of the instance's keys, then the one whose problems are deepest."""
        overlap = 0
        branch = error.validator_value[index] if isinstance(error.validator_value, list) else {}
        props = self._resolve(branch).get("properties", {})
        if isinstance(error.instance, dict):
            overlap = sum(1 for k in error.instance if k in props)
        depth = max(len(e.relative_path) for e in errs)
        return (overlap, depth, -len(errs), -index)

    def _resolve(self, schema: Any) -> dict[str, Any]:
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


def _schema(error: ValidationError) -> Mapping[str, Any]:
    """The keywords of the schema that failed; a boolean schema (``false``) has none."""
    return error.schema if isinstance(error.schema, Mapping) else {}


def _listed(value: Any) -> list[Any]:
    """A list-valued keyword or instance (``required``, ``enum``, an array) as a list; anything else as none."""
    return list(value) if isinstance(value, (list, tuple)) else []


def _article(words: str) -> str:
    return ("an " if words[0] in "aeiou" else "a ") + words


# ---------------------------------------------------------------- helpers

def rank(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Best first: shallower fields, then stronger kinds of problem, then file order; no duplicates."""
    order = {"S202": 0, "S201": 1, "S203": 2, "C409": 3, "S204": 4, "S209": 4, "S205": 5, "S208": 6, "S206": 7}
    seen, unique = set(), []
    for d in diagnostics:
        key = (d.code, d.message, d.location)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    depth: Callable[[Diagnostic], int] = lambda d: d.pointer.count("/") + 1 if d.pointer else 0  # noqa: E731
    return sorted(unique, key=lambda d: (depth(d), order.get(d.code, 9), d.location.line, d.location.column))


def readable(pointer: Iterable[str | int], root: str = "workflow") -> str:
    """``("steps", 2, "retry")`` -> ``steps[2].retry``; the root is ``root`` (``workflow``)."""
    text = ""
    for part in pointer:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT.match(part):
            text += ("." if text else "") + part
        else:
            text += f"[{part!r}]"
    return text or root


def pointer_text(pointer: Pointer) -> str:
    """A pointer as JSON Pointer text without the leading slash: ``steps/2/retry``."""
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


def suggest(word: Any, choices: Iterable[Any]) -> str | None:
    """The choice closest to ``word`` (a likely misspelling of it), if any."""
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


__all__ = ["DURATION_WORDS", "SchemaErrorMapper", "pointer_text", "rank", "readable", "suggest"]
