"""Safe, bounded YAML loading that remembers where every value came from.

The loader builds plain Python data (dicts, lists, strings, numbers, booleans,
None) from PyYAML's *event* stream with an explicit stack, so that

* no constructor runs: ``!!python/...`` and every other non-core tag is an error;
* scalars resolve by the YAML 1.2 core schema (``on``/``yes``/``no`` stay strings,
  dates stay strings), with numbers bounded to what JSON holds exactly
  (:mod:`sealflow.dsl.yaml_scalars`);
* duplicate keys, non-string keys, oversized files, deep nesting (counted after
  alias expansion) and alias expansion beyond a limit (the "billion laughs") are
  refused with a location;
* every value, key and string scalar keeps its line and column, addressed by its
  path in the document (a tuple of keys and indexes).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NoReturn

import yaml

from sealflow.dsl.document import Document, Pointer, ScalarSpan
from sealflow.dsl.errors import DefinitionError, Diagnostic, Location
from sealflow.dsl.yaml_scalars import CORE_TAGS as _CORE_TAGS
from sealflow.dsl.yaml_scalars import LoadError as _LoadError
from sealflow.dsl.yaml_scalars import Pos
from sealflow.dsl.yaml_scalars import mark_pos as _pos
from sealflow.dsl.yaml_scalars import resolve_scalar as _resolve_scalar

try:  # libyaml's parser when available: same events, faster
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on what the loader accepts."""

    max_bytes: int = 1024 * 1024
    max_depth: int = 64
    #: total number of nodes after alias expansion
    max_nodes: int = 100_000
    max_aliases: int = 1_000


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass
class _Frame:
    kind: str  # "map" | "seq"
    value: Any
    pointer: Pointer
    anchor: str | None
    start: Pos
    pending_key: Any = None
    key_pos: Pos | None = None
    has_key: bool = False
    first_node: int = 0
    #: levels of nesting of the deepest child container (after alias expansion)
    child_height: int = 0


@dataclasses.dataclass
class _Anchored:
    value: Any
    size: int
    # relative pointer -> (value pos, key pos or None, span or None)
    records: list[tuple[Pointer, Pos | None, Pos | None, ScalarSpan | None]]
    #: levels of container nesting in the value (0 for a scalar)
    height: int = 0


class _Builder:
    def __init__(self, limits: Limits):
        self.limits = limits
        self.positions: dict[Pointer, Pos] = {}
        self.key_positions: dict[Pointer, Pos] = {}
        self.spans: dict[Pointer, ScalarSpan] = {}
        self.anchors: dict[str, _Anchored] = {}
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.have_root = False
        self.nodes = 0
        self.aliases = 0
        # every node recorded, in order, so an anchored subtree can be replayed under an alias
        self.log: list[tuple[Pointer, Pos | None, Pos | None, ScalarSpan | None]] = []

    def _count(self, n: int, pos: Pos) -> None:
        self.nodes += n
        if self.nodes > self.limits.max_nodes:
            raise _LoadError(
                "Y107",
                f"document expands to more than {self.limits.max_nodes} nodes "
                "(alias expansion or size limit)",
                pos,
                "do not build large structures out of repeated aliases",
            )

    def _child_pointer(self, pos: Pos) -> tuple[Pointer, Pos | None]:
        if not self.stack:
            return (), None
        top = self.stack[-1]
        if top.kind == "seq":
            return top.pointer + (len(top.value),), None
        return top.pointer + (top.pending_key,), top.key_pos

    def _record(self, pointer: Pointer, pos: Pos, key_pos: Pos | None, span: ScalarSpan | None) -> None:
        self.positions[pointer] = pos
        if key_pos is not None:
            self.key_positions[pointer] = key_pos
        if span is not None:
            self.spans[pointer] = span
        self.log.append((pointer, pos, key_pos, span))

    def _attach(self, value: Any) -> None:
        if not self.stack:
            self.root, self.have_root = value, True
            return
        top = self.stack[-1]
        if top.kind == "seq":
            top.value.append(value)
        else:
            top.value[top.pending_key] = value
            top.has_key = False

    def _expects_key(self) -> bool:
        return bool(self.stack) and self.stack[-1].kind == "map" and not self.stack[-1].has_key

    def _take_key(self, value: Any, pos: Pos, style: str | None, raw: str) -> None:
        top = self.stack[-1]
        if not isinstance(value, str):
            raise _LoadError(
                "Y103",
                f"mapping key {raw!r} is not a string (it reads as {type(value).__name__})",
                pos,
                f'quote it: "{raw}"',
            )
        if value == "<<" and style in (None, ""):
            raise _LoadError("Y105", "merge keys ('<<') are not supported", pos, "write the keys out in full")
        if value in top.value:
            first = self.key_positions.get(top.pointer + (value,))
            where = f" (first defined at line {first.line + 1})" if first else ""
            raise _LoadError("Y102", f"duplicate key {value!r}{where}", pos, "remove or rename one of the two keys")
        top.pending_key, top.key_pos, top.has_key = value, pos, True

    def scalar(self, event: yaml.ScalarEvent) -> None:
        pos = _pos(event.start_mark)
        value = _resolve_scalar(event, pos)
        if self._expects_key():
            if event.anchor:
                self.anchors[event.anchor] = _Anchored(value, 1, [((), pos, None, None)])
            self._take_key(value, pos, event.style, event.value)
            return
        self._count(1, pos)
        pointer, key_pos = self._child_pointer(pos)
        span = ScalarSpan(pos, _pos(event.end_mark), event.style) if isinstance(value, str) else None
        self._record(pointer, pos, key_pos, span)
        if event.anchor:
            self.anchors[event.anchor] = _Anchored(value, 1, [((), pos, None, span)])
        self._attach(value)

    def start(self, kind: str, event: Any) -> None:
        pos = _pos(event.start_mark)
        if event.tag not in (None, "!") and event.tag not in _CORE_TAGS:
            raise _LoadError(
                "Y104",
                f"tag {event.tag!r} is not allowed; definitions use plain YAML data only",
                pos,
                "remove the tag: only strings, numbers, booleans, null, lists and maps are allowed",
            )
        if self._expects_key():
            raise _LoadError("Y103", "mapping key is a list or map, not a string", pos, "keys must be plain strings")
        if len(self.stack) >= self.limits.max_depth:
            raise _LoadError(
                "Y106",
                f"nesting deeper than {self.limits.max_depth} levels",
                pos,
                "flatten the structure",
            )
        self._count(1, pos)
        pointer, key_pos = self._child_pointer(pos)
        self._record(pointer, pos, key_pos, None)
        frame = _Frame(kind, {} if kind == "map" else [], pointer, event.anchor, pos, first_node=len(self.log) - 1)
        self._attach(frame.value)
        self.stack.append(frame)

    def end(self) -> None:
        frame = self.stack.pop()
        height = frame.child_height + 1
        if self.stack:
            self.stack[-1].child_height = max(self.stack[-1].child_height, height)
        if frame.anchor:
            base = len(frame.pointer)
            records = [(p[base:], vp, kp, sp) for (p, vp, kp, sp) in self.log[frame.first_node :]]
            self.anchors[frame.anchor] = _Anchored(frame.value, len(records), records, height)

    def alias(self, event: yaml.AliasEvent) -> None:
        pos = _pos(event.start_mark)
        anchored = self.anchors.get(event.anchor) if event.anchor is not None else None
        if anchored is None:
            raise _LoadError("Y101", f"unknown alias *{event.anchor}", pos)
        self.aliases += 1
        if self.aliases > self.limits.max_aliases:
            raise _LoadError("Y107", f"more than {self.limits.max_aliases} aliases", pos)
        if self._expects_key():
            self._take_key(anchored.value, pos, None, f"*{event.anchor}")
            return
        self._count(anchored.size, pos)
        if len(self.stack) + anchored.height > self.limits.max_depth:
            raise _LoadError(
                "Y106",
                f"alias *{event.anchor} nests the document deeper than {self.limits.max_depth} levels "
                "once expanded",
                pos,
                "flatten the structure; depth counts aliased content where it is used",
            )
        if self.stack:
            self.stack[-1].child_height = max(self.stack[-1].child_height, anchored.height)
        pointer, key_pos = self._child_pointer(pos)
        for rel, vp, kp, sp in anchored.records:
            self._record(pointer + rel, vp or pos, kp if rel else key_pos, sp)
        self._attach(_deep_copy(anchored.value))


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _line_col_of_byte(data: bytes, index: int) -> tuple[int, int]:
    before = data[:index]
    line = before.count(b"\n")
    col = len(before) - (before.rfind(b"\n") + 1)
    return line, col


def _fail(path: str, code: str, message: str, line: int = 0, col: int = 0, hint: str | None = None) -> NoReturn:
    raise DefinitionError([Diagnostic(code, message, Location(path, line + 1, col + 1), hint=hint)])


def load_bytes(data: bytes, path: str = "<string>", limits: Limits = DEFAULT_LIMITS) -> Document:
    """Load one YAML document from ``data``; raise :class:`DefinitionError` with a location."""
    if len(data) > limits.max_bytes:
        _fail(
            path,
            "Y108",
            f"file is {len(data)} bytes, over the limit of {limits.max_bytes} bytes",
            hint="split the workflow or move large data (schemas, prompts) into referenced files",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, col = _line_col_of_byte(data, exc.start)
        _fail(path, "Y109", f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x})", line, col,
              "save the file as UTF-8")
    return load_text(text, path, limits)


def load_text(text: str, path: str = "<string>", limits: Limits = DEFAULT_LIMITS) -> Document:
    """Load one YAML document from ``text``; raise :class:`DefinitionError` with a location."""
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        _fail(path, "Y108", f"text is over the limit of {limits.max_bytes} bytes")
    builder = _Builder(limits)
    documents = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.ScalarEvent):
                builder.scalar(event)
            elif isinstance(event, yaml.MappingStartEvent):
                builder.start("map", event)
            elif isinstance(event, yaml.SequenceStartEvent):
                builder.start("seq", event)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                builder.end()
            elif isinstance(event, yaml.AliasEvent):
                builder.alias(event)
            elif isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise _LoadError(
                        "Y111",
                        "more than one YAML document in the file",
                        _pos(event.start_mark),
                        "put one workflow per file",
                    )
    except _LoadError as exc:
        _fail(path, exc.code, exc.message, exc.pos.line, exc.pos.column, exc.hint)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        if mark is not None:
            _fail(path, "Y101", f"YAML syntax error: {message}", mark.line, mark.column,
                  "check indentation, quoting and that every ':' has a space after it")
        _fail(path, "Y101", f"YAML syntax error: {message}")
    except yaml.YAMLError as exc:
        _fail(path, "Y101", f"YAML error: {exc}")
    except RecursionError:  # pragma: no cover - the event parser is not recursive
        _fail(path, "Y106", "nesting too deep")
    if not builder.have_root:
        _fail(path, "Y112", "the file is empty", hint="a definition starts with 'sealflow: 1'")
    return Document(path, text, builder.root, builder.positions, builder.key_positions, builder.spans)


def load_file(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> Document:
    """Read and load a definition file (refusing oversized files before reading them whole)."""
    p = Path(path)
    name = str(path)
    try:
        size = p.stat().st_size
        if size > limits.max_bytes:
            _fail(name, "Y108", f"file is {size} bytes, over the limit of {limits.max_bytes} bytes",
                  hint="split the workflow or move large data into referenced files")
        data = p.read_bytes()
    except DefinitionError:
        raise
    except IsADirectoryError:
        _fail(name, "Y100", "is a directory, not a file")
    except OSError as exc:
        _fail(name, "Y100", f"cannot read file: {exc.strerror or exc}")
    return load_bytes(data, name, limits)


__all__ = ["Document", "Limits", "DEFAULT_LIMITS", "Pos", "ScalarSpan", "load_bytes", "load_text", "load_file"]
