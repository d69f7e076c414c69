"""Type-check the installed ``sealflow`` package with mypy and report repository paths.

setuptools installs the repository's folders under one import name through ``package-dir`` in
pyproject.toml (``sealflow.dsl`` = ``dsl/``, ``sealflow`` = ``interpreter/sealflow/``, ...). mypy cannot see
that mapping through an editable install, and run on the folders themselves it would name the modules
``dsl.loader`` or ``interpreter.engine``, so the per-module settings for ``sealflow.dsl.*`` would never
apply. This script builds a tree of symlinks with the installed names, runs mypy on it with the
configuration in pyproject.toml, and rewrites every path in mypy's output back to the repository's, so that
``sealflow/dsl/loader.py:12: error: ...`` reads ``dsl/loader.py:12: error: ...``.

What is checked is ``[tool.mypy] packages`` in pyproject.toml; a listed package that does not exist (yet) in
the tree is skipped with a note on stderr rather than failing the run.

Usage (from anywhere; run by .ci/run before the tests):

    python tools/typecheck.py [MYPY OPTIONS...]

The exit code is mypy's: 0 clean, 1 type errors, 2 a usage or setup error.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "sealflow"
_PATH_AT_LINE_START = re.compile(r"^(?P<path>[^\s:][^:\n]*?\.pyi?)(?=:)", re.MULTILINE)


def package_dirs(pyproject: Path = REPO / "pyproject.toml") -> dict[str, Path]:
    """The installed package name -> repository folder mapping, from ``[tool.setuptools.package-dir]``."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    if PACKAGE not in mapping:
        raise SystemExit(f"{pyproject}: [tool.setuptools.package-dir] does not map {PACKAGE!r}; nothing to check")
    return {name: (pyproject.parent / folder).resolve() for name, folder in mapping.items()}


def mypy_targets(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The packages to check, from ``[tool.mypy] packages``; the whole ``sealflow`` package if none is listed."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    packages = config.get("tool", {}).get("mypy", {}).get("packages", [PACKAGE])
    if isinstance(packages, str):
        packages = [name.strip() for name in packages.split(",") if name.strip()]
    return list(packages)


def present(root: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """Split dotted package names into those found in the tree under ``root`` and those missing."""
    found: list[str] = []
    missing: list[str] = []
    for name in names:
        path = root.joinpath(*name.split("."))
        exists = (path / "__init__.py").exists() or path.with_suffix(".py").exists()
        (found if exists else missing).append(name)
    return found, missing


def build_tree(root: Path, mapping: dict[str, Path]) -> Path:
    """Lay out ``root/sealflow/...`` as the wheel would install it, with symlinks into the repository.

    Each mapped package is a real folder; its entries are symlinks to the repository's files and
    subfolders, except an entry that is itself mapped elsewhere (``interpreter/sealflow`` is the package
    ``sealflow``, not ``sealflow.interpreter.sealflow``) and caches.
    """
    top = root / PACKAGE
    if top.exists():
        shutil.rmtree(top)
    mapped_sources = set(mapping.values())
    for name in sorted(mapping, key=lambda n: n.count(".")):
        source = mapping[name]
        if not source.is_dir():
            raise SystemExit(f"pyproject.toml: package-dir maps {name!r} to {source}, which is not a folder")
        target = root.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for entry in sorted(source.iterdir()):
            if entry.name == "__pycache__" or f"{name}.{entry.name}" in mapping:
                continue
            if entry.is_dir() and entry.resolve() in mapped_sources:
                continue
            (target / entry.name).symlink_to(entry)
    return top


def to_repository_paths(text: str, tree: Path, repo: Path = REPO) -> str:
    """Rewrite each ``path:`` at a line start from the symlink tree to the repository's relative path."""

    def repl(match: re.Match[str]) -> str:
        shown = match.group("path")
        real = Path(os.path.realpath(tree / shown))
        try:
            return str(real.relative_to(repo))
        except ValueError:
            return shown  # outside the repository (a stub, site-packages): leave as mypy printed it

    return _PATH_AT_LINE_START.sub(repl, text)


def _work_dir() -> Path:
    # A stable place per checkout, so that mypy's incremental cache survives between runs.
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"sealflow-typecheck-{key}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        import mypy  # noqa: F401
    except ImportError:
        print("tools/typecheck.py: mypy is not installed; install the dev extra: pip install -e '.[dev]'",
              file=sys.stderr)
        return 2
    work = _work_dir()
    work.mkdir(parents=True, exist_ok=True)
    build_tree(work, package_dirs())
    targets, missing = present(work, mypy_targets())
    for name in missing:
        print(f"tools/typecheck.py: note: {name} (pyproject.toml [tool.mypy] packages) does not exist; skipped",
              file=sys.stderr)
    if not targets:
        print("tools/typecheck.py: none of [tool.mypy] packages in pyproject.toml exists; nothing to check",
              file=sys.stderr)
        return 2
    command = [
        sys.executable, "-m", "mypy",
        "--config-file", str(REPO / "pyproject.toml"),
        "--cache-dir", str(work / ".mypy_cache"),
        *args,
        *(option for name in targets for option in ("-p", name)),
    ]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    sys.stdout.write(to_repository_paths(done.stdout, work))
    sys.stderr.write(to_repository_paths(done.stderr, work))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
