"""Language commands: validate, lint, plan, graph. None of them imports the runtime."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from sealflow.cli.definition_files import compile_or_exit, expand_paths
from sealflow.cli.diagnostics import emit_diagnostics
from sealflow.cli.exits import fail_usage
from sealflow.cli.options import actions_option
from sealflow.cli.session import load_action_metadata, project_actions, project_facts

FORMATS = click.Choice(["text", "json", "github"])

if TYPE_CHECKING:
    from sealflow.dsl.api import CheckResult
    from sealflow.dsl.plan import PlanStep


def _check_paths(paths: tuple[str, ...], actions: tuple[str, ...], lint: bool) -> list[CheckResult]:
    from sealflow.dsl.api import check_file

    metadata = load_action_metadata(actions)
    facts = project_facts(secrets=not lint)
    return [check_file(p, actions=metadata, lint=lint, facts=facts) for p in expand_paths(paths)]


def _report(results: list[CheckResult], fmt: str, strict_warnings: bool) -> int:
    emit_diagnostics(results, fmt)
    errors = sum(len(r.errors) for r in results)
    warnings = sum(len(r.warnings) for r in results)
    return 1 if errors or (strict_warnings and warnings) else 0


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@actions_option
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
def validate(paths: tuple[str, ...], actions: tuple[str, ...], fmt: str) -> None:
    """Validate definitions (files or folders): YAML, schema, expressions, compile checks.

    Exit 0 when every file is valid, 1 when any has an error, 2 on a usage error.
    """
    results = _check_paths(paths, actions, lint=False)
    code = _report(results, fmt, strict_warnings=False)
    if not project_actions(actions) and fmt == "text" and any(_calls_actions(r) for r in results):
        click.echo("note: action names and their permissions were not checked against your actions; pass "
                   "--actions MODULE (repeatable: a module or a .py file) to check them", err=True)
    sys.exit(code)


def _calls_actions(result: CheckResult) -> bool:
    """Whether a checked definition names any action (what --actions would have checked)."""
    plan = result.plan
    return plan is not None and any(s.action for _, s in plan.all_steps())


@click.command()
@click.argument("paths", nargs=-1, metavar="PATH...")
@actions_option
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
@click.option("--explain", metavar="CODE", help="Print the rationale of a lint rule and exit.")
def lint(paths: tuple[str, ...], actions: tuple[str, ...], fmt: str, explain: str | None) -> None:
    """Validate, then apply the safety lint rules (L5xx).

    Exit 0 when clean (info notes allowed), 1 on any error or warning, 2 on a usage error.
    """
    if explain:
        from sealflow.dsl.lint import RULES

        rule = RULES.get(explain.upper())
        if rule is None:
            fail_usage(f"unknown lint rule {explain!r}; rules: {', '.join(RULES)}")
        click.echo(f"{rule.code}: {rule.title}\n\n{rule.rationale}")
        return
    if not paths:
        fail_usage("give at least one PATH (a definition file or a folder)")
    sys.exit(_report(_check_paths(paths, actions, lint=True), fmt, strict_warnings=True))


@click.command()
@click.argument("file", metavar="FILE")
@actions_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole plan as JSON (digest first).")
def plan(file: str, actions: tuple[str, ...], as_json: bool) -> None:
    """Compile a definition and print its plan (and digest)."""
    compiled = compile_or_exit(file, actions)
    if as_json:
        click.echo(compiled.to_json())
        return
    from sealflow.dsl.durations import format_ms

    click.echo(f"{compiled.name} v{compiled.version}  {compiled.digest}")
    click.echo(f"owner: {compiled.owner}   priority: {compiled.priority}")
    click.echo(f"permissions: {', '.join(compiled.permissions) or '-'}")
    b = compiled.budget
    budget = [f"{k}={v}" for k, v in (("max_steps", b.max_steps), ("max_tokens", b.max_tokens),
                                     ("max_cost_usd", b.max_cost_usd), ("max_tool_calls", b.max_tool_calls)) if v]
    if b.max_runtime_ms:
        budget.append(f"max_runtime={format_ms(b.max_runtime_ms)}")
    click.echo(f"budget: {', '.join(budget) or 'none'}")
    click.echo("steps:")
    _print_steps(compiled.steps, "  ")


def _print_steps(steps: Sequence[PlanStep], indent: str) -> None:
    """One line per step and one for its edges; a fan-out step's sub-flows indented below it."""
    from sealflow.dsl.durations import format_ms
    from sealflow.dsl.kinds import traits_of

    for s in steps:
        what = s.action or s.kind
        extra = [] if traits_of(s.kind).fans_out else [f"timeout {format_ms(s.timeout_ms)}"]
        if s.map is not None:
            tolerated = f"{s.map.tolerate_percent}%" if s.map.tolerate_percent is not None \
                else str(s.map.tolerate_failures)
            extra.append(f"over {s.map.items}: {s.map.concurrency} at once, max_items {s.map.max_items}, "
                         f"tolerate_failures {tolerated}")
        if s.retry.max_attempts > 1:
            extra.append(f"retry {s.retry.name or 'inline'} x{s.retry.max_attempts}")
        if s.idempotency_key:
            extra.append("idempotent")
        if s.gate or s.approval:
            extra.append("approval")
        targets = ", ".join(f"{e.kind}->{e.target}" for e in s.edges) or "ends the run"
        click.echo(f"{indent}{s.index + 1:>2}. {s.id:<20} {what:<22} {'; '.join(extra)}")
        click.echo(f"{indent}    {targets}")
        for j, (_, sub, _) in enumerate(s.subflows()):
            click.echo(f"{indent}    {'each item' if s.map else f'branch {j + 1}'}:")
            _print_steps(sub, indent + "      ")


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot", "svg", "png"]), default="mermaid",
              show_default=True, help="svg and png are drawn by Graphviz's `dot`, which must be installed.")
@click.option("--out", "out", metavar="FILE", help="Write the drawing to FILE (required for png).")
def graph(file: str, fmt: str, out: str | None) -> None:
    """Draw a definition's control flow: steps, switches, approval gates (also those of
    requires_approval_if), waits, error routes (dashed) and the end of the run."""
    from sealflow.dsl import graph as g

    compiled = compile_or_exit(file, ())
    if fmt == "mermaid":
        _write(g.to_mermaid(compiled).encode(), out)
        return
    dot = g.to_dot(compiled)
    if fmt == "dot":
        _write(dot.encode(), out)
        return
    if fmt == "png" and out is None:
        fail_usage("--format png needs --out FILE (a PNG is not printed to a terminal)")
    _write(_render(dot, fmt), out)


def _render(dot: str, fmt: str) -> bytes:
    """``dot`` drawn as ``fmt`` by Graphviz; a clear usage error when Graphviz is absent or fails."""
    import shutil
    import subprocess

    exe = shutil.which("dot")
    if exe is None:
        fail_usage(f"--format {fmt} needs Graphviz's `dot` on PATH, which is not installed; install the "
                   "graphviz package (apt-get install graphviz, brew install graphviz), or use --format dot or "
                   "--format mermaid")
    try:
        proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail_usage(f"Graphviz could not draw the graph: {exc}")
    if proc.returncode != 0:
        fail_usage(f"Graphviz could not draw the graph: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _write(data: bytes, out: str | None) -> None:
    if out is None:
        click.echo(data.decode(), nl=False)
        return
    try:
        with open(out, "wb") as f:
            f.write(data)
    except OSError as exc:
        fail_usage(f"--out {out}: {exc.strerror or exc}")


def register(group: click.Group) -> None:
    for command in (validate, lint, plan, graph):
        group.add_command(command)

