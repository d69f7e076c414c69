"""The store conformance kit: checks a third party can run against its own backend (``sealflow.testing.conformance``).

A backend implements the store protocols of :data:`sealflow.store.base.PROTOCOLS` (the runtime's aggregates,
composed as :class:`~sealflow.store.base.Store`, and the server's
:class:`~sealflow.store.serverstate.ServerStore`). :mod:`.backends` is the type-level check of the
repository's own two backends (mypy reads it: ``python tools/typecheck.py``); :func:`protocol_gaps` is the
same check at run time, for any store object.
"""

from __future__ import annotations

import inspect

from sealflow.store.base import PROTOCOLS, methods


def protocol_gaps(store: object) -> dict[str, list[str]]:
    """Protocol name -> the methods ``store`` lacks (or has under another signature: a missing parameter the
    protocol names, by name); an empty dict when it implements every store protocol."""
    gaps: dict[str, list[str]] = {}
    for protocol in PROTOCOLS:
        missing = []
        for name in sorted(methods(protocol)):
            got = getattr(store, name, None)
            if not callable(got):
                missing.append(name)
                continue
            wanted = inspect.signature(getattr(protocol, name))
            try:
                have = inspect.signature(got)
            except (TypeError, ValueError):  # a builtin without a signature: trust it
                continue
            if any(p.kind is p.VAR_KEYWORD for p in have.parameters.values()):
                continue
            lacks = [p for p in list(wanted.parameters)[1:] if p not in have.parameters]
            if lacks:
                missing.append(f"{name} (no parameter {', '.join(lacks)})")
        if missing:
            gaps[protocol.__name__] = missing
    return gaps


__all__ = ["protocol_gaps"]
