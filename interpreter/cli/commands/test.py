"""`sealflow test`: run workflow test files (docs/testing.md).

Each case runs the definition on the real engine, on a fresh embedded store, in virtual time, with the actions
and models answering what the case says; no service, no key, no real model. Exit 0 when every case passes, 1
when one fails, 2 for a usage error or a test file (or its definition) that cannot be used.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import actions_option

if TYPE_CHECKING:
    from sealflow.dsl.model import ActionInfo
    from sealflow.dsl.plan import Plan
    from sealflow.testing.workflows import FileResult
    from sealflow.testing.workflows.coverage import Coverage
    from sealflow.testing.workflows.runner import CaseResult


@click.command("test")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@actions_option
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text", show_default=True,
              help="How to print the verdicts (github: an annotation on each failing expectation's line).")
@click.option("--junit", "junit_path", metavar="FILE", help="Also write JUnit XML to FILE (for CI).")
@click.option("--matrix", "matrix", is_flag=True,
              help="PATH names definitions: run the failures every step must survive, derived from each definition "
                   "(docs/testing.md, \"The matrix\"), and print a table, step by scenario.")
@click.option("--coverage", "show_coverage", is_flag=True,
              help="Also print, per definition, the steps, switch branches, error routes and compensations no case "
                   "reached.")
def test(paths: tuple[str, ...], actions: tuple[str, ...], fmt: str, junit_path: str | None, matrix: bool,
         show_coverage: bool) -> None:
    """Run workflow test files: PATH is a *.test.yaml file or a folder searched for them (default:
    definitions/tests). With --matrix, PATH names definitions instead."""
    from sealflow.cli.session import import_actions, load_action_metadata
    from sealflow.testing.workflows import discover, report, run_file

    if matrix:
        import_actions(actions, demo=True)
        sys.exit(_matrix(paths, load_action_metadata(actions), fmt))

    chosen = [Path(p) for p in paths] or [Path("definitions") / "tests"]
    missing = [str(p) for p in chosen if not p.exists()]
    if missing:
        fail_usage(f"no such test file or folder: {', '.join(missing)} (test files are *.test.yaml, "
                   f"by default under definitions/tests/)")
    files = discover(chosen)
    if not files:
        fail_usage(f"no *.test.yaml file under {', '.join(str(p) for p in chosen)}")
    import_actions(actions, demo=True)
    meta = load_action_metadata(actions)
    results = [run_file(f, actions=meta, world=demo_world) for f in files]
    covered = _coverage(results) if show_coverage else []
    if fmt == "json":
        data = report.as_json(results)
        if show_coverage:
            data["coverage"] = [{"definition": c.definition, **{name: {"total": p.total, "not_reached": p.missing}
                                                                 for name, p in c.parts.items()}} for c in covered]
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(_github(results) if fmt == "github" else report.text(results))
        if covered:
            from sealflow.testing.workflows.coverage import render

            click.echo("\n".join(render(c) for c in covered))
    if junit_path:
        try:
            Path(junit_path).write_bytes(report.junit(results))
        except OSError as exc:
            fail_usage(f"cannot write {junit_path}: {exc.strerror or exc}")
    if any(f.errors for f in results):
        sys.exit(2)
    sys.exit(0 if all(f.passed for f in results) else 1)


def _github(results: list[FileResult]) -> str:
    """GitHub annotations: each difference on the line of the test file that states it, then the summary."""
    from sealflow.cli.diagnostics import github_escape
    from sealflow.testing.workflows.report import text

    lines: list[str] = []
    for f in results:
        for d in f.errors:
            lines.append(f"::error file={github_escape(d.location.path, prop=True)},line={d.location.line},"
                         f"col={d.location.column},title={d.code}::{github_escape(d.message)}")
        for c in f.cases:
            for where, what in c.problems:
                title = github_escape(f"sealflow test: {c.name}", prop=True)
                lines.append(f"::error file={github_escape(where.path, prop=True)},line={where.line},"
                             f"col={where.column},title={title}::{github_escape(what)}")
    return "\n".join([*lines, text(results).splitlines()[-1]])


def _coverage(results: list[FileResult]) -> list[Coverage]:
    """Coverage per definition, over every test file that tests it."""
    from sealflow.testing.workflows.coverage import coverage

    by_definition: dict[Path | None, tuple[Plan, list[CaseResult]]] = {}
    for f in results:
        if f.plan is not None:
            by_definition.setdefault(f.definition, (f.plan, []))[1].extend(f.cases)
    return [coverage(plan, cases) for plan, cases in by_definition.values()]


def _matrix(paths: tuple[str, ...], meta: dict[str, ActionInfo] | None, fmt: str) -> int:
    from sealflow.cli.definition_files import expand_paths
    from sealflow.dsl.api import compile_file
    from sealflow.dsl.errors import DefinitionError
    from sealflow.testing.workflows import matrix as derived
    from sealflow.testing.workflows.spec import cases_for

    if not paths:
        fail_usage("--matrix needs the definitions to test: sealflow test --matrix definitions/x.v1.yaml")
    tables = []
    for path in expand_paths(paths):
        try:
            plan = compile_file(path, actions=meta)
        except DefinitionError as exc:
            for d in exc.diagnostics:
                click.echo(d.format(), err=True)
            return 2
        tables.append(derived.derive(plan, cases_for(path), world=demo_world))
    if fmt == "json":
        click.echo(json.dumps([{"definition": m.definition, "ok": m.ok, "problems": m.problems(),
                                "rows": {step: {s: {"outcome": c.outcome, "ok": c.ok} for s, c in row.items()}
                                         for step, row in m.rows.items()}} for m in tables], indent=2))
    else:
        click.echo("\n\n".join(derived.render(m) for m in tables))
    return 0 if all(m.ok for m in tables) else 1


class DemoWorld:
    """A fresh demo world for each case (its CRM, outbox, documents...), in the case's folder; ``mcp``: the
    demo's MCP servers (the carrier) with the project's (sealflow.yaml's ``mcp:``) over them."""

    @contextlib.contextmanager
    def __call__(self, folder: Path) -> Iterator[None]:
        from sealflow.demo import store as demo_store

        demo_store.configure(folder / "demo.db")
        try:
            yield
        finally:
            demo_store.configure(None)

    @property
    def mcp(self) -> dict[str, Any]:
        from sealflow.cli.session import load_config, with_demo_mcp

        servers: dict[str, Any] = with_demo_mcp(load_config()).extra.get("mcp") or {}
        return servers


demo_world = DemoWorld()


def register(group: click.Group) -> None:
    group.add_command(test)
