"""tools/typecheck.py hands mypy every module of ``sealflow`` under its installed name, from the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools import typecheck


def test_every_module_has_its_installed_name_and_the_repositorys_path() -> None:
    # Given the repository's package-dir mapping
    mapping = typecheck.package_dirs()
    # When the modules are listed
    found = typecheck.modules(mapping)
    # Then the installed names lead to the repository's own files, with no copy or link between
    assert found["sealflow"] == typecheck.REPO / "interpreter" / "__init__.py"
    assert found["sealflow.dsl"] == typecheck.REPO / "dsl" / "__init__.py"
    assert found["sealflow.dsl.expressions.parser"] == typecheck.REPO / "dsl" / "expressions" / "parser.py"
    assert found["sealflow.engine.engine"] == typecheck.REPO / "interpreter" / "engine" / "engine.py"
    # and nothing is named by its folder instead of its installed name, nor twice
    assert not [name for name in found if name.startswith(("interpreter", "dsl.", "sealflow.interpreter"))]
    assert len(set(found.values())) == len(found)
    assert not [path for path in found.values() if "__pycache__" in path.parts]


def test_a_folder_mapped_to_a_name_of_its_own_is_not_also_its_parents(tmp_path: Path) -> None:
    # Given a root folder that holds a folder mapped elsewhere
    (tmp_path / "root" / "inner").mkdir(parents=True)
    (tmp_path / "root" / "__init__.py").write_text("")
    (tmp_path / "root" / "inner" / "__init__.py").write_text("")
    (tmp_path / "root" / "inner" / "x.py").write_text("")
    # When its modules are listed
    found = typecheck.modules({"pkg": tmp_path / "root", "pkg.other": tmp_path / "root" / "inner"})
    # Then the inner folder is only the name it is mapped to
    assert sorted(found) == ["pkg", "pkg.other", "pkg.other.x"]


def test_an_error_in_a_checked_package_fails_with_the_repositorys_path(tmp_path: Path) -> None:
    # Given a copy of the tool and the configuration over a tiny tree with one type error in `sealflow.dsl`
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "typecheck.py").write_text(Path(typecheck.__file__).read_text())
    (repo / "interpreter").mkdir()
    (repo / "interpreter" / "__init__.py").write_text("from sealflow.dsl.bad import f\n")
    (repo / "dsl").mkdir()
    (repo / "dsl" / "__init__.py").write_text("")
    (repo / "dsl" / "bad.py").write_text("def f(x: int) -> str:\n    return x\n")
    (repo / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"sealflow" = "interpreter"\n"sealflow.dsl" = "dsl"\n[tool.mypy]\n')
    # When the tool runs
    done = subprocess.run([sys.executable, str(repo / "tools" / "typecheck.py")], capture_output=True, text=True,
                          check=False, timeout=300)
    # Then it fails, naming the file as the repository has it, and the import between the mapped folders resolved
    assert done.returncode == 1, done.stdout + done.stderr
    assert "dsl/bad.py:2: error: Incompatible return value type" in done.stdout
    assert "import-not-found" not in done.stdout


def test_the_not_yet_checked_packages_are_named_in_the_configuration() -> None:
    # Given the repository's mypy configuration
    import tomllib

    config = tomllib.loads((typecheck.REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    # When the packages whose errors are not reported are read
    ignored = [name for o in config.get("overrides", []) if o.get("ignore_errors") for name in o["module"]]
    # Then the language and the core are never among them (they are strict)
    assert not [name for name in ignored if name.startswith(("sealflow.dsl", "sealflow.core"))]
