"""How a command stops when it cannot go on: a usage error (exit 2), a refusal or a failure (exit 1).

Every message names what is wrong (and, where it helps, a hint); never a traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click


def fail_usage(message: str) -> NoReturn:
    """Print a usage error (bad arguments, unreadable input, unknown run) and exit 2."""
    click.echo(f"sealflow: error: {message}", err=True)
    sys.exit(2)


def refuse(message: object, hint: str | None = None) -> NoReturn:
    """Print why the command was refused (unauthorized, untrusted, not allowed now), with a hint, and exit 1."""
    click.echo(f"sealflow: refused: {message}" + (f"\n  hint: {hint}" if hint else ""), err=True)
    sys.exit(1)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error (not a usage error) and exit ``code``."""
    click.echo(f"sealflow: error: {message}", err=True)
    sys.exit(code)
