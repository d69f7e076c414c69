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
def test(paths, actions, fmt, junit_path):
    """Run workflow test files: PATH is a *.test.yaml file or a folder searched for them (default:
    definitions/tests)."""
    from sealflow.cli.session import import_actions, load_action_metadata
    from sealflow.testing.workflows import discover, report, run_file

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
