"""Errors of the state store. One root (:class:`StoreError`); one line of docstring per class."""

from __future__ import annotations

from sealflow.core.errors import SealflowError


class StoreError(SealflowError):
    """Root of the store's exceptions."""


class StoreUnavailable(StoreError):
    """The store could not be reached, written or read (network, disk full, read-only); nothing half-done was kept."""


class StoreURLError(StoreError):
    """A store URL names a backend this build cannot open."""


class SchemaTooNew(StoreError):
    """The database was written by a newer sealflow; this one will not touch it."""


class NotFound(StoreError):
    """A run, step attempt or dead letter does not exist."""


class FencingError(StoreError):
    """A commit presented a fencing token that is no longer current; nothing was changed."""


class ConcurrencyError(StoreError):
    """The run changed since it was read (optimistic concurrency); re-read it and decide again."""


class IllegalTransition(StoreError):
    """A state change not listed in ``sealflow.core.states``; refused, audited, not applied."""

    info: dict[str, object]  #: what was refused (kind, run, step, before, after, ...), set where it is raised


class IdempotencyConflict(StoreError):
    """An idempotency key was reused with a different input."""


class MessageRefused(StoreError):
    """A step message did not match stored state (stale, duplicate or forged); it was audited and dropped."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class InvalidOperation(StoreError):
    """An operator action that the run's current state does not allow (e.g. redrive a completed run)."""


class ClaimDeferred(StoreError):
    """A claim was put off because the run's tenant has its ``max_running_steps`` running (bulkhead)."""

    def __init__(self, message: str, retry_in: float):
        super().__init__(message)
        self.retry_in = retry_in


class AdmissionRefused(StoreError):
    """A submission over a tenant limit (daily quota, queued runs); nothing was created. Try after ``retry_after`` s."""

    def __init__(self, message: str, *, limit: str, tenant: str, retry_after: float, error_class: str):
        super().__init__(message)
        self.limit = limit
        self.tenant = tenant
        self.retry_after = retry_after
        #: ``budget_exceeded`` for a spent daily quota, ``rate_limited`` for a full queue
        self.error_class = error_class


class PlanTampered(StoreError):
    """A stored plan is not what its digest says (its row was altered or corrupted): it is never executed."""

    def __init__(self, digest: str, why: str):
        super().__init__(f"the stored plan {digest} does not match its digest ({why}): its row in the store's plans "
                         "table was altered or corrupted, so it is not executed")
        self.digest, self.why = digest, why

    def refusing(self, what: str) -> PlanTampered:
        """This refusal, said of an operator's act that would use the plan (``what``: "cancel run R (W v1)"),
        refused before anything changed."""
        refused = PlanTampered(self.digest, self.why)
        refused.args = (f"cannot {what}: {self}; nothing was changed",)
        return refused
