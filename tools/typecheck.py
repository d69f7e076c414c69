"""Type-check the ``sealflow`` package with mypy, reading the repository's own files under their installed names.

setuptools maps the repository's folders to one import name (``sealflow`` = ``interpreter/``, ``sealflow.dsl``
= ``dsl/``, ``sealflow.schemas`` = ``schemas/``: ``[tool.setuptools.package-dir]`` in pyproject.toml). mypy
names a module by its path, so run on the folders it would call them ``interpreter.engine`` or ``dsl.loader``
and no import between them would resolve. mypy's build API takes each source as a (path, module name) pair,
so this script hands it every file of the checked packages with its installed name, found from that same
mapping: no copy, no link tree, and mypy reports the repository's own paths (``dsl/loader.py:12: error``).

Every module of ``sealflow`` is checked; how strictly, and which packages are not reported yet, is
pyproject.toml's ``[tool.mypy]`` with its per-module overrides.

Usage (from anywhere; run by .ci/run before the tests):

    python tools/typecheck.py [MYPY OPTIONS...]

The exit code is mypy's: 0 clean, 1 type errors, 2 a usage or setup error.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "sealflow"


def package_dirs(pyproject: Path = REPO / "pyproject.toml") -> dict[str, Path]:
    """The installed package name -> repository folder mapping, from ``[tool.setuptools.package-dir]``."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    if PACKAGE not in mapping:
        raise SystemExit(f"{pyproject}: [tool.setuptools.package-dir] does not map {PACKAGE!r}; nothing to check")
    return {name: (pyproject.parent / folder).resolve() for name, folder in mapping.items()}


def modules(mapping: dict[str, Path]) -> dict[str, Path]:
    """Every module of the mapped folders by its installed name (``sealflow.dsl.loader`` -> ``dsl/loader.py``).

    A folder mapped to a name of its own is that name's, not also its parent's; caches are skipped.
    """
    roots = set(mapping.values())
    found: dict[str, Path] = {}
    for name, folder in mapping.items():
        for path in sorted(folder.rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
                continue
            if any(root != folder and root.is_relative_to(folder) and path.is_relative_to(root) for root in roots):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def _cache_dir() -> Path:
    # A stable place per checkout, so that mypy's incremental cache survives between runs.
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"sealflow-typecheck-{key}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        from mypy import build
        from mypy.errors import CompileError
        from mypy.fscache import FileSystemCache
        from mypy.main import process_options
        from mypy.modulefinder import BuildSource
    except ImportError:
        print("tools/typecheck.py: mypy is not installed; install the dev extra: pip install -e '.[dev]'",
              file=sys.stderr)
        return 2
    found = modules(package_dirs())
    os.chdir(REPO)  # paths in mypy's messages read relative to the repository
    fscache = FileSystemCache()
    _, options = process_options(["--config-file", "pyproject.toml", "--cache-dir", str(_cache_dir()), *args,
                                  "-c", "pass"], fscache=fscache)
    # Every module of the tree is a source under its installed name, so every import between them resolves to
    # the repository's file; what is reported, and how strictly, is pyproject.toml's [tool.mypy] overrides.
    sources = [BuildSource(str(path.relative_to(REPO)), module, None) for module, path in found.items()]
    try:
        result = build.build(sources, options, fscache=fscache)
    except CompileError as error:
        print("\n".join(error.messages), file=sys.stderr)
        return 2
    shown = result.errors
    for line in shown:
        print(line)
    files = {line.split(":", 1)[0] for line in shown if ": error:" in line}
    count = sum(": error:" in line for line in shown)
    if count:
        print(f"Found {count} error{'s' * (count != 1)} in {len(files)} file{'s' * (len(files) != 1)} "
              f"(checked {len(found)} source files)")
        return 1
    print(f"Success: no issues found in {len(found)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
