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

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import actions_option


@click.command("test")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@actions_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="How to print the verdicts.")
@click.option("--junit", "junit_path", metavar="FILE", help="Also write JUnit XML to FILE (for CI).")
@click.option("--matrix", "matrix", is_flag=True,
              help="PATH names definitions: run the failures every step must survive, derived from each definition "
                   "(docs/testing.md, \"The matrix\"), and print a table, step by scenario.")
def test(paths, actions, fmt, junit_path, matrix):
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
    if fmt == "json":
        click.echo(json.dumps(report.as_json(results), indent=2))
    else:
        click.echo(report.text(results))
    if junit_path:
        try:
            Path(junit_path).write_bytes(report.junit(results))
        except OSError as exc:
            fail_usage(f"cannot write {junit_path}: {exc.strerror or exc}")
    if any(f.errors for f in results):
        sys.exit(2)
    sys.exit(0 if all(f.passed for f in results) else 1)


def _matrix(paths: tuple[str, ...], meta, fmt: str) -> int:
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


@contextlib.contextmanager
def demo_world(folder: Path) -> Iterator[None]:
    """A fresh demo world for each case (its CRM, outbox, documents...), in the case's folder."""
    from sealflow.demo import store as demo_store

    demo_store.configure(folder / "demo.db")
    try:
        yield
    finally:
        demo_store.configure(None)


def register(group: click.Group) -> None:
    group.add_command(test)
