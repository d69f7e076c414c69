"""The ``sealflow`` command line. Each command group lives in its own module; imports stay lazy."""

from __future__ import annotations

import sys

import click

from . import lang, runs


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sealflow", prog_name="sealflow")
def cli() -> None:
    """Sealflow: declarative, durable, reviewable AI workflows."""


lang.register(cli)
runs.register(cli)


def main(argv: list[str] | None = None) -> int:
    """Entry point: click handles usage errors (exit 2); nothing else escapes as a traceback."""
    try:
        cli.main(args=argv, prog_name="sealflow", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
