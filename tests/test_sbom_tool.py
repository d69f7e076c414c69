"""tools/sbom.py: the CycloneDX SBOM that CI produces (.ci/run) and its template attaches (tools/ci/build.yml)."""

from __future__ import annotations

import importlib.metadata
import json
import sys

import yaml
from packaging.utils import canonicalize_name

from tools import sbom


def test_the_sbom_is_written_and_lists_every_runtime_dependency_as_installed(tmp_path, capsys):
    # Given this test's environment (sealflow installed with its dependencies)
    out = tmp_path / "sbom" / "sealflow.cdx.json"
    # When the tool writes its SBOM
    code = sbom.main(["--python", sys.executable, "--out", str(out)])
    # Then it says so, and the file is CycloneDX JSON with sealflow as its root component
    assert code == 0, capsys.readouterr().err
    assert f"sbom: wrote {out}" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["metadata"]["component"]["name"] == "sealflow"
    # and every runtime dependency of pyproject.toml is a component, at the version installed, with its purl
    needed = sbom.runtime_dependencies()
    assert {"pydantic", "dramatiq", "psycopg", "fastapi", "prometheus-client"} <= set(needed)
    components = {canonicalize_name(c["name"]): c for c in doc["components"]}
    for name in needed:
        assert components[name]["version"] == importlib.metadata.version(name), name
        assert components[name]["purl"].startswith(f"pkg:pypi/{name}@"), name


def test_an_sbom_lacking_a_runtime_dependency_is_refused():
    # Given an SBOM whose components lack pydantic, and one whose psycopg has no version
    doc = {"components": [{"name": "PyYAML", "version": "6.0", "purl": "pkg:pypi/pyyaml@6.0"},
                          {"name": "psycopg", "purl": "pkg:pypi/psycopg"}]}
    # When checked against the runtime dependencies, Then both are named
    assert sbom.missing(doc, ["pydantic", "psycopg", "pyyaml"]) == ["pydantic", "psycopg"]


def test_ci_writes_the_sbom_where_the_ci_template_attaches_it():
    # Given .ci/run and the CI template of this repository
    ci_run = (sbom.ROOT / ".ci" / "run").read_text()
    template = yaml.safe_load((sbom.ROOT / "tools" / "ci" / "build.yml").read_text())
    # Then .ci/run writes the SBOM (at the default path) before the tests, and the template uploads that path
    assert ".venv/bin/python -m tools.sbom\n" in ci_run
    assert ci_run.index("-m tools.sbom") < ci_run.index("-m pytest")
    (upload,) = [s for s in template["jobs"]["ci"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert sbom.ROOT / upload["with"]["path"] == sbom.DEFAULT_OUT
