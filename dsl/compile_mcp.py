"""An agent's ``mcp_tools``: each ``SERVER/TOOL`` found in the project's ``sealflow.mcp.lock`` and compiled into
a :class:`~sealflow.dsl.plan.McpToolPlan` holding the locked description, input schema and digests (so the plan
digest covers them), with the effect and permissions the definition declares.

The lock is the project's (:attr:`ProjectFacts.mcp_lock`, given by the command line) or, when none was given,
the nearest ``sealflow.mcp.lock`` in the definition's folder or above. A tool missing from it, a lock that cannot
be read and a tool named twice are located errors (C428); a permission the step does not hold is C413.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sealflow.dsl import mcp_lock
from sealflow.dsl.document import Pointer
from sealflow.dsl.plan import McpToolPlan

if TYPE_CHECKING:
    from sealflow.dsl.loader import Document
    from sealflow.dsl.model import Agent, Step
    from sealflow.dsl.typecheck import ProjectFacts


class Compiler(Protocol):
    """What this reads of the compiler: the document, the project's facts, where errors go."""

    doc: Document
    facts: ProjectFacts

    def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
              key: bool = False) -> None: ...

HINT = "run `sealflow mcp lock` beside sealflow.yaml (it lists the servers under mcp:), review and commit the lock"


def _lock(c: Compiler) -> tuple[Mapping[str, mcp_lock.LockedTool] | None, str]:
    """The lock and where it came from; None with the reason when there is none to read."""
    if c.facts.mcp_lock is not None:
        return c.facts.mcp_lock, "the project's sealflow.mcp.lock"
    folder = Path(c.doc.path).resolve().parent if c.doc.path and not c.doc.path.startswith("<") else Path.cwd()
    found = mcp_lock.find(folder)
    if found is None:
        return None, f"no {mcp_lock.NAME} in {folder} or a folder above it"
    try:
        return mcp_lock.read(found), str(found)
    except mcp_lock.LockError as exc:
        return None, str(exc)


def mcp_tools(c: Compiler, s: Step, ag: Agent, pp: Pointer) -> tuple[McpToolPlan, ...] | None:
    """The plan's MCP tools of agent ``ag`` of step ``s`` (None when it names none)."""
    if not ag.mcp_tools:
        return None
    lock, source = _lock(c)
    out: list[McpToolPlan] = []
    seen: set[str] = set()
    for j, ref in enumerate(ag.mcp_tools):
        at = pp + ("mcp_tools", j)
        if ref.tool in seen:
            c.error("C418", f"MCP tool {ref.tool!r} is listed twice", at + ("tool",), "list each tool once")
            continue
        seen.add(ref.tool)
        for perm in ref.permissions:
            if perm not in s.permissions:
                c.error("C413", f"MCP tool {ref.tool!r} needs permission {perm!r}; step {s.id!r} does not list it",
                        at + ("permissions",), f"add {perm!r} to the step's permissions")
        if lock is None:
            c.error("C428", f"MCP tool {ref.tool!r} cannot be checked against a lock: {source}", at + ("tool",), HINT)
            continue
        locked = lock.get(ref.tool)
        if locked is None:
            server = ref.tool.split("/", 1)[0]
            known = sorted(k for k in lock if k.startswith(server + "/"))
            c.error("C428", f"MCP tool {ref.tool!r} is not pinned in {source}"
                            + (f" (it pins {', '.join(known[:8])})" if known else f" (no tools of server {server!r})"),
                    at + ("tool",), HINT)
            continue
        digests = locked.digests
        out.append(McpToolPlan(server=locked.server, tool=locked.name, name=f"mcp.{locked.server}.{locked.name}",
                               effect=ref.effect, permissions=tuple(ref.permissions), description=locked.description,
                               input_schema=locked.input_schema, description_digest=digests["description"],
                               input_schema_digest=digests["input_schema"],
                               output_schema_digest=digests["output_schema"]))
    return tuple(out)
