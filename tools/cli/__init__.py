"""The ``sealflow`` command line. Each command group lives in its own module; imports stay lazy."""

from __future__ import annotations

import os
import sys

import click

from . import lang, runs
from . import trust
from . import security
from . import controls
from . import worker
from . import registry


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sealflow", prog_name="sealflow")
@controls.config_option
def cli() -> None:
    """Sealflow: declarative, durable, reviewable AI workflows."""


lang.register(cli)
runs.register(cli)
trust.register(cli)
security.register(cli)
worker.register(cli)
registry.register(cli)


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
        click.echo(f"sealflow: internal error: {type(exc).__name__}: {exc}\n"
                   "  hint: this is a bug in sealflow; rerun with SEALFLOW_DEBUG=1 to see the traceback, and report it",
                   err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
