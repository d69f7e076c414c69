"""How ``call`` compiles: another definition, found beside this one, compiled and pinned by its plan digest.

``call: {workflow: NAME, version: N, input: {...}}`` names a definition by name and version. The compiler looks
for ``NAME.vN.yaml`` (:func:`find_called`): in the caller's folder, then in the repository's ``definitions/``,
then anywhere under the repository root (one file of that name, else ambiguous); every file it reads is
recorded (:func:`sealflow.dsl.refs.recording`), so an executing process that verifies the caller's signed bytes
compiles the same child again. The child is compiled whole (its own errors reported at the call, C428); the
call step's plan carries the child's plan and its digest, and the caller's digest covers that digest: a
changed child changes the caller (``sealflow diff`` shows it, D635).

Refused at compile time: a child declaring a permission its caller does not (C429: least privilege cannot be
widened through a child), a call cycle and calls nested deeper than :data:`CALL_DEPTH_MAX` (C430), a call
inside a ``map`` or ``parallel`` sub-flow (C419: call a workflow that maps instead).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealflow.dsl.compile_fanout import fields_beyond
from sealflow.dsl.document import Pointer
from sealflow.dsl.limits import CALL_DEPTH_MAX
from sealflow.dsl.model import Step
from sealflow.dsl.plan import CallPlan
from sealflow.dsl.refs import read_recorded

if TYPE_CHECKING:
    from sealflow.dsl.model import Definition
    from sealflow.dsl.refs import SchemaResolver

#: fields of a call step itself; every other common field belongs on the called workflow's steps
CALL_STEP_FIELDS = frozenset({"id", "name", "description", "when", "next", "on_error", "lint", "call"})
_SKIP = frozenset({".git", ".venv", "node_modules", "__pycache__", ".tox"})
_SEARCH_DEPTH = 6

#: the (name, version) of each definition being compiled, outermost first (cycles and depth)
_STACK: contextvars.ContextVar[tuple[tuple[str, int], ...]] = contextvars.ContextVar("sealflow_calls", default=())


@contextlib.contextmanager
def _calling(name: str, version: int) -> Iterator[None]:
    token = _STACK.set((*_STACK.get(), (name, version)))
    try:
        yield
    finally:
        _STACK.reset(token)


def file_name(workflow: str, version: int) -> str:
    return f"{workflow}.v{version}.yaml"


def find_called(caller: str | Path, root: Path, workflow: str, version: int) -> tuple[Path | None, str]:
    """(the file of ``workflow`` v``version``, "") or (None, why not): the caller's folder, ``<root>/definitions``,
    then one file of that name anywhere under ``root``."""
    name = file_name(workflow, version)
    base = root.resolve()
    here = Path(caller).resolve().parent
    for folder in (here, base / "definitions"):
        candidate = folder / name
        if candidate.is_file() and _inside(candidate, base):
            return candidate, ""
    found = sorted(_search(base, name))
    if len(found) == 1:
        return found[0], ""
    if found:
        shown = ", ".join(str(f.relative_to(base)) for f in found[:3])
        return None, f"{len(found)} files are named {name} under {base} ({shown}); keep one"
    return None, f"no file {name} beside {Path(caller).name}, in {base / 'definitions'} or elsewhere under {base}"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _search(root: Path, name: str, depth: int = 0) -> Iterator[Path]:
    if depth > _SEARCH_DEPTH:
        return
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name in _SKIP or entry.is_symlink():
            continue
        if entry.is_dir():
            yield from _search(entry, name, depth + 1)
        elif entry.name == name:
            yield entry


class CallKinds:
    """Methods of :class:`~sealflow.dsl.compiler.Compiler` for ``call`` steps."""

    if TYPE_CHECKING:
        d: Definition
        resolver: SchemaResolver
        check_called: Callable[[bytes, str], Any] | None

        def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
                  key: bool = False) -> None: ...

    def _call_fields(self, s: Step, p: Pointer) -> None:
        """A call step carries only its id, names, ``when``, ``next``, ``on_error`` and ``lint``."""
        for key in fields_beyond(s, CALL_STEP_FIELDS):
            self.error("C418", f"call step {s.id!r} does not take {key!r}: the called workflow's steps declare "
                       "their own", p + (key,), f"remove {key!r} (set it on the called workflow's steps)", key=True)

    def _call(self, s: Step, p: Pointer) -> CallPlan | None:
        """The plan of a ``call`` step, or None (with located errors) when its child cannot be pinned."""

        c = s.call
        assert c is not None
        self._call_fields(s, p)
        cp = p + ("call",)
        if c.version < 1:
            self.error("C418", f"call version {c.version} is not a version (1, 2, ...)", cp + ("version",))
            return None
        me = (self.d.name, self.d.version)
        stack = _STACK.get() or (me,)
        chain = " -> ".join(f"{n} v{v}" for n, v in (*stack, (c.workflow, c.version)))
        if (c.workflow, c.version) in stack:
            self.error("C430", f"call cycle: {chain}", cp + ("workflow",),
                       "a workflow cannot call itself, directly or through another")
            return None
        if len(stack) > CALL_DEPTH_MAX:
            self.error("C430", f"calls nest {len(stack)} deep ({chain}), over the bound of {CALL_DEPTH_MAX}",
                       cp + ("workflow",), "flatten the chain: call fewer levels deep")
            return None
        root = self.resolver.root
        path, why = find_called(self.resolver.doc.path, root, c.workflow, c.version)
        if path is None:
            self.error("C428", f"cannot find workflow {c.workflow} v{c.version}: {why}", cp + ("workflow",),
                       f"put {file_name(c.workflow, c.version)} beside this definition or in definitions/")
            return None
        rel = str(path.resolve().relative_to(root.resolve()))
        text = read_recorded(root, rel)
        if text is None:
            self.error("C428", f"cannot read {rel}", cp + ("workflow",))
            return None
        with _calling(*me) if not _STACK.get() else contextlib.nullcontext(), _calling(c.workflow, c.version):
            if self.check_called is None:
                self.error("C428", f"workflow {c.workflow} v{c.version} cannot be compiled here (no compiler for "
                                   "called workflows)", cp + ("workflow",))
                return None
            result = self.check_called(text.encode(), str(path))
        if result.plan is None or result.errors:
            first = (result.errors or result.diagnostics)
            shown = first[0].format().splitlines()[0] if first else "it does not compile"
            code = "C430" if any(e.code == "C430" for e in first) else "C428"  # (a cycle through it, or too deep)
            self.error(code, f"workflow {c.workflow} v{c.version} ({rel}) does not compile: {shown}",
                       cp + ("workflow",), f"sealflow validate {rel}")
            return None
        child = result.plan
        if (child.name, child.version) != (c.workflow, c.version):
            self.error("C428", f"{rel} holds {child.name} v{child.version}, not {c.workflow} v{c.version}",
                       cp + ("workflow",))
            return None
        wider = [perm for perm in child.permissions if perm not in self.d.permissions]
        if wider:
            self.error("C429", f"workflow {c.workflow} v{c.version} declares {', '.join(map(repr, wider))}, which "
                       f"{self.d.name} does not: a child cannot widen its caller's permissions", cp + ("workflow",),
                       "declare them in this workflow's permissions (for review), or narrow the child")
        return CallPlan(workflow=c.workflow, version=c.version, digest=child.digest, input=dict(c.input), plan=child)


def called_files(plan: Any) -> Iterator[tuple[str, int, str]]:
    """(workflow, version, digest) of every workflow ``plan`` calls directly."""
    for _, call in plan.called():
        yield call.workflow, call.version, call.digest
