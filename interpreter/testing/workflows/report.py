"""What ``sealflow test`` prints: text for a person, JSON for a program, JUnit XML for CI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from sealflow.testing.workflows import FileResult


def _shown(path: Path) -> str:
    try:
        shown = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if shown.startswith("..") else shown


def text(results: list[FileResult]) -> str:
    lines: list[str] = []
    for f in results:
        for d in f.errors:
            lines.append(d.format())
        for c in f.cases:
            mark = "PASS" if c.passed else "FAIL"
            lines.append(f"{mark} {_shown(f.path)}::{c.name} ({c.state or 'not started'})")
            lines += [f"  {failure}" for failure in c.failures]
    cases = [c for f in results for c in f.cases]
    failed = sum(not c.passed for c in cases)
    broken = sum(bool(f.errors) for f in results)
    summary = f"{len(cases) - failed} passed, {failed} failed"
    if broken:
        summary += f", {broken} file{'s' * (broken != 1)} with errors"
    lines.append(summary)
    return "\n".join(lines)


def as_json(results: list[FileResult]) -> dict[str, Any]:
    return {"passed": all(f.passed for f in results), "files": [
        {"path": _shown(f.path), "definition": _shown(f.definition) if f.definition else None,
         "errors": [d.as_dict() for d in f.errors],
         "cases": [{"name": c.name, "passed": c.passed, "state": c.state, "run_id": c.run_id,
                    "line": c.location.line, "failures": c.failures, "steps": c.steps,
                    "virtual_seconds": c.virtual_seconds} for c in f.cases]}
        for f in results]}


def junit(results: list[FileResult]) -> bytes:
    """JUnit XML: one ``testsuite`` per file, one ``testcase`` per case; a file error is an ``error`` case."""
    suites = ET.Element("testsuites", name="sealflow test")
    for f in results:
        cases = f.cases
        suite = ET.SubElement(suites, "testsuite", name=_shown(f.path), tests=str(len(cases) or 1),
                              failures=str(sum(not c.passed for c in cases)), errors=str(int(bool(f.errors))))
        if f.errors:
            case = ET.SubElement(suite, "testcase", name="(file)", classname=_shown(f.path))
            ET.SubElement(case, "error", message=f.errors[0].message).text = "\n".join(d.format() for d in f.errors)
        for c in cases:
            case = ET.SubElement(suite, "testcase", name=c.name, classname=_shown(f.path),
                                 file=c.location.path, line=str(c.location.line))
            if not c.passed:
                ET.SubElement(case, "failure", message=c.failures[0]).text = "\n".join(c.failures)
    data: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return data

