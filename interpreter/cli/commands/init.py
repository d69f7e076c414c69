"""``sealflow init [DIR]``: scaffold a project that runs at once.

It writes ``sealflow.yaml``, ``definitions/hello.v1.yaml``, ``actions/hello.py`` (one action), ``access.yaml``
(the current user a member), the CI workflow, a ``.gitignore`` covering private keys and ``.sealflow/``, and
the editor's settings with the workflow schema extended with the project's action (``.vscode/``), then prints
the next three commands. It never overwrites a file: an existing one is refused (exit 1) unless ``--force``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from sealflow.cli.exits import refuse
from sealflow.cli.options import check_principal, default_principal

#: the workflow schema with the project's actions, which .vscode/settings.json maps onto definitions/
EDITOR_SCHEMA = ".vscode/sealflow.schema.json"


def _editor_schema(actions_file: Path) -> str:
    """The editor schema for the scaffold's one action (``sealflow schema`` with the project's actions)."""
    import json

    from sealflow import schemas
    from sealflow.cli.actions_loader import action_info, import_actions
    from sealflow.dsl.editor_schema import editor_schema
    from sealflow.execution.actions import REGISTRY

    import_actions([str(actions_file)])
    act = REGISTRY.get("hello.greet")
    described = [] if act is None else [{**act.describe(), "source": action_info(act).source}]
    return json.dumps(editor_schema(schemas.load(), described), indent=2) + "\n"


@click.command()
@click.argument("directory", metavar="[DIR]", default=".", type=click.Path(file_okay=False))
@click.option("--as", "principal", metavar="PRINCIPAL", default=None, callback=check_principal,
              help="The member the access policy names (default: user:$SEALFLOW_USER, else the local user).")
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def init(directory: str, principal: str | None, force: bool) -> None:
    """Scaffold a Sealflow project in DIR (default: here): sealflow.yaml, a definition, an action, an access
    policy, the CI workflow and a .gitignore."""
    from sealflow.cli.scaffold import files

    root = Path(directory)
    principal = principal or default_principal()
    planned = files(principal)
    existing = [name for name in (*planned, EDITOR_SCHEMA) if (root / name).exists()]
    if existing and not force:
        refuse(f"{root / existing[0]} exists; sealflow init never overwrites a file",
               hint="pick an empty folder (sealflow init DIR), or pass --force to overwrite")
    try:
        for name, text in planned.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            click.echo(f"  wrote {path}")
        schema = root / EDITOR_SCHEMA
        schema.write_text(_editor_schema(root / "actions" / "hello.py"), encoding="utf-8")
    except OSError as exc:  # a full disk, a read-only folder: said, not a traceback
        refuse(f"cannot write {exc.filename or root}: {exc.strerror or exc}",
               hint="free space or pick a folder you can write to; run again with --force over a partial project")
    click.echo(f"  wrote {schema} (the editor's schema, with your actions: `sealflow schema --out {EDITOR_SCHEMA}` "
               "when they change)")
    click.echo(f"a Sealflow project in {root}, with {principal} a member of its access policy; next:")
    step = 1
    if directory != ".":
        click.echo(f"  {step}. cd {shlex.quote(directory)}")
        step += 1
    click.echo(f"  {step}. sealflow validate definitions/")
    click.echo(f"  {step + 1}. sealflow run definitions/hello.v1.yaml --input '{{\"name\": \"world\"}}'")
    click.echo(f"  {step + 2}. sealflow test   (definitions/tests/hello.test.yaml: docs/testing.md)")
    if step == 1:
        click.echo("  4. sealflow runs list")


def register(group: click.Group) -> None:
    group.add_command(init)
