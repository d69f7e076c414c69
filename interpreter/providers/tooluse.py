"""Tool use (agent steps) shared by the adapters: wire-safe tool names and transcript turns.

Sealflow tool names are action names such as ``kb.search``; both APIs accept only
``[A-Za-z0-9_-]`` in a function name, so :class:`ToolNames` maps each to a safe name
(``kb_search``, made unique) and back. Transcript turns (see :mod:`.base`) become an
assistant turn proposing the call and a tool-result turn; :func:`call_id` gives calls
without an id a stable one, and :func:`result_text` the JSON text the model reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.base import ToolCall, ToolSpec

OUTPUT_TOOL = "sealflow_final_output"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class ToolNames:
    """Sealflow tool names <-> names the APIs accept (1-64 of ``[A-Za-z0-9_-]``)."""

    def __init__(self, names: Iterable[str]):
        self.wire: dict[str, str] = {}
        self.sealflow: dict[str, str] = {}
        for name in names:
            self.add(name)

    def add(self, name: str) -> str:
        if name in self.wire:
            return self.wire[name]
        base = _UNSAFE.sub("_", name)[:60] or "tool"
        safe, n = base, 1
        while safe in self.sealflow or safe == OUTPUT_TOOL:
            n += 1
            safe = f"{base[:57]}_{n}"
        self.wire[name], self.sealflow[safe] = safe, name
        return safe

    def to_sealflow(self, wire_name: str, *, model: str) -> str:
        if wire_name not in self.sealflow:
            # the system validates calls; an unknown name is still reported as what the model said
            return wire_name
        return self.sealflow[wire_name]


def names_for(tools: Iterable[ToolSpec], transcript: Iterable[dict[str, Any]]) -> ToolNames:
    names = ToolNames(t.name for t in tools)
    for turn in transcript:
        call = turn.get("call") if isinstance(turn, dict) else None
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            names.add(call["name"])
    return names


def as_map(value: Any) -> dict[str, Any]:
    """``value`` when it is a map, else an empty one (answers and transcripts are untrusted JSON)."""
    return value if isinstance(value, dict) else {}


def call_id(turn_index: int, call: dict[str, Any]) -> str:
    ident = call.get("id")
    return ident if isinstance(ident, str) and ident else f"call_{turn_index + 1}"


def result_text(turn: dict[str, Any]) -> str:
    """What the model reads as a call's outcome: the result, or the error, as JSON."""
    if turn.get("status") == "ok":
        body: Any = turn.get("result")
    else:
        body = {"status": turn.get("status", "error"), "error": turn.get("error")}
    return json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)


def is_error(turn: dict[str, Any]) -> bool:
    return turn.get("status") != "ok"


def parse_arguments(raw: Any, *, model: str, tool: str) -> dict[str, Any]:
    """A call's arguments: a map, or a JSON text of one (OpenAI); else ``invalid_output``."""
    if isinstance(raw, dict):
        return raw
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        raise StepError("invalid_output", f"model {model!r} proposed a call to {tool!r} whose arguments are not "
                                          "JSON") from None
    if not isinstance(value, dict):
        raise StepError("invalid_output", f"model {model!r} proposed a call to {tool!r} whose arguments are not "
                                          "a JSON object")
    return value


def tool_call(names: ToolNames, wire_name: str, arguments: Any, ident: str | None, *, model: str) -> ToolCall:
    name = names.to_sealflow(wire_name, model=model)
    return ToolCall(name, parse_arguments(arguments, model=model, tool=name), id=ident)
