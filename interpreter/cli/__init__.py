"""The ``sealflow`` command line. Imports stay lazy.

Its rooms: ``commands/`` holds one module per command group, named after it; ``options`` the options they
share, each defined once; ``session`` what a command opens (configuration, access policy, action modules,
store, runtime); ``render`` every rendering of a run; ``definition_files`` finding, compiling and loading
definition files; ``exits`` how a command stops (usage error 2, refusal 1); ``diagnostics`` how a definition's
diagnostics print; ``actions_loader`` importing ``--actions`` modules; ``git_files`` files at a git ref.
"""

from __future__ import annotations

import os
import sys

import click

from sealflow.cli.options import config_option, project_option

#: command name -> the module under sealflow.cli that registers it; a module is imported only when one of
#: its commands runs (or for --help), so `sealflow validate` never pays for the runtime's, signing's or the
#: worker's imports. Each command group has its module in commands/, named after it.
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("validate", "lint", "plan", "graph"), "commands.lang"),
    **dict.fromkeys(("run", "submit", "status", "approve", "reject", "resolve", "cancel", "recover"), "commands.runs"),
    **dict.fromkeys(("keygen", "sign", "verify", "diff"), "commands.trust"),
    **{group: f"commands.{group}" for group in (
        "approvals", "dlq", "audit", "worker", "definitions", "scheduler", "models", "store", "serve", "tokens",
        "breakers", "events", "init", "notifications", "doctor", "callbacks", "mcp")},
    "runs": "commands.runs_list",
    **dict.fromkeys(("actions", "schema"), "commands.actions"),
    "test": "commands.test",
}


class LazyGroup(click.Group):
    """A group whose commands live in modules imported on first use (click's documented lazy pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            import importlib

            importlib.import_module(f"{__name__}.{COMMANDS[name]}").register(self)
        return self.commands.get(name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sealflow", prog_name="sealflow")
@project_option
@config_option
def cli() -> None:
    """Sealflow: declarative, durable, reviewable AI workflows."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: click handles usage errors (exit 2); nothing else escapes as a traceback."""
    try:
        cli.main(args=argv, prog_name="sealflow", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:  # a bug of ours: say so plainly, keep the traceback for who asks
        if os.environ.get("SEALFLOW_DEBUG"):
            raise
        from sealflow.core.errors import StepError
        from sealflow.store.errors import PlanTampered, StoreUnavailable

        if isinstance(exc, StoreUnavailable):  # the store's disk or database, not a bug: it names both
            click.echo(f"sealflow: {exc}", err=True)
            return 1
        if isinstance(exc, PlanTampered):  # a run's stored plan is not what its digest says: refused, not a bug
            click.echo(f"sealflow: refused: {exc}\n  hint: restore that row of the store's plans table from a "
                       "backup (or delete it and submit the definition again)", err=True)
            return 1
        if isinstance(exc, StepError) and exc.error_class != "internal":  # a classified refusal, not a bug
            click.echo(f"sealflow: error: {exc.message} ({exc.error_class})", err=True)
            return 2 if exc.error_class == "invalid_request" else 1
        click.echo(f"sealflow: internal error: {type(exc).__name__}: {exc}\n"
                   "  hint: this is a bug in sealflow; rerun with SEALFLOW_DEBUG=1 to see the traceback, and report it",
                   err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
