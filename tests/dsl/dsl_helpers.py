"""Small builders for definition tests."""

from __future__ import annotations

import textwrap

from sealflow.dsl.api import check_bytes

HEADER = """\
sealflow: 1
name: wf
version: 1
owner: team:test
"""


def check(body: str, *, actions=None, lint: bool = False, path: str = "wf.yaml"):
    """Check a definition made of HEADER plus ``body`` (dedented)."""
    return check_bytes((HEADER + textwrap.dedent(body)).encode(), path, actions=actions, lint=lint)


def codes(result) -> list[str]:
    return [d.code for d in result.diagnostics]
