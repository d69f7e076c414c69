"""`sealflow actions list|show` and `sealflow schema`: what the project's actions take and return.

An action describes itself from its Python declaration (:mod:`sealflow.execution.action_schema`):
its parameters, which are required and their types become its input schema; its return annotation (or
``@action(output_schema=...)``) its output schema. The compiler checks ``with:`` and ``steps.X.output`` against
them (docs/language.md, "Type checks"); ``sealflow schema`` puts them in the editor's JSON Schema.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import actions_option, json_flag
from sealflow.cli.session import project_actions

if TYPE_CHECKING:
    from sealflow.execution.actions import Action


def _registered(actions: tuple[str, ...]) -> dict[str, Action]:
    """The actions the project and ``--actions`` register, by name (a usage error if they cannot be imported)."""
    from sealflow.cli.actions_loader import ActionsLoadError, import_actions
    from sealflow.execution.actions import REGISTRY

    try:
        import_actions(project_actions(actions))
    except ActionsLoadError as exc:
        fail_usage(str(exc))
    return dict(REGISTRY.items())


def _described(act: Action) -> dict[str, Any]:
    from sealflow.cli.actions_loader import action_info

    out = act.describe()
    out["source"] = action_info(act).source
    return out


@click.group()
def actions() -> None:
    """The actions this project registers (actions: in sealflow.yaml, or --actions), with their schemas."""


@actions.command("list")
@actions_option
@json_flag("Print a JSON list, one object per action.")
def list_(actions: tuple[str, ...], as_json: bool) -> None:
    """Each action: name, effect, permissions, and its arguments (* required)."""
    found = _registered(actions)
    rows = [_described(a) for a in found.values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no actions registered: list them under actions: in sealflow.yaml, or pass --actions MODULE")
        return
    for row in rows:
        props = (row["input_schema"].get("properties") or {})
        required = set(row["input_schema"].get("required") or ())
        args = ", ".join(f"{n}{'*' if n in required else ''}: {_type(s)}" for n, s in props.items())
        click.echo(f"{row['name']:<28} {row['effect']:<12} ({args}) -> {_type(row['output_schema'])}")


@actions.command("show")
@click.argument("name")
@actions_option
@json_flag("Print one JSON object.")
def show(name: str, actions: tuple[str, ...], as_json: bool) -> None:
    """One action in full: description, effect, permissions, secrets, input and output schemas, source."""
    found = _registered(actions)
    act = found.get(name)
    if act is None:
        import difflib

        guess = difflib.get_close_matches(name, list(found), n=1)
        fail_usage(f"no action {name!r}" + (f"; did you mean {guess[0]!r}?" if guess else "")
                   + (f" (registered: {', '.join(found)})" if found else " (none registered)"))
    row = _described(act)
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    click.echo(f"{row['name']}  ({row['effect']}; defined at {row['source'] or 'unknown'})")
    if row["description"]:
        click.echo(f"  {row['description']}")
    click.echo(f"permissions: {', '.join(row['permissions']) or '-'}")
    click.echo(f"secrets: {', '.join(row['secrets']) or '-'}")
    if not row["honours_idempotency_key"]:
        click.echo("honours_idempotency_key: false (a lost attempt waits for a person: sealflow resolve)")
    click.echo("with:")
    props = row["input_schema"].get("properties") or {}
    required = set(row["input_schema"].get("required") or ())
    for n, s in props.items():
        doc = f"  {s['description']}" if s.get("description") else ""
        click.echo(f"  {n:<20} {_type(s):<28} {'required' if n in required else 'optional'}{doc}")
    if not props:
        click.echo("  (no arguments)")
    click.echo(f"output: {_type(row['output_schema'])}")
    if row["output_schema"]:
        click.echo(json.dumps(row["output_schema"], indent=2))


def _type(schema: dict[str, Any] | None) -> str:
    from sealflow.dsl.jsontypes import from_schema

    return from_schema(schema).describe() if schema else "any value"


@click.command("schema")
@actions_option
@click.option("--out", "out", metavar="FILE", help="Write the schema to FILE (default: print it).")
def schema(actions: tuple[str, ...], out: str | None) -> None:
    """Print the workflow JSON Schema extended with the project's actions (names, with: arguments), for editors.

    In VS Code (the YAML extension), map it to your definitions: "yaml.schemas": {"FILE": "definitions/*.yaml"}.
    Regenerate it when the actions change; `sealflow init` sets this up.
    """
    from sealflow import schemas
    from sealflow.dsl.editor_schema import editor_schema

    found = _registered(actions)
    text = json.dumps(editor_schema(schemas.load(), [_described(a) for a in found.values()]), indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        import os

        folder = os.path.dirname(out)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        fail_usage(f"--out {out}: {exc.strerror or exc}")
    click.echo(f"wrote {out} ({len(found)} action{'s' * (len(found) != 1)})", err=True)


def register(group: click.Group) -> None:
    group.add_command(actions)
    group.add_command(schema)
