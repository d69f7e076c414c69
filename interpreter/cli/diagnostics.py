"""How the command line prints a definition's diagnostics: text, JSON for machines, GitHub annotations for CI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sealflow.dsl.api import CheckResult


def github_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def emit_diagnostics(results: Sequence[CheckResult], fmt: str) -> None:
    if fmt == "json":
        files = []
        for r in results:
            files.append({
                "path": r.path,
                "ok": r.ok,
                "name": r.plan.name if r.plan else None,
                "version": r.plan.version if r.plan else None,
                "digest": r.plan.digest if r.plan else None,
                "diagnostics": [d.as_dict() for d in r.diagnostics],
            })
        summary = {
            "ok": all(r.ok for r in results),
            "errors": sum(len(r.errors) for r in results),
            "warnings": sum(len(r.warnings) for r in results),
            "files": files,
        }
        click.echo(json.dumps(summary, indent=2))
        return
    if fmt == "github":
        level = {"error": "error", "warning": "warning", "info": "notice"}
        for r in results:
            for d in r.diagnostics:
                msg = d.message + (f"\nhint: {d.hint}" if d.hint else "")
                click.echo(
                    f"::{level[d.severity]} file={github_escape(d.location.path, prop=True)},"
                    f"line={d.location.line},col={d.location.column},title={d.code}::{github_escape(msg)}"
                )
        _summary(results)
        return
    for r in results:
        for d in r.diagnostics:
            click.echo(d.format())
        if r.ok and r.plan is not None:
            click.echo(f"ok: {r.path} ({r.plan.name} v{r.plan.version}, {r.plan.digest})")
    _summary(results)


def _summary(results: Sequence[CheckResult]) -> None:
    errors = sum(len(r.errors) for r in results)
    warnings = sum(len(r.warnings) for r in results)
    bad = sum(1 for r in results if not r.ok)
    files = "file" if len(results) == 1 else "files"
    click.echo(f"{len(results)} {files} checked: {bad} invalid, {errors} errors, {warnings} warnings", err=True)
