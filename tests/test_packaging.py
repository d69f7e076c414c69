"""The wheel installs one import name, ``sealflow``, with everything it needs and nothing else.

setuptools maps the repository's folders to ``sealflow.*`` through ``package-dir`` in pyproject.toml
(docs/architecture.md says why). These tests build the wheel from a copy of the working tree, read its
file list, install it into a fresh virtual environment and import the public face from outside the
repository, so that a new subpackage missing from ``packages``, a grammar or schema missing from the
package data, or a generator or benchmark shipped by mistake fails here and not on a user's machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]
# Not part of the source tree that setuptools reads: local state, caches, earlier builds.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".sealflow", ".hypothesis",
    ".pytest_cache", ".mypy_cache", ".ruff_cache",
)


def installed_name(folder: Path) -> str | None:
    """The dotted name a repository folder installs as, by the longest package-dir mapping that holds it."""
    best: tuple[int, str] | None = None
    for name, mapped in PACKAGE_DIR.items():
        root = (REPO / mapped).resolve()
        if folder == root or root in folder.parents:
            depth = len(root.parts)
            if best is None or depth > best[0]:
                rest = folder.relative_to(root).parts
                best = (depth, ".".join((name, *rest)))
    return None if best is None else best[1]


def package_folders() -> dict[str, Path]:
    """Every folder under the mapped roots that holds an ``__init__.py``, by its installed name."""
    found: dict[str, Path] = {}
    for mapped in PACKAGE_DIR.values():
        for init in sorted((REPO / mapped).rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            name = installed_name(init.parent.resolve())
            assert name is not None
            found.setdefault(name, init.parent)
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Build from a copy: setuptools builds in the source folder, and a stale build/lib would leak
    # modules that were moved away into the wheel.
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE, symlinks=True)
    out = work / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
    (built,) = out.glob("sealflow-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> list[PurePosixPath]:
    with zipfile.ZipFile(wheel) as zf:
        return [PurePosixPath(n) for n in zf.namelist() if not n.endswith("/")]


def test_every_package_folder_is_listed_in_pyproject_packages() -> None:
    # Given every folder under dsl/, interpreter/ and schemas/ that holds an __init__.py
    folders = package_folders()
    # When compared with [tool.setuptools] packages
    listed = set(SETUPTOOLS["packages"])
    missing = {name: str(path.relative_to(REPO)) for name, path in folders.items() if name not in listed}
    stale = sorted(listed - set(folders))
    # Then each is listed (the wheel would silently leave it out) and nothing listed is gone
    assert not missing, f"the list is stale (run: python -m tools.gen_packages); it lacks {missing}"
    assert not stale, f"the list is stale (run: python -m tools.gen_packages); gone: {stale}"


def test_the_wheel_has_one_top_level_import_name_sealflow(wheel_files: list[PurePosixPath]) -> None:
    # Given the built wheel's files
    # When grouped by their first path component, less the wheel's own metadata
    tops = {p.parts[0] for p in wheel_files if not p.parts[0].endswith((".dist-info", ".data"))}
    # Then the only import name is sealflow
    assert tops == {"sealflow"}


def test_the_wheel_ships_no_generator_benchmark_or_test(wheel_files: list[PurePosixPath]) -> None:
    # Given the built wheel's files
    # When looking for what only the repository needs
    unwanted = [
        str(p) for p in wheel_files
        if p.name.startswith("gen_") or {"benchmarks", "tools", "tests", "ci"} & set(p.parts[:-1])
    ]
    # Then there is none
    assert not unwanted, f"the wheel ships repository-only files: {unwanted}"


def test_the_wheel_ships_every_module_grammar_and_schema(wheel_files: list[PurePosixPath]) -> None:
    # Given every module, grammar and JSON schema under the mapped folders
    shipped = {str(p) for p in wheel_files}
    expected: dict[str, str] = {}
    for mapped in PACKAGE_DIR.values():
        for path in (REPO / mapped).rglob("*"):
            if path.suffix not in {".py", ".lark", ".json", ".html", ".css"} or "__pycache__" in path.parts:
                continue
            folder, inner = path.parent.resolve(), [path.name]
            if path.suffix in {".html", ".css"}:  # page templates and styles live in data folders of a package
                while installed_name(folder) not in SETUPTOOLS["packages"] and folder != REPO:
                    folder, inner = folder.parent, [folder.name, *inner]
            name = installed_name(folder)
            if name is None or name not in SETUPTOOLS["packages"]:
                continue  # a folder without __init__.py: the listing test above reports packages
            expected["/".join((*name.split("."), *inner))] = str(path.relative_to(REPO))
    # When compared with the wheel
    missing = sorted(f"{src} (as {dest})" for dest, src in expected.items() if dest not in shipped)
    # Then all of them are in it (a .lark or .json needs [tool.setuptools.package-data])
    assert any(dest.endswith(".lark") for dest in expected), "no grammar found under the mapped folders"
    assert "sealflow/schemas/workflow.schema.json" in expected
    assert "sealflow/server/ui/templates/approvals.html" in expected
    assert not missing, f"the wheel lacks: {missing}"


def test_the_installed_wheel_imports_from_outside_the_repository(wheel: Path, tmp_path: Path) -> None:
    # Given a fresh virtual environment with the wheel installed (no dependencies), which reuses this
    # environment's site-packages for the dependencies only (a plain path in a .pth: its editable
    # install of sealflow is not activated there)
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
         str(wheel)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"pip install of the wheel failed:\n{done.stdout}\n{done.stderr}"
    site = Path(subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(REPO / "definitions" / "lead-qualification.v1.yaml", outside / "flow.yaml")
    clean_env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}

    # When the public face and the CLI are imported, then every installed module (a module importing a
    # bare `dsl`, `interpreter` or `tools` name works in the repository only), and the CLI validates a
    # definition (the schema and the grammar are read from the installed package)
    probe = (
        "from sealflow import action, StepError, Context; import sealflow.cli, sealflow.dsl\n"
        "import importlib, pkgutil, sealflow\n"
        "for m in pkgutil.walk_packages(sealflow.__path__, 'sealflow.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        print(importlib.import_module(m.name).__file__)\n"
    )
    imported = subprocess.run([python, "-c", probe], cwd=outside, env=clean_env,
                              capture_output=True, text=True, timeout=60, check=False)
    validated = subprocess.run([python, "-m", "sealflow", "validate", "flow.yaml"], cwd=outside, env=clean_env,
                               capture_output=True, text=True, timeout=60, check=False)

    # Then both work, and the modules come from the installed wheel, not from the repository
    assert imported.returncode == 0, imported.stderr
    files = [Path(line) for line in imported.stdout.split()]
    outside_site = [str(f) for f in files if not f.is_relative_to(site)]
    assert not outside_site, f"not from the installed wheel in {site}: {outside_site}"
    rooms = {"dsl", "engine", "runtime", "server", "cli", "demo", "schemas"}
    assert {f.relative_to(site).parts[1] for f in files} >= rooms
    assert validated.returncode == 0, f"{validated.stdout}\n{validated.stderr}"
