"""Which definitions a worker will execute: the signer each run records, checked before every step.

A run records the signer of the definition it executes (``tools/loading.py`` verifies the signature
when the run is submitted with ``--trust``; development runs record ``unsigned``). A long-lived worker
is configured with a :class:`TrustGate`: it refuses to execute runs of unsigned definitions unless
started with ``--allow-unsigned``, and, given a trust policy, runs whose signer the policy does not
name. A refused step fails with ``unauthorized`` (never retried) and the run goes to the dead-letter
list with the reason. The worker trusts the store's record of who signed; the store is part of the
trusted deployment, like the broker.
"""

from __future__ import annotations

import dataclasses

from sealflow.interpreter.core.outcomes import Failed

UNSIGNED = "unsigned"


@dataclasses.dataclass(frozen=True)
class TrustGate:
    allow_unsigned: bool = False
    #: signer names the worker's trust policy accepts (key ids, and "sigstore"); None: any recorded signer
    signers: frozenset[str] | None = None

    def refusal(self, run) -> str | None:
        signer = getattr(run, "signer", None) or UNSIGNED
        if signer == UNSIGNED:
            if self.allow_unsigned:
                return None
            return (f"run {run.id} executes an unsigned definition ({run.workflow} v{run.workflow_version}); this "
                    "worker runs only signed definitions: submit it with --trust POLICY, or start the worker "
                    "with --allow-unsigned for development")
        name = signer.split(":", 1)[0] if signer.startswith("sigstore:") else signer
        if self.signers is not None and name not in self.signers:
            return (f"run {run.id} executes {run.workflow} v{run.workflow_version} signed by {signer!r}, whom this "
                    "worker's trust policy does not name")
        return None


def check(gate: TrustGate | None, x) -> Failed | None:
    """The refusal of the claimed attempt's run by ``gate`` (the worker's trust gate), if there is one."""
    if gate is None:
        return None
    reason = gate.refusal(x.run)
    return None if reason is None else Failed("unauthorized", reason)


def from_policy(policy) -> frozenset[str]:
    """The signer names a :class:`sealflow.dsl.trust.TrustPolicy` accepts."""
    names = {k.id for k in policy.keys}
    if policy.identities:
        names.add("sigstore")
    return frozenset(names)
