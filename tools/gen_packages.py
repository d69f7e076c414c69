"""Write ``[tool.setuptools] packages`` in pyproject.toml from the folders: the list is discovered, not kept.

setuptools maps the repository's folders to one import name through ``package-dir`` (``sealflow`` =
``interpreter/``, ``sealflow.dsl`` = ``dsl/``, ``sealflow.schemas`` = ``schemas/``) and cannot discover
packages under a renamed root by itself, so this generator walks each mapped folder for ``__init__.py``
files and writes the dotted names between the markers in pyproject.toml.

    python -m tools.gen_packages            # rewrite the list
    python -m tools.gen_packages --check    # exit 1 when it is stale (.ci/run runs it)
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
_LIST = re.compile(r"(?ms)^(# BEGIN GENERATED PACKAGES[^\n]*\npackages = \[\n)(.*?)(^\]\n# END GENERATED PACKAGES)")


def package_dirs(pyproject: Path = PYPROJECT) -> dict[str, Path]:
    """The installed name -> repository folder mapping of ``[tool.setuptools.package-dir]``."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: (pyproject.parent / folder).resolve() for name, folder in mapping.items()}


def discover(mapping: dict[str, Path]) -> list[str]:
    """Every package under the mapped folders, by its installed name; a folder mapped elsewhere is its own root."""
    roots = set(mapping.values())
    found: set[str] = set()
    for name, folder in mapping.items():
        if not (folder / "__init__.py").exists():
            continue
        found.add(name)
        for init in folder.rglob("__init__.py"):
            sub = init.parent
            if sub == folder or any(r != folder and r.is_relative_to(folder) and sub.is_relative_to(r) for r in roots):
                continue
            found.add(".".join([name, *sub.relative_to(folder).parts]))
    return sorted(found)


def render(text: str, packages: list[str]) -> str:
    if not _LIST.search(text):
        raise SystemExit(f"{PYPROJECT}: the markers '# BEGIN GENERATED PACKAGES' / '# END GENERATED PACKAGES' "
                         "around `packages = [...]` are missing")
    body = "".join(f'  "{name}",\n' for name in packages)
    return _LIST.sub(lambda m: m.group(1) + body + m.group(3), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gen_packages", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the list is stale; change nothing")
    args = parser.parse_args(argv)
    text = PYPROJECT.read_text(encoding="utf-8")
    new = render(text, discover(package_dirs()))
    if args.check:
        if new != text:
            print("pyproject.toml: [tool.setuptools] packages is stale; run: python -m tools.gen_packages",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        PYPROJECT.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
