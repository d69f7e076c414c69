"""Build a small, deterministic instance of a JSON Schema from a prompt.

This is how the local model "answers" a structured request. The walk:

* ``const`` -> that value; ``enum`` -> its first value (the ``index``-th inside arrays);
* ``allOf`` -> the merged subschemas; ``anyOf``/``oneOf`` -> the first branch;
  ``$ref`` -> local JSON pointers (``#/$defs/x``) only;
* object -> its ``required`` properties (plus declared ones up to ``minProperties``);
* array -> ``max(minItems, 1)`` items (none if ``maxItems`` is 0), distinct when
  ``uniqueItems``;
* string -> a fixed example for a known ``format`` (``email``, ``date-time``, ``uri``,
  ...); else the first candidate fitting ``minLength``/``maxLength``/``pattern``: a hint
  for the property name (``language`` -> ``en``, ``email``), a phrase of the prompt,
  single words of the prompt (words first inside arrays), then a string generated from
  the pattern itself;
* number/integer -> the middle of ``minimum``..``maximum`` (exclusive bounds and
  ``multipleOf`` honoured), else the bound, else 0; boolean -> false; null -> null.

Text taken from the prompt is sanitised: URLs and words starting ``http``, quotes and
backticks are dropped and ``<>{}[]\\|`` become spaces, so a generated string never
carries a link or markup from the prompt (JSON in a prompt reads as ``key: value, ...``).
A ``hook(name, schema)`` may override any value (the local model uses it for the
lead-classification rule); it returns :data:`NOTHING` when it has no opinion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

NOTHING = object()
Hook = Callable[[Any, dict[str, Any]], Any]

_MAX_DEPTH = 32
_PAD = "local model output"
_QUOTES = re.compile(r"[\"`]")
_BRACKETS = re.compile(r"[<>{}\[\]\\|]")
_NAME_HINTS = {"language": "en", "lang": "en", "language_code": "en", "locale": "en",
               "email": "demo@example.com", "email_address": "demo@example.com"}
_FORMATS = {"email": "demo{n}@example.com", "idn-email": "demo{n}@example.com", "uri": "https://example.com/demo{n}",
            "iri": "https://example.com/demo{n}", "uri-reference": "/demo{n}", "iri-reference": "/demo{n}",
            "hostname": "demo{n}.example.com", "idn-hostname": "demo{n}.example.com", "date": "2024-01-{d:02d}",
            "date-time": "2024-01-{d:02d}T00:00:00Z", "time": "00:00:{d:02d}Z", "ipv4": "192.0.2.{d}",
            "ipv6": "2001:db8::{d}", "uuid": "00000000-0000-4000-8000-{d:012d}", "duration": "PT{d}M"}


def phrase(prompt: str, max_words: int = 24) -> str:
    """The first ``max_words`` words of the sanitised prompt (never empty)."""
    tokens = _QUOTES.sub("", prompt).split()
    kept = [t for t in tokens if "://" not in t and not t.lower().lstrip("([{<'").startswith(("www.", "http"))]
    text = _BRACKETS.sub(" ", " ".join(kept))
    text = re.sub(r"(?<=[A-Za-z_])([,;:])(?=\S)|([,;:])(?=[A-Za-z_])", lambda m: m.group(0) + " ", text)
    words = text.split()[:max_words]
    return " ".join(words).strip(" ,;:") or _PAD


def words(prompt: str) -> list[str]:
    """Distinct lower-case words of the sanitised prompt, in order (never empty)."""
    seen: dict[str, None] = {}
    for w in re.findall(r"[a-z][a-z0-9]*", phrase(prompt, 10_000).lower()):
        if len(w) > 1:
            seen.setdefault(w, None)
    return list(seen) or ["item"]


def fit(text: str, low: int = 0, high: int | None = None) -> str:
    """``text`` cut (at a word boundary when possible) or padded to ``low``..``high`` characters."""
    if high is not None and len(text) > high:
        cut = text[:high]
        space = cut.rfind(" ")
        text = cut[:space] if space >= max(low, 1) else cut
    while len(text) < low:
        text = f"{text} {_PAD}" if text else _PAD
    if high is not None and len(text) > high:
        text = text[:high]
    stripped = text.rstrip(" ,;:")
    return stripped if len(stripped) >= low else text


def synthesize(schema: Any, prompt: str, hook: Hook | None = None) -> Any:
    """A deterministic instance of ``schema`` built from ``prompt``."""
    return _Synth(schema, prompt, hook).value(schema, None, 0, 0, False)


class _Synth:
    def __init__(self, root: Any, prompt: str, hook: Hook | None):
        self.root = root
        self.phrase = phrase(prompt)
        self.words = words(prompt)
        self.hook = hook

    def value(self, schema: Any, name: Any, depth: int, index: int, item: bool) -> Any:
        if schema is False or depth > _MAX_DEPTH:
            return None
        if not isinstance(schema, dict):
            schema = {}
        if "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.value({**self._resolve(schema["$ref"]), **rest}, name, depth + 1, index, item)
        if self.hook is not None:
            chosen = self.hook(name, schema)
            if chosen is not NOTHING:
                return chosen
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][index % len(schema["enum"])]
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:
                merged = _merge(merged, sub if isinstance(sub, dict) else {})
            return self.value(merged, name, depth + 1, index, item)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value(_merge(rest, schema[key][0]), name, depth + 1, index, item)
        kind = _type_of(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, name, depth)
        if kind in ("number", "integer"):
            return _number(schema, kind == "integer", index)
        if kind == "boolean":
            return index % 2 == 1
        if kind == "null":
            return None
        return self.string(schema, name, index, item)

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = found if isinstance(found := schema.get("properties"), dict) else {}
        names = [n for n in schema.get("required", []) if isinstance(n, str)]
        for n in props:
            if len(names) >= schema.get("minProperties", 0):
                break
            if n not in names:
                names.append(n)
        extra = schema.get("additionalProperties", True)
        out = {}
        for n in dict.fromkeys(names):
            sub = props.get(n, extra if isinstance(extra, dict) else {})
            out[n] = self.value(sub, n, depth + 1, 0, False)
        return out

    def array(self, schema: dict[str, Any], name: Any, depth: int) -> list[Any]:
        high = schema.get("maxItems")
        count = max(schema.get("minItems", 0), 0 if high == 0 else 1)
        prefix = found if isinstance(found := schema.get("prefixItems"), list) else []
        items = schema.get("items", {})
        out: list[Any] = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            value = self.value(sub, name, depth + 1, i, True)
            for attempt in range(i + 1, i + 64):
                if not schema.get("uniqueItems") or not _contains(out, value):
                    break
                value = self.value(sub, name, depth + 1, attempt, True)
            out.append(value)
        return out

    def string(self, schema: dict[str, Any], name: Any, index: int, item: bool) -> str:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        pattern = schema.get("pattern")
        candidates = []
        if isinstance(name, str) and name.lower() in _NAME_HINTS:
            candidates.append(_NAME_HINTS[name.lower()])
        if schema.get("format") in _FORMATS:  # a known format: its values only, one per index
            text = _FORMATS[schema["format"]].format(n=index or "", d=index % 28 + 1)
            if _string_ok(text, low, high, pattern):
                return text
        texts = [*self.words, self.phrase] if item else [self.phrase, *self.words]
        candidates += [fit(t, low, high) for t in texts]
        if isinstance(pattern, str):
            candidates.append(sample_pattern(pattern))
        valid = list(dict.fromkeys(c for c in candidates if _string_ok(c, low, high, pattern)))
        if not valid:
            return candidates[-1] if isinstance(pattern, str) else fit("", low, high)
        if index < len(valid):
            return valid[index]
        numbered = f"{valid[0]}{index}"
        return numbered if _string_ok(numbered, low, high, pattern) else valid[index % len(valid)]

    def _resolve(self, ref: Any) -> dict[str, Any]:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}
        node: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null" if kind else None)
    if isinstance(kind, str):
        return kind
    if any(k in schema for k in ("properties", "required", "additionalProperties", "minProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")):
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return "number"
    return "string"


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {**a, **b}
    if isinstance(a.get("properties"), dict) and isinstance(b.get("properties"), dict):
        out["properties"] = {**a["properties"], **b["properties"]}
    if isinstance(a.get("required"), list) and isinstance(b.get("required"), list):
        out["required"] = list(dict.fromkeys(a["required"] + b["required"]))
    return out


def _contains(values: list[Any], value: Any) -> bool:
    return any(type(v) is type(value) and v == value for v in values)


def _string_ok(text: str, low: int, high: int | None, pattern: Any) -> bool:
    if len(text) < low or (high is not None and len(text) > high):
        return False
    if isinstance(pattern, str):
        try:
            return re.search(pattern, text) is not None
        except re.error:
            return True  # a pattern Python cannot read: nothing better to check against
    return True


def _number(schema: dict[str, Any], integer: bool, index: int) -> int | float:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):  # draft 4: a flag on minimum
        lo, xlo = (None, lo) if xlo else (lo, None)
    if isinstance(xhi, bool):
        hi, xhi = (None, hi) if xhi else (hi, None)
    unit = schema.get("multipleOf") or (1 if integer else None)
    if unit is None:
        lower: float | None = max((b for b in (lo, xlo) if b is not None), default=None)
        upper: float | None = min((b for b in (hi, xhi) if b is not None), default=None)
        if lower is not None and upper is not None:
            return lower + (upper - lower) * (index + 1) / (index + 2)
        if lower is not None:
            return lower + index if xlo is None or lower != xlo else lower + 1 + index
        if upper is not None:
            return min(0, upper - 1) - index if xhi is not None and upper == xhi else min(0, upper) - index
        return index
    bounds_lo = [math.ceil(lo / unit)] if lo is not None else []
    bounds_lo += [math.floor(xlo / unit) + 1] if xlo is not None else []
    bounds_hi = [math.floor(hi / unit)] if hi is not None else []
    bounds_hi += [math.ceil(xhi / unit) - 1] if xhi is not None else []
    k_lo, k_hi = max(bounds_lo, default=None), min(bounds_hi, default=None)
    if k_lo is not None and k_hi is not None:
        k = (k_lo + k_hi) // 2
    else:
        k = k_lo if k_lo is not None else (min(0, k_hi) if k_hi is not None else 0)
    for step in (index, -index, 0):
        if (k_lo is None or k + step >= k_lo) and (k_hi is None or k + step <= k_hi):
            k += step
            break
    value = k * unit
    return int(value) if integer or float(unit).is_integer() else value


def sample_pattern(pattern: str) -> str:
    """A short string matching the regular expression ``pattern`` ("" when it cannot tell)."""
    try:
        from re import _constants as c  # Python >= 3.11
        from re import _parser as parser
    except ImportError:  # pragma: no cover - older Pythons
        import sre_constants as c
        import sre_parse as parser
    try:
        return _emit(parser.parse(pattern), c)
    except Exception:  # an unusual construct: the caller checks the result anyway
        return ""


def _emit(seq: Any, c: Any) -> str:
    out = []
    for op, av in seq:
        if op is c.LITERAL:
            out.append(chr(av))
        elif op is c.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op is c.ANY:
            out.append("a")
        elif op is c.IN:
            out.append(_one_of(av, c))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            low, _high, sub = av
            out.append(_emit(sub, c) * low)
        elif op is c.SUBPATTERN:
            out.append(_emit(av[-1], c))
        elif op is getattr(c, "ATOMIC_GROUP", None):
            out.append(_emit(av, c))
        elif op is c.BRANCH:
            out.append(_emit(av[1][0], c))
        elif op is c.CATEGORY:
            out.append(_category(av, c))
    return "".join(out)


def _one_of(items: list[Any], c: Any) -> str:
    if items and items[0][0] is c.NEGATE:
        for ch in "aA0_-x ":
            if not any(_in_item(op, av, ch, c) for op, av in items[1:]):
                return ch
        return "~"
    op, av = items[0]
    if op is c.LITERAL:
        return chr(av)
    if op is c.RANGE:
        return chr(av[0])
    return _category(av, c) if op is c.CATEGORY else "a"


def _in_item(op: Any, av: Any, ch: str, c: Any) -> bool:
    if op is c.LITERAL:
        return ch == chr(av)
    if op is c.RANGE:
        low: int = av[0]
        high: int = av[1]
        return low <= ord(ch) <= high
    if op is c.CATEGORY:
        return re.match(_CATEGORY_RE.get(str(av), "."), ch) is not None
    return False


_CATEGORY_RE = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_WORD": r"\w",
                "CATEGORY_NOT_WORD": r"\W", "CATEGORY_SPACE": r"\s", "CATEGORY_NOT_SPACE": r"\S"}


def _category(av: Any, c: Any) -> str:
    return {"CATEGORY_DIGIT": "0", "CATEGORY_NOT_DIGIT": "a", "CATEGORY_WORD": "a",
            "CATEGORY_NOT_WORD": "-", "CATEGORY_SPACE": " ", "CATEGORY_NOT_SPACE": "a"}.get(str(av), "a")
