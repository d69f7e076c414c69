"""A loaded YAML document, and finding where its values came from.

:class:`Document` holds what :mod:`sealflow.dsl.loader` built: the data, and the line and column of every
value, key and string scalar by its path in the document (a :data:`Pointer`). It answers "where is this?"
for diagnostics, down to a character inside a string (an expression in a template, a quoted or block
scalar).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.dsl.errors import Location
from sealflow.dsl.yaml_scalars import Pos

Pointer = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class ScalarSpan:
    start: Pos
    end: Pos
    style: str | None  # None/'' plain, "'" single, '"' double, '|' literal, '>' folded


@dataclasses.dataclass
class Document:
    """A loaded definition: its data and where each part of it came from."""

    path: str
    text: str
    data: Any
    positions: dict[Pointer, Pos]
    key_positions: dict[Pointer, Pos]
    spans: dict[Pointer, ScalarSpan]

    def locate(self, pointer: Pointer, *, key: bool = False) -> Location:
        """Location of the value (or, with ``key=True``, the key) at ``pointer``.

        Falls back to the nearest enclosing value that has a position.
        """
        pointer = tuple(pointer)
        if key and pointer in self.key_positions:
            return self._loc(self.key_positions[pointer])
        while pointer:
            if pointer in self.positions:
                return self._loc(self.positions[pointer])
            pointer = pointer[:-1]
        return self._loc(self.positions.get((), Pos(0, 0, 0)))

    def locate_in_string(self, pointer: Pointer, offset: int) -> Location:
        """Location of character ``offset`` of the string value at ``pointer``."""
        pointer = tuple(pointer)
        span = self.spans.get(pointer)
        value = _get(self.data, pointer)
        if span is None or not isinstance(value, str):
            return self.locate(pointer)
        offset = max(0, min(offset, len(value)))
        pos = _map_offset(self.text, span, value, offset)
        return self._loc(pos)

    def _loc(self, pos: Pos) -> Location:
        return Location(self.path, pos.line + 1, pos.column + 1)


def _get(data: Any, pointer: Pointer) -> Any:
    for part in pointer:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _index_to_pos(text: str, base: Pos, raw_start: int, i: int) -> Pos:
    """Position of ``text[raw_start + i]`` given that ``raw_start`` is at ``base``."""
    chunk = text[raw_start : raw_start + i]
    newlines = chunk.count("\n")
    if newlines == 0:
        return Pos(base.line, base.column + i, raw_start + i)
    return Pos(base.line + newlines, i - chunk.rfind("\n") - 1, raw_start + i)


def _map_offset(text: str, span: ScalarSpan, value: str, offset: int) -> Pos:
    start, end, style = span.start, span.end, span.style
    raw = text[start.index : end.index]
    if style in (None, ""):
        if raw == value:
            return _index_to_pos(text, start, start.index, offset)
    elif style in ("'", '"'):
        inner = raw[1:-1]
        if inner == value:
            return _index_to_pos(text, start, start.index, offset + 1)
    elif style == "|":
        # literal block: value line k is source line (start.line + 1 + k) after its indentation
        before = value[:offset]
        k = before.count("\n")
        col_in_line = offset - (before.rfind("\n") + 1)
        lines = text.splitlines()
        src_line = start.line + 1 + k
        # skip leading blank lines that the block keeps as empty value lines
        if src_line < len(lines):
            line_text = lines[src_line]
            indent = len(line_text) - len(line_text.lstrip(" "))
            return Pos(src_line, indent + col_in_line, start.index)
    # Folded, multi-line or escaped scalars: find the text around the offset in the source.
    for width in (12, 6, 3, 1):
        fragment = value[offset : offset + width]
        if fragment and "\n" not in fragment and raw.count(fragment) == 1:
            return _index_to_pos(text, start, start.index, raw.index(fragment))
    return start
