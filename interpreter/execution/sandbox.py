"""What an action attempt runs inside: its secrets and its temporary directory.

:func:`prepare` is called right before the action's thread starts: it resolves
the action's declared secrets into ``ctx.secrets`` (a read-only mapping; a
missing one fails the attempt with ``configuration`` before anything runs)
and gives ``ctx`` a lazily created :class:`~sealflow.execution.tempfiles.TempArea`.
The returned :class:`Sandbox` runs the action so that the directory is
removed on the action's own thread when it returns or raises (see
:mod:`sealflow.execution.tempfiles`), and reports a size-limit violation afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sealflow.execution import secrets as secrets_mod
from sealflow.execution.tempfiles import TempArea, area_for


class Sandbox:
    __slots__ = ("area",)

    def __init__(self, area: TempArea):
        self.area = area

    def run(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        return self.area.run(fn, ctx)

    def failure(self) -> str | None:
        """Why the attempt must fail with ``policy_denied`` (its temporary storage), or None."""
        return self.area.failure()


def prepare(ctx: Any, act: Any, services: Any) -> Sandbox:
    """Fill ``ctx.secrets`` for ``act`` and attach a temporary area; ``StepError`` if a secret is missing."""
    config = getattr(services, "config", None)
    declared = getattr(act, "secrets", ()) or ()
    if declared:
        chain = getattr(services, "secret_chain", None) or secrets_mod.chain_for(config)
        ctx.secrets = chain.resolve(declared)
    area = area_for(config, ctx)  # the area names the attempt (from ctx) only in an error message
    ctx._temp = area
    return Sandbox(area)
