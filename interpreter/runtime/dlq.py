"""Dead letters: failure fingerprints and the operator's view of the list.

A run that fails permanently (no retry left, no ``on_error`` route) or runs
out of time lands in the dead-letter list with its reason and a *failure
fingerprint*: sha256 of the step id, the error class and the message with its
volatile parts (numbers, hex ids, UUIDs, quoted values) masked. A redrive
reruns the failed step on the run's original plan digest; when the redriven
run fails again with the same fingerprint, retrying is evidently useless and
the run is quarantined (it leaves the automatic path; an operator reads it).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from sealflow.core.fingerprints import fingerprint, normalise  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from sealflow.store.base import Store

def show(store: Store, run_id: str) -> dict[str, Any]:
    """A dead letter with its run, its failed attempts and the last 20 audit events."""
    from sealflow.store.errors import InvalidOperation

    letter = store.dead_letter(run_id)
    if letter is None:
        raise InvalidOperation(f"run {run_id} is not in the dead-letter list; see `sealflow dlq list`")
    failed = [dataclasses.asdict(a) for a in store.attempts(run_id) if a.state in ("failed", "timed_out")]
    return {"dead_letter": dataclasses.asdict(letter), "run": dataclasses.asdict(store.get_run(run_id)),
            "failed_attempts": failed, "audit": [dataclasses.asdict(e) for e in store.audit(run_id)][-20:]}
