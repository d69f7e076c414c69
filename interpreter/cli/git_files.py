"""Definition files at a git ref and in the working tree, for ``sealflow diff --base REF``."""

from __future__ import annotations

import subprocess
from pathlib import Path

YAML_SUFFIXES = (".yaml", ".yml")
#: workflow test files (``sealflow test``, docs/testing.md) live beside definitions but are not definitions
TEST_SUFFIXES = (".test.yaml", ".test.yml")


def is_definition_name(name: str) -> bool:
    """Whether a file named ``name`` under a definitions folder is a definition (a .yaml that is not a test)."""
    return name.endswith(YAML_SUFFIXES) and not name.endswith(TEST_SUFFIXES)


class GitError(Exception):
    """A git command failed."""


def _git(args: list[str], cwd: Path) -> bytes:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except OSError as exc:
        raise GitError(f"cannot run git: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        raise GitError(proc.stderr.decode("utf-8", "replace").strip() or f"git {' '.join(args)} failed")
    return proc.stdout


def files_at_ref(ref: str, paths: list[str]) -> tuple[Path, list[tuple[str, bytes]]]:
    """The repository root and the (repo-relative path, bytes) of every definition under ``paths`` at ``ref``."""
    cwd = Path.cwd()
    top = Path(_git(["rev-parse", "--show-toplevel"], cwd).decode().strip()).resolve()
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], top)
    except GitError:
        raise GitError(f"unknown git ref {ref!r} (fetch it first: actions/checkout with fetch-depth: 0)") from None
    specs = []
    for raw in paths:
        try:
            rel = (cwd / raw).resolve().relative_to(top)
        except ValueError:
            raise GitError(f"{raw} is outside the repository {top}") from None
        specs.append(rel.as_posix() if str(rel) != "." else ".")
    listed = _git(["ls-tree", "-r", "-z", "--name-only", "--full-tree", ref, "--", *specs], top)
    names = sorted({n for n in listed.decode("utf-8", "surrogateescape").split("\0")
                    if is_definition_name(n)})
    return top, [(n, _git(["show", f"{ref}:{n}"], top)) for n in names]


def working_files(paths: list[str]) -> list[Path]:
    """The definitions under ``paths`` in the working tree (missing paths are skipped: a deleted folder)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if is_definition_name(q.name) and q.is_file()))
        elif p.is_file():
            out.append(p)
    return out


def lock_at_ref(top: Path, ref: str, name: str) -> bytes | None:
    """The ``sealflow.mcp.lock`` a definition at ``ref`` (repo-relative ``name``) was compiled against: the nearest
    one in its folder or above, as it was at ``ref`` (None: there was none)."""
    from posixpath import dirname, join

    folder = dirname(name)
    while True:
        try:
            return _git(["show", f"{ref}:{join(folder, 'sealflow.mcp.lock') if folder else 'sealflow.mcp.lock'}"],
                        top)
        except GitError:
            if not folder:
                return None
            folder = dirname(folder)
