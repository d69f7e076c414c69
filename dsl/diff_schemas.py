"""Whether a JSON Schema (an ``output_schema`` or the input schema) was loosened: it now accepts more.

Not a full containment check (that is undecidable in general for JSON Schema); it reports the common
ways of letting more through: the schema removed or emptied, ``additionalProperties`` opened, a
``required`` field dropped, an ``enum`` or ``type`` widened, a ``const`` dropped, a property's
schema removed, and the same inside ``properties`` and ``items``, recursively.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MAX_DEPTH = 32


def _is_open(schema: Any) -> bool:
    return schema is True or schema == {} or schema is None


def loosened(old: Any, new: Any, where: str = "", depth: int = 0) -> Iterator[str]:
    """Ways in which ``new`` accepts values that ``old`` refused, as short sentences."""
    here = where or "the schema"
    if _is_open(old) or depth > _MAX_DEPTH or old == new:
        return
    if new is None:
        yield f"{here} removed"
        return
    if _is_open(new):
        yield f"{here} emptied (it accepts anything)"
        return
    if not isinstance(old, dict) or not isinstance(new, dict):
        if old is False and new is not False:
            yield f"{here} now accepts values (was false)"
        return
    if "additionalProperties" in old and not _is_open(old["additionalProperties"]):
        if _is_open(new.get("additionalProperties")):
            yield f"{here}: additionalProperties opened"
        else:
            yield from loosened(old["additionalProperties"], new["additionalProperties"],
                                f"{here}.additionalProperties", depth + 1)
    dropped = [r for r in old.get("required", []) if r not in new.get("required", [])]
    if dropped:
        yield f"{here}: no longer requires {', '.join(map(str, dropped))}"
    if "enum" in old:
        if "enum" not in new:
            yield f"{here}: enum removed"
        else:
            added = [v for v in new["enum"] if v not in old["enum"]]
            if added:
                yield f"{here}: enum widened with {', '.join(map(repr, added))}"
    if "const" in old and new.get("const", object()) != old["const"]:
        yield f"{here}: const {old['const']!r} dropped or changed"
    if "type" in old:
        old_types = {old["type"]} if isinstance(old["type"], str) else set(old["type"])
        new_types = new.get("type")
        if new_types is None:
            yield f"{here}: type constraint removed"
        else:
            new_types = {new_types} if isinstance(new_types, str) else set(new_types)
            if new_types - old_types:
                yield f"{here}: type widened to {', '.join(sorted(new_types))}"
    old_props, new_props = old.get("properties") or {}, new.get("properties") or {}
    for name, sub in old_props.items():
        if isinstance(name, str):
            yield from loosened(sub, new_props.get(name), f"{here}.properties.{name}", depth + 1)
    if "items" in old:
        yield from loosened(old["items"], new.get("items"), f"{here}.items", depth + 1)
    for bound in ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum"):
        if bound in old and (bound not in new or _num(new[bound]) > _num(old[bound])):
            yield f"{here}: {bound} raised or removed"
    for bound in ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum"):
        if bound in old and (bound not in new or _num(new[bound]) < _num(old[bound])):
            yield f"{here}: {bound} lowered or removed"
    if "pattern" in old and new.get("pattern") != old["pattern"]:
        yield f"{here}: pattern removed or changed"


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


__all__ = ["loosened"]
