"""Static types of JSON values, read from JSON Schema, for the compiler's type checks (:mod:`sealflow.dsl.typecheck`).

A :class:`Ty` is what a value may be: a set of JSON kinds (``null``, ``boolean``, ``integer``, ``number``,
``string``, ``array``, ``object``), the fields of an object, the items of an array. ``UNKNOWN`` (no kinds) is
any value: every check passes on it, so a schema Sealflow cannot read, an action without annotations or a
dynamic index never gives a false error.

An object whose schema declares ``properties`` and does not open itself to others (``additionalProperties``
``true`` or a schema, ``patternProperties``) is *closed for reading*: a field it does not declare is an error
where it is read (``input.nme``, ``steps.greet.output.greting``). A field it declares but does not require may
be missing, so it reads as nullable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

KINDS = ("null", "boolean", "integer", "number", "string", "array", "object")
_MAX_DEPTH = 24


@dataclasses.dataclass(frozen=True)
class Ty:
    #: the kinds a value may have; empty: unknown (any value)
    kinds: frozenset[str] = frozenset()
    #: an object's declared fields (None: not known)
    fields: Mapping[str, Ty] | None = None
    #: an object that holds no field but ``fields``
    closed: bool = False
    #: the type of an object's other fields (additionalProperties as a schema), or of a map's values
    extra: Ty | None = None
    #: an array's items
    items: Ty | None = None

    @property
    def unknown(self) -> bool:
        return not self.kinds

    @property
    def nullable(self) -> bool:
        return not self.kinds or "null" in self.kinds

    def or_null(self) -> Ty:
        return self if self.unknown or "null" in self.kinds else dataclasses.replace(self, kinds=self.kinds | {"null"})

    def non_null(self) -> Ty:
        if self.unknown or "null" not in self.kinds or self.kinds == {"null"}:
            return self
        return dataclasses.replace(self, kinds=self.kinds - {"null"})

    def describe(self) -> str:
        """``string``, ``integer or null``, ``object {a, b}``, ``array of string``, ``any value``."""
        if self.unknown:
            return "any value"
        names = []
        for kind in KINDS:
            if kind not in self.kinds or (kind == "integer" and "number" in self.kinds):
                continue
            if kind == "array" and self.items is not None and not self.items.unknown:
                names.append(f"array of {self.items.describe()}")
            elif kind == "object" and self.fields:
                shown = ", ".join(sorted(self.fields)[:6]) + (", ..." if len(self.fields) > 6 else "")
                names.append(f"object {{{shown}}}")
            else:
                names.append(kind)
        return " or ".join(names)


UNKNOWN = Ty()
NULL = Ty(frozenset({"null"}))
BOOLEAN = Ty(frozenset({"boolean"}))
INTEGER = Ty(frozenset({"integer"}))
NUMBER = Ty(frozenset({"number"}))
STRING = Ty(frozenset({"string"}))


def of(*kinds: str) -> Ty:
    return Ty(frozenset(kinds))


def array(items: Ty = UNKNOWN) -> Ty:
    return Ty(frozenset({"array"}), items=items)


def obj(fields: Mapping[str, Ty], *, closed: bool = True) -> Ty:
    return Ty(frozenset({"object"}), fields=dict(fields), closed=closed)


def union(*types: Ty) -> Ty:
    """A value of any of ``types`` (unknown if any is)."""
    if not types or any(t.unknown for t in types):
        return UNKNOWN
    kinds = frozenset().union(*(t.kinds for t in types))
    arrays = [t.items or UNKNOWN for t in types if "array" in t.kinds]
    objects = [t for t in types if "object" in t.kinds]
    items = union(*arrays) if arrays else None
    fields: dict[str, Ty] | None = None
    closed = False
    if len(objects) == 1:
        fields, closed = (dict(objects[0].fields) if objects[0].fields is not None else None), objects[0].closed
    elif objects and all(o.fields is not None and o.closed for o in objects):
        names = set().union(*(set(o.fields or {}) for o in objects))
        fields = {n: union(*[(o.fields or {}).get(n, NULL) for o in objects]) for n in names}
        closed = True
    return Ty(kinds, fields=fields, closed=closed, items=items)


def from_schema(schema: Any, root: Any = None, depth: int = 0) -> Ty:
    """The type of the values ``schema`` accepts; ``root`` resolves local ``#/...`` references."""
    if root is None:
        root = schema
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return UNKNOWN  # also True (any value) and False (no value: nothing to check against)
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _local(root, ref)
        return from_schema(target, root, depth + 1) if target is not None else UNKNOWN
    for combinator in ("anyOf", "oneOf"):
        branches = schema.get(combinator)
        if isinstance(branches, list) and branches:
            return union(*(from_schema(b, root, depth + 1) for b in branches))
    if "const" in schema:
        return of_value(schema["const"], literal=False)
    kinds = _kinds(schema)
    if not kinds:
        return UNKNOWN
    fields, closed, extra, items = None, False, None, None
    if "object" in kinds:
        props = schema.get("properties")
        required = set(schema.get("required") or ())
        additional = schema.get("additionalProperties", None)
        if isinstance(props, dict):
            fields = {name: (t if name in required else t.or_null())
                      for name, sub in props.items() for t in (from_schema(sub, root, depth + 1),)}
            closed = additional in (None, False) and "patternProperties" not in schema
        if isinstance(additional, dict):
            extra = from_schema(additional, root, depth + 1)
        elif additional is False and fields is None:
            fields, closed = {}, True
    if "array" in kinds and isinstance(schema.get("items"), dict):
        items = from_schema(schema["items"], root, depth + 1)
    return Ty(frozenset(kinds), fields=fields, closed=closed, extra=extra, items=items)


def _kinds(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        kinds = {declared}
    elif isinstance(declared, list):
        kinds = {k for k in declared if isinstance(k, str)}
    elif isinstance(schema.get("enum"), list) and schema["enum"]:
        return set(union(*(of_value(v, literal=False) for v in schema["enum"])).kinds)
    elif isinstance(schema.get("properties"), dict):
        kinds = {"object"}
    elif isinstance(schema.get("items"), dict):
        kinds = {"array"}
    else:
        return set()
    if "number" in kinds:
        kinds.add("integer")  # a whole number is a number
    return kinds & set(KINDS)


def _local(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].lstrip("/").split("/") if ref != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def subscripts(path: Any) -> str:
    """A path into a JSON value as subscripts, as a message shows it: ``['items'][0]``."""
    return "".join(f"[{k!r}]" if isinstance(k, str) else f"[{k}]" for k in path)


def of_value(value: Any, *, literal: bool = True) -> Ty:
    """The type of a JSON value; a map's fields are closed (``literal``: written in the definition)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return INTEGER if value.is_integer() and literal else NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return array(union(*(of_value(v, literal=literal) for v in value)) if value else UNKNOWN)
    if isinstance(value, dict):
        return obj({str(k): of_value(v, literal=literal) for k, v in value.items()})
    return UNKNOWN


def field(ty: Ty, name: Any) -> tuple[Ty, bool]:
    """The type of ``ty[name]`` and whether ``ty`` is a closed object without ``name`` (an error to read)."""
    if ty.unknown:
        return UNKNOWN, False
    if isinstance(name, int) and not isinstance(name, bool):
        if "array" in ty.kinds:
            return (ty.items or UNKNOWN).or_null(), False  # out of range reads null
        return UNKNOWN, False
    if "object" not in ty.kinds:
        # a field of a list is an error where it is evaluated (the expression language's semantics)
        return UNKNOWN, ty.kinds <= {"array", "null"} and "array" in ty.kinds
    if ty.fields is not None and name in ty.fields:
        found = ty.fields[name]
        return (found.or_null() if ty.nullable and "null" in ty.kinds else found), False
    if ty.closed:
        return UNKNOWN, True  # reported where it is read; nothing more is said about what follows
    return (ty.extra.or_null() if ty.extra is not None else UNKNOWN), False


#: which kinds a value of one kind may be passed as (a whole float is an integer; an integer is a number)
_FITS = {"integer": {"integer", "number"}, "number": {"number", "integer"}}


def overlap(value: Ty, target: Ty) -> bool:
    """Whether some value of ``value``'s type other than null is accepted by ``target`` (unknown: yes)."""
    if value.unknown or target.unknown:
        return True
    given = value.kinds - {"null"} or value.kinds
    return any(_FITS.get(kind, {kind}) & target.kinds for kind in given)


def may_break_null(value: Ty, target: Ty) -> bool:
    """Whether ``value`` may be null where ``target`` does not accept null (both known)."""
    return not value.unknown and not target.unknown and "null" in value.kinds and "null" not in target.kinds \
        and value.kinds != {"null"}
