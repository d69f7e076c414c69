"""tools/typecheck.py lays out the installed names for mypy and reports the repository's paths."""

from __future__ import annotations

from pathlib import Path

from tools import typecheck


def test_the_tree_has_the_installed_names_and_no_duplicate_of_the_cli_package(tmp_path: Path) -> None:
    # Given the repository's package-dir mapping
    mapping = typecheck.package_dirs()
    # When the symlink tree is built
    top = typecheck.build_tree(tmp_path, mapping)
    # Then the installed names lead to the repository's files
    assert (top / "__init__.py").resolve() == typecheck.REPO / "interpreter" / "sealflow" / "__init__.py"
    assert (top / "dsl" / "__init__.py").resolve() == typecheck.REPO / "dsl" / "__init__.py"
    assert (top / "interpreter" / "__init__.py").resolve() == typecheck.REPO / "interpreter" / "__init__.py"
    # and interpreter/sealflow appears once, as `sealflow`, not also as `sealflow.interpreter.sealflow`
    assert not (top / "interpreter" / "sealflow").exists()
    assert not list(top.rglob("__pycache__"))


def test_a_rebuilt_tree_replaces_the_old_one(tmp_path: Path) -> None:
    # Given a tree built once, holding a link whose target has since moved away
    top = typecheck.build_tree(tmp_path, typecheck.package_dirs())
    (top / "dsl" / "gone.py").symlink_to(tmp_path / "nowhere.py")
    # When it is built again
    typecheck.build_tree(tmp_path, typecheck.package_dirs())
    # Then the stale link is gone
    assert not (top / "dsl" / "gone.py").is_symlink()


def test_mypy_paths_are_mapped_back_to_the_repository(tmp_path: Path) -> None:
    # Given mypy's output on the symlink tree
    typecheck.build_tree(tmp_path, typecheck.package_dirs())
    output = (
        "sealflow/dsl/__init__.py:12: error: Missing return statement  [return]\n"
        "sealflow/cli/__init__.py:3:5: note: See https://mypy.readthedocs.io\n"
        "sealflow/interpreter/__init__.py:7: error: Name \"x\" is not defined  [name-defined]\n"
        "Found 2 errors in 2 files (checked 111 source files)\n"
    )
    # When the paths are rewritten
    shown = typecheck.to_repository_paths(output, tmp_path)
    # Then each reads as the repository's path, and the summary is untouched
    assert shown.splitlines() == [
        "dsl/__init__.py:12: error: Missing return statement  [return]",
        "interpreter/sealflow/cli/__init__.py:3:5: note: See https://mypy.readthedocs.io",
        "interpreter/__init__.py:7: error: Name \"x\" is not defined  [name-defined]",
        "Found 2 errors in 2 files (checked 111 source files)",
    ]
