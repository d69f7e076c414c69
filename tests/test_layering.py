"""The layering of the installed code: every import goes down, never up, and no package has a cycle.

Every ``import`` in ``dsl/`` and ``interpreter/`` (``sealflow``) is read from the AST, including imports inside
functions and under ``TYPE_CHECKING`` (a cycle hidden from the interpreter at run time is still a cycle in the
design). Each file belongs to one package (the longest prefix in ``PACKAGES``); each import between two
packages must be in ``ALLOWED``, and the imports between modules of one package must form no cycle. The rooms,
lowest first (docs/architecture.md, "The house")::

    dsl < core < store < execution < policy, providers < steps < engine < operations < runtime < server < cli

``sealflow.dsl`` never imports the interpreter or the CLI; the runtime never imports the server, the CLI or the
demo; the server reaches the runtime through its facade; nothing imports the bare names ``dsl``,
``interpreter`` or ``tools`` (they are not installed).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: source folder -> installed name (longest first)
SOURCES = (("interpreter", "sealflow"), ("dsl", "sealflow.dsl"), ("schemas", "sealflow.schemas"))

#: package prefix -> short name; a module belongs to the longest prefix it starts with
PACKAGES = {
    "sealflow": "root", "sealflow.__main__": "cli", "sealflow.cli": "cli", "sealflow.demo": "demo",
    "sealflow.schemas": "schemas", "sealflow.dsl": "dsl",  # with every sealflow.dsl.* subpackage
    "sealflow.core": "core", "sealflow.store": "store", "sealflow.execution": "execution",
    "sealflow.policy": "policy", "sealflow.providers": "providers", "sealflow.steps": "steps",
    "sealflow.engine": "engine", "sealflow.operations": "operations", "sealflow.runtime": "runtime",
    "sealflow.server": "server", "sealflow.testing": "testing",
}

_BELOW_RUNTIME = {"core", "store", "execution", "policy", "providers", "steps", "engine", "operations"}

#: package -> the packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "schemas": set(),
    "dsl": {"schemas"},
    "core": {"dsl"},
    "store": {"core", "dsl"},
    "execution": {"core", "store", "dsl"},
    "policy": {"core", "store", "execution", "dsl", "schemas"},
    "providers": {"core", "execution"},
    "steps": {"core", "store", "execution", "policy", "providers", "dsl"},
    "engine": {"core", "store", "execution", "policy", "providers", "steps", "dsl"},
    # notifications, retention, outbound webhooks: below the runtime, which attaches them
    "operations": {"core", "store", "execution", "policy", "engine", "dsl"},
    # the facade, drive, workers, dispatcher, sweeper, telemetry
    "runtime": _BELOW_RUNTIME | {"dsl", "schemas"},
    # the HTTP API, the pages and their auth: above the runtime
    "server": _BELOW_RUNTIME | {"runtime", "dsl", "schemas"},
    # test doubles (the pytest plugin of recorded models) and the backend conformance kit
    "testing": _BELOW_RUNTIME | {"runtime", "dsl", "schemas"},
    # the public face: `from sealflow import Runtime, open_store, action, Context, StepError`
    "root": {"core", "execution", "store", "runtime"},
    "cli": _BELOW_RUNTIME | {"runtime", "server", "testing", "dsl", "schemas", "root", "demo"},
    "demo": _BELOW_RUNTIME | {"runtime", "dsl", "schemas", "root"},
}

BARE = ("dsl", "interpreter", "tools")



def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    for folder, name in SOURCES:
        if rel.startswith(folder + "/"):
            parts = [name] + rel[len(folder) + 1:-3].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise AssertionError(f"{rel} is in no source folder")


def package_of(module: str) -> str | None:
    best = None
    for prefix in PACKAGES:
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else PACKAGES[best]


def source_files() -> dict[str, Path]:
    out = {}
    for folder in ("dsl", "interpreter", "schemas"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                out[module_of(path)] = path
    return out


FILES = source_files()


def imports(path: Path) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import in the file (functions and TYPE_CHECKING included)."""
    module = module_of(path)
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_pkg else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.append((full if full in FILES else base, node.lineno))
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{line}"


def edges() -> list[tuple[str, str, Path, int]]:
    out = []
    for module, path in FILES.items():
        for target, line in imports(path):
            out.append((module, target, path, line))
    return out


EDGES = edges()


def test_given_the_source_when_imports_are_read_then_none_uses_a_bare_uninstalled_name():
    bad = [f"{where(p, line)}: imports {t!r}" for _, t, p, line in EDGES if t.split(".")[0] in BARE]
    assert not bad, "import the installed names (sealflow, sealflow.dsl, ...):\n" + "\n".join(bad)


def test_given_the_layer_table_when_every_import_is_checked_then_none_goes_up_or_sideways():
    bad = []
    for module, target, path, line in EDGES:
        if not target.startswith("sealflow"):
            continue
        src, dst = package_of(module), package_of(target)
        assert src is not None, f"{where(path, line)}: {module} belongs to no package of the layer table"
        if dst is None:
            bad.append(f"{where(path, line)}: {module} imports {target}, which belongs to no package")
        elif dst != src and dst not in ALLOWED[src]:
            bad.append(f"{where(path, line)}: {module} ({src}) imports {target} ({dst}); {src} may import only "
                       f"{', '.join(sorted(ALLOWED[src])) or 'nothing'}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_given_each_package_when_its_internal_imports_are_sorted_then_there_is_no_cycle():
    graph: dict[str, set[str]] = defaultdict(set)
    lines: dict[tuple[str, str], str] = {}
    for module, target, path, line in EDGES:
        if target in FILES and target != module and package_of(target) == package_of(module):
            graph[module].add(target)
            lines.setdefault((module, target), where(path, line))
    # Kahn: repeatedly drop modules that import nothing left; what remains sits on a cycle
    left = {m: set(ts) for m, ts in graph.items()}
    for ts in graph.values():
        for t in ts:
            left.setdefault(t, set())
    changed = True
    while changed:
        changed = False
        for m in [m for m, ts in left.items() if not ts]:
            del left[m]
            for ts in left.values():
                ts.discard(m)
            changed = True
    cyclic = [f"{lines[(m, t)]}: {m} imports {t}" for m in sorted(left) for t in sorted(left[m])]
    assert not cyclic, "import cycles between modules of one package:\n" + "\n".join(cyclic)


def test_given_the_table_when_read_then_it_is_a_dag():
    # the table itself must not allow a cycle between packages (cli <-> root is the entry point pair)
    seen: dict[str, int] = {}

    def visit(p: str, stack: tuple[str, ...]) -> None:
        assert p not in stack or {p} | set(stack[stack.index(p):]) <= {"root", "cli", "demo"}, \
            f"the layer table allows a cycle: {' -> '.join(stack + (p,))}"
        if p in stack or seen.get(p):
            return
        for q in ALLOWED[p]:
            visit(q, stack + (p,))
        seen[p] = 1

    for p in ALLOWED:
        visit(p, ())


def test_given_the_server_when_its_code_is_read_then_it_never_reaches_past_the_runtime_facade():
    # Given every module of the server room (HTTP API, pages, auth, signed events)
    reaching = []
    for path in sorted((ROOT / "interpreter" / "server").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            # When an attribute named store or engine is read off anything but the server's own objects (self)
            if isinstance(node, ast.Attribute) and node.attr in ("store", "engine") \
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                reaching.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    # Then there is none: the server talks to the runtime's facade (runtime/reading.py grows what it needs)
    assert not reaching, reaching
