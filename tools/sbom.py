"""The CycloneDX SBOM of an installed Sealflow: every distribution of a Python environment, sealflow the root.

    python -m tools.sbom                  # this interpreter's environment -> build/sbom/sealflow.cdx.json
    python -m tools.sbom --python /opt/sealflow/bin/python --out sbom.json

It runs ``cyclonedx-py environment`` (the ``cyclonedx-bom`` package, the dev extra) with the root component read
from pyproject.toml, reproducibly (no random serial number; the timestamp is ``$SOURCE_DATE_EPOCH`` when set),
then checks what it wrote: a CycloneDX JSON document whose components name every runtime dependency of
pyproject.toml (``[project] dependencies``) with its installed version and package URL. Exit 0 with one line
saying what it wrote; 1 naming what is missing. ``.ci/run`` calls it after installing; the CI template
``tools/ci/build.yml`` attaches the file as an artifact.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "sbom" / "sealflow.cdx.json"


def runtime_dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The canonical names of ``[project] dependencies`` (no extras: what sealflow needs to run)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return sorted({canonicalize_name(Requirement(r).name) for r in project["dependencies"]})


def missing(sbom: dict[str, Any], needed: list[str]) -> list[str]:
    """What of ``needed`` the SBOM's components lack, or list without a version or a package URL."""
    found = {canonicalize_name(c["name"]): c for c in sbom.get("components", ())}
    return [name for name in needed
            if name not in found or not found[name].get("version") or not found[name].get("purl")]


def generate(python: str, out: Path, pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Any]:
    """Write the SBOM of ``python``'s environment to ``out``; return it parsed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "cyclonedx_py", "environment", "--pyproject", str(pyproject),
                    "--mc-type", "application", "--output-reproducible", "--output-format", "JSON",
                    "--output-file", str(out), python], check=True)
    sbom: dict[str, Any] = json.loads(out.read_text())
    return sbom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sbom", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter (or virtual environment) whose installed distributions to list")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write it (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        sbom = generate(args.python, args.out)
    except subprocess.CalledProcessError as exc:
        print(f"sbom: cyclonedx-py failed (exit {exc.returncode}); is cyclonedx-bom installed (the dev extra)?",
              file=sys.stderr)
        return 1
    root = sbom.get("metadata", {}).get("component", {})
    lacking = missing(sbom, runtime_dependencies())
    if root.get("name") != "sealflow" or lacking:
        print(f"sbom: {args.out}: root component {root.get('name')!r}; runtime dependencies missing (or without a "
              f"version and package URL): {', '.join(lacking) or 'none'}", file=sys.stderr)
        return 1
    print(f"sbom: wrote {args.out}: CycloneDX {sbom['specVersion']}, sealflow {root.get('version')}, "
          f"{len(sbom['components'])} components")
    return 0


if __name__ == "__main__":
    sys.exit(main())
