"""An agent's ``mcp_tools``: each ``SERVER/TOOL`` found in the project's ``sealflow.mcp.lock`` and compiled into
a :class:`~sealflow.dsl.plan.McpToolPlan` holding the locked description, input schema and digests (so the plan
digest covers them), with the effect and permissions the definition declares.

The lock is the caller's (:attr:`ProjectFacts.mcp_lock`: ``sealflow diff --base`` gives the lock as it was at
the ref), else ``sealflow.mcp.lock`` in the folder the caller named as the compile's root (an executor
re-verifying stored signed bytes: the lock was stored with them), else the nearest ``sealflow.mcp.lock`` in the
definition's folder or above. The lock read is recorded with the referenced files
(:func:`~sealflow.dsl.refs.recording`), so signed bytes are stored with the lock they were compiled against. A
tool missing from it, a lock that cannot be read and a tool named twice are located errors (C431); a permission
the step does not hold is C413.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sealflow.dsl import mcp_lock
from sealflow.dsl.document import Pointer
from sealflow.dsl.plan import McpToolPlan
from sealflow.dsl.refs import record

if TYPE_CHECKING:
    from sealflow.dsl.loader import Document
    from sealflow.dsl.model import Agent, Step
    from sealflow.dsl.typecheck import ProjectFacts


class Compiler(Protocol):
    """What this reads of the compiler: the document, the project's facts, where errors go."""

    doc: Document
    facts: ProjectFacts
    root: Path | None

    def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
              key: bool = False) -> None: ...

#: the diagnostic of a tool the lock does not pin (dsl/codes.py)
NOT_PINNED = "C431"
HINT = "run `sealflow mcp lock` beside sealflow.yaml (it lists the servers under mcp:), review and commit the lock"


def _lock(c: Compiler) -> tuple[Mapping[str, mcp_lock.LockedTool] | None, str]:
    """The lock and where it came from; None with the reason when there is none to read."""
    if c.facts.mcp_lock is not None:
        return c.facts.mcp_lock, "the project's sealflow.mcp.lock"
    if c.root is not None:  # the folder the caller named (stored signed bytes with their refs): only its lock
        found = c.root / mcp_lock.NAME
        if not found.is_file():
            return None, f"no {mcp_lock.NAME} was stored with these signed bytes (in {c.root})"
    else:
        folder = Path(c.doc.path).resolve().parent if c.doc.path and not c.doc.path.startswith("<") else Path.cwd()
        nearest = mcp_lock.find(folder)
        if nearest is None:
            return None, f"no {mcp_lock.NAME} in {folder} or a folder above it"
        found = nearest
    try:
        text = found.read_text(encoding="utf-8")
        lock = mcp_lock.parse(text, str(found))
    except OSError as exc:
        return None, f"cannot read {found}: {exc.strerror or exc}"
    except mcp_lock.LockError as exc:
        return None, str(exc)
    record(mcp_lock.NAME, text)  # stored with signed bytes, so an executor compiles the same plan
    return lock, str(found)


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
            c.error(NOT_PINNED, f"MCP tool {ref.tool!r} cannot be checked against a lock: {source}", at + ("tool",),
                    HINT)
            continue
        locked = lock.get(ref.tool)
        if locked is None:
            server = ref.tool.split("/", 1)[0]
            known = sorted(k for k in lock if k.startswith(server + "/"))
            c.error(NOT_PINNED, f"MCP tool {ref.tool!r} is not pinned in {source}"
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
