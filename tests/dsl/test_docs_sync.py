"""docs/language.md stays in step with the schema and the code registry."""

from __future__ import annotations

import re

import pytest

from sealflow import schemas
from sealflow.dsl.codes import CODES
from tools import gen_docs


def _property_names(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
            if key not in ("examples", "default", "const", "enum"):
                yield from _property_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _property_names(value)


@pytest.fixture(scope="module")
def doc() -> str:
    return gen_docs.DOC.read_text(encoding="utf-8")


def test_generated_reference_is_up_to_date():
    # Given the schema and dsl/codes.py, When the reference is regenerated, Then nothing changes.
    assert gen_docs.is_fresh(), "docs/language.md is stale: run `python -m tools.gen_docs`"
    assert gen_docs.main(["--check"]) == 0


def test_check_reports_a_stale_document(tmp_path, capsys):
    stale = tmp_path / "language.md"
    stale.write_text(f"intro\n{gen_docs.BEGIN}\nold\n{gen_docs.END}\n", encoding="utf-8")
    assert gen_docs.main(["--check", "--path", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert gen_docs.main(["--path", str(stale)]) == 0
    assert gen_docs.main(["--check", "--path", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8").startswith("intro\n")


def test_update_requires_the_markers():
    with pytest.raises(ValueError):
        gen_docs.update("no markers here")


def test_every_schema_property_appears_in_the_docs(doc):
    missing = sorted({name for name in _property_names(schemas.load()) if f"`{name}`" not in doc
                      and not re.search(rf"`[^`\s]*\.{re.escape(name)}`", doc)})
    assert not missing


def test_every_field_path_has_a_reference_row(doc):
    rows = gen_docs.field_rows()
    assert len(rows) > 100
    for path, *_ in rows:
        assert f"| `{path}` |" in doc


def test_every_diagnostic_code_is_listed(doc):
    for code in CODES:
        assert f"| `{code}` |" in doc


def test_editor_support_section(doc):
    assert "redhat.vscode-yaml" in doc
    assert '"./schemas/workflow.schema.json": "definitions/*.yaml"' in doc
    assert "# yaml-language-server: $schema=../schemas/workflow.schema.json" in doc
