"""`graph`: every kind of node drawn as itself, terminal steps reach the end, gates appear on the path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sealflow.cli import main
from sealflow.dsl.api import check_file, compile_file
from sealflow.dsl.graph import to_dot, to_mermaid

ROOT = Path(__file__).resolve().parents[2]
LEAD = ROOT / "definitions" / "lead-qualification.v1.yaml"

SHAPES = """\
sealflow: 1
name: shapes
version: 1
owner: team:test
steps:
  - id: pause
    wait: {for: 1s}
  - id: gate
    approval: {approvers: [role:ops], timeout: 1h}
  - id: work
    action: t.work
    on_error: [{errors: [timeout], next: broken}]
  - id: done
    succeed: {}
  - id: broken
    fail: {error: unavailable, message: "gave up"}
"""


def _plan(tmp_path: Path, text: str = SHAPES):
    path = tmp_path / "shapes.v1.yaml"
    path.write_text(text)
    result = check_file(str(path))
    assert result.plan is not None, [d.format() for d in result.diagnostics]
    return result.plan


def test_given_each_step_kind_when_drawn_then_it_has_its_own_shape_and_terminals_reach_the_end(tmp_path):
    # Given a definition with a wait, an approval, an error route, a succeed and a fail step
    dot = to_dot(_plan(tmp_path))
    # Then the approval is a hexagon, the wait rounded, the error route dashed, and both terminal steps
    # have an edge to the end node (a failure dashed)
    assert '"gate" [shape=hexagon' in dot
    assert '"pause" [shape=box, style=rounded' in dot
    assert '"work" -> "broken" [label="timeout", style=dashed]' in dot
    assert '"done" -> "end" [label="succeeded"]' in dot
    assert '"broken" -> "end" [label="failed", style=dashed]' in dot


def test_given_requires_approval_if_when_drawn_then_the_gate_is_a_node_on_the_way_to_the_next_step():
    plan = compile_file(str(LEAD))
    mermaid = to_mermaid(plan)
    assert 'record__gate{{"approval gate' in mermaid
    assert "record -->|approval needed| record__gate" in mermaid
    assert "record__gate -->|approved| follow_up" in mermaid


def test_given_no_graphviz_when_svg_is_asked_then_a_usage_error_says_how_to_get_it(capsys, monkeypatch):
    # Given a PATH without Graphviz's dot
    monkeypatch.setenv("PATH", "/nonexistent")
    code = main(["graph", "--format", "svg", str(LEAD)])
    err = capsys.readouterr().err
    assert code == 2 and "Graphviz" in err and "--format dot" in err


def test_given_graphviz_when_svg_is_asked_then_an_svg_document(capsys, tmp_path):
    # Graphviz is optional: with it, an SVG; without it, the clear refusal (checked above) and exit 2
    out = tmp_path / "lead.svg"
    code = main(["graph", "--format", "svg", "--out", str(out), str(LEAD)])
    if shutil.which("dot", path=os.environ.get("PATH")):
        assert code == 0 and out.read_text().lstrip().startswith(("<?xml", "<svg"))
    else:
        assert code == 2 and not out.exists()


def test_given_png_without_out_when_drawn_then_usage_error(capsys):
    assert main(["graph", "--format", "png", str(LEAD)]) == 2
