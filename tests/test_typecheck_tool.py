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


def test_the_checked_packages_come_from_the_mypy_configuration(tmp_path: Path) -> None:
    # Given a pyproject.toml that lists the packages to check
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.mypy]\npackages = ["sealflow.dsl", "sealflow.cli"]\n', encoding="utf-8")
    # When the targets are read
    targets = typecheck.mypy_targets(pyproject)
    # Then they are exactly the listed packages
    assert targets == ["sealflow.dsl", "sealflow.cli"]


def test_without_a_list_the_whole_package_is_checked(tmp_path: Path) -> None:
    # Given a pyproject.toml whose mypy section lists no packages
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.mypy]\nstrict = true\n", encoding="utf-8")
    # When the targets are read
    # Then the installed package as a whole is checked
    assert typecheck.mypy_targets(pyproject) == ["sealflow"]


def test_a_listed_package_not_created_yet_is_set_apart(tmp_path: Path) -> None:
    # Given the repository's tree and a target list naming one package that does not exist
    typecheck.build_tree(tmp_path, typecheck.package_dirs())
    # When the targets are looked up in the tree
    found, missing = typecheck.present(tmp_path, ["sealflow.dsl", "sealflow.no_such_layer", "sealflow.cli"])
    # Then the existing ones are checked and the missing one is reported, not passed to mypy
    assert found == ["sealflow.dsl", "sealflow.cli"]
    assert missing == ["sealflow.no_such_layer"]


def test_the_repository_checks_the_language_the_core_and_the_cli() -> None:
    # Given the repository's configuration
    # When the targets are read
    targets = typecheck.mypy_targets()
    # Then the scope is the language, the interpreter's pure core and the CLI
    assert targets == ["sealflow.dsl", "sealflow.interpreter.core", "sealflow.cli"]
