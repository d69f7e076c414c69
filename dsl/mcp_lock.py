"""``sealflow.mcp.lock``: the MCP tools a project pinned, read and written here (no network; ``sealflow mcp lock``
lists the servers and hands this module what they listed).

The lock is JSON, written sorted and indented so that a change reads as a diff in review::

    {"sealflow_mcp_lock": 1,
     "servers": {"time": {"tools": {"get_current_time": {
         "description": "...", "description_digest": "sha256:...",
         "input_schema": {...}, "input_schema_digest": "sha256:...",
         "output_schema": null, "output_schema_digest": "sha256:..."}}}}}

Each digest is the sha256 of the value's canonical JSON (keys sorted, no spaces): the description as a JSON
string, a missing output schema as ``null``. Reading recomputes every digest: a hand-edited lock whose digest no
longer says what it holds is refused. The compiler copies the locked entries of the tools a definition names
into its plan (so the plan digest covers them); at run time the live tools are compared with the plan's digests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NAME = "sealflow.mcp.lock"
FORMAT = 1
#: a tool's name as MCP allows it (letters, digits, ``_``, ``-``, ``.``; at most 128)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
SERVER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
PARTS = ("description", "input_schema", "output_schema")


class LockError(Exception):
    """The lock cannot be read or is not a lock this version writes: the message says where and what."""


def digest(value: Any) -> str:
    """``sha256:<hex>`` of ``value``'s canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class LockedTool:
    """One pinned tool: what the server listed when the lock was written, and the digest of each part."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None

    @property
    def digests(self) -> dict[str, str]:
        return {part: digest(getattr(self, part)) for part in PARTS}

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part, value in zip(PARTS, (self.description, self.input_schema, self.output_schema), strict=True):
            out[part] = value
            out[f"{part}_digest"] = digest(value)
        return out


#: "server/tool" -> its locked entry
Lock = dict[str, LockedTool]


def render(tools: Mapping[str, LockedTool]) -> str:
    """The lock's text: deterministic (sorted keys, two-space indent, one trailing newline)."""
    servers: dict[str, dict[str, Any]] = {}
    for t in tools.values():
        servers.setdefault(t.server, {"tools": {}})["tools"][t.name] = t.entry()
    return json.dumps({"sealflow_mcp_lock": FORMAT, "servers": servers}, sort_keys=True, indent=2,
                      ensure_ascii=False) + "\n"


def parse(text: str, where: str) -> Lock:
    """The tools of a lock's text; :class:`LockError` names ``where`` and what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LockError(f"{where}: not valid JSON ({exc}); write it again with `sealflow mcp lock`") from None
    if not isinstance(data, dict) or data.get("sealflow_mcp_lock") != FORMAT or \
            not isinstance(data.get("servers"), dict):
        raise LockError(f"{where}: not a Sealflow MCP lock of format {FORMAT} "
                        "({\"sealflow_mcp_lock\": 1, \"servers\": {...}}); write it with `sealflow mcp lock`")
    out: Lock = {}
    for server, body in sorted(data["servers"].items()):
        tools = body.get("tools") if isinstance(body, dict) else None
        if not SERVER_NAME.match(str(server)) or not isinstance(tools, dict):
            raise LockError(f"{where}: servers.{server}: expected a server name with {{\"tools\": {{...}}}}")
        for name, entry in sorted(tools.items()):
            out[f"{server}/{name}"] = _tool(server, name, entry, f"{where}: servers.{server}.tools.{name}")
    return out


def _tool(server: str, name: str, entry: Any, where: str) -> LockedTool:
    if not TOOL_NAME.match(name) or not isinstance(entry, dict):
        raise LockError(f"{where}: expected a tool name and its entry")
    description, schema, output = (entry.get(p) for p in PARTS)
    if not isinstance(description, str) or not isinstance(schema, dict) or \
            not (output is None or isinstance(output, dict)):
        raise LockError(f"{where}: needs description (text), input_schema (a map) and output_schema (a map or "
                        "null)")
    tool = LockedTool(server, name, description, schema, output)
    for part, expected in tool.digests.items():
        if entry.get(f"{part}_digest") != expected:
            raise LockError(f"{where}: {part}_digest does not match its {part} (was the lock edited by hand?); "
                            "write it again with `sealflow mcp lock` and review the change")
    return tool


def read(path: str | os.PathLike[str]) -> Lock:
    """The lock at ``path``."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LockError(f"cannot read the MCP lock {where}: {exc.strerror or exc}") from None
    return parse(text, where)


def find(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``sealflow.mcp.lock`` in ``start`` or a folder above it (it sits beside ``sealflow.yaml``)."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        candidate = folder / NAME
        if candidate.is_file():
            return candidate
    return None
