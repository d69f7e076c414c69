"""Submitting a run: the checks a new run passes (authorisation, models, declared controls, input size and
schema, pins) and the one transaction that creates it (:meth:`Submitting.submit`), a method of
:class:`~sealflow.runtime.facade.Runtime`.

Every refusal writes no run, no definition, no pin and uses no quota; only its audit event.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sealflow.core.errors import ConfigError, StepError
from sealflow.core.jsonc import NotUnicode, dumps, input_hash, over_payload_limit, short_message
from sealflow.dsl.plan import Plan
from sealflow.engine.decide import lease_ms
from sealflow.policy import authz, coordination
from sealflow.policy.access import missing, mode_of
from sealflow.runtime import honoured
from sealflow.runtime.readiness import plan_models
from sealflow.store.base import AuditEvent, Claimed, NewRun
from sealflow.store.definitions import DefinitionSource, Registration
from sealflow.store.errors import AdmissionRefused
from sealflow.store.tags import check_tags

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.policy.access import AccessProvider
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.priority import PriorityOf
    from sealflow.store.base import Store

#: the permission a pin (``--pin-version``: a rollback to an older signed version) needs, beyond submitting
PIN_PERMISSION = "definitions:pin"


def new_run_id() -> str:
    """A new run's id: ``run_`` and 28 hex digits, the first 12 the time it was made in milliseconds since
    the epoch, the other 16 random (64 bits of the operating system's CSPRNG), as UUIDv7 lays them out.

    Ids made later sort later, so a new run's rows go in at the right edge of every index keyed by its id
    (runs, attempts, results, the audit log's run index, and a fan-out's children, whose ids begin with
    their parent's) instead of at a random page of each: fewer pages written per commit, and recent pages
    stay the working set as the store grows (docs/benchmarks.md, eleventh round). A clock that goes back
    costs only that locality; the random part keeps ids unique and unguessable either way."""
    return f"run_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


class ModelNotConfigured(ConfigError):
    """A definition names a model that no configured provider serves."""


def _said(message: str) -> str:
    """A schema error's message, which quotes the offending value whole (a long text, a large object), cut to a
    readable length."""
    return short_message(message, 300)


class Submitting:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:  # the facade's (runtime/facade.py), which these methods use
        store: Store
        engine: Engine
        access: AccessProvider
        clock: Clock
        config: RuntimeConfig
        providers: Any
        priority_of: PriorityOf
        _input_validators: dict[str, Any]
        _plan_json: dict[str, str]

    def submit(self, plan: Plan, input: Any, *, initiator: str, tenant: str = "default",
               idempotency_key: str | None = None, run_as: str | None = None, signer: str | None = None,
               source: DefinitionSource | None = None, pin: bool = False,
               tags: Mapping[str, Any] | None = None) -> str:
        """Create a run of ``plan`` (idempotent by ``idempotency_key``) and return its id.

        The acting identity (``initiator``, or ``run_as`` for a scheduled run) must hold every permission
        the plan declares in ``tenant``, else :class:`~sealflow.policy.authz.Unauthorized` and nothing
        is created. A signed definition (``signer`` other than ``unsigned``) is recorded in the store's
        registry with its ``source`` (exact bytes and signature envelope) and, with ``pin``, its pin, in the
        same transaction as the run: every refusal (authorisation, invalid input, the registry's
        :class:`~sealflow.store.definitions.DefinitionRefused`, admission, an idempotency
        conflict) writes no run, no definition, no pin and uses no quota; only its audit event. ``tags``: the
        submitter's ``name=value`` labels, written with the run (invalid tags: ``invalid_request``)."""
        return self._submit(plan, input, initiator=initiator, tenant=tenant, idempotency_key=idempotency_key,
                            run_as=run_as, signer=signer, source=source, pin=pin, tags=tags)[0]

    def _submit(self, plan: Plan, input: Any, *, initiator: str, tenant: str = "default",
                idempotency_key: str | None = None, run_as: str | None = None, signer: str | None = None,
                source: DefinitionSource | None = None, pin: bool = False,
                claim_for: Callable[[Plan, str | None], str | None] | None = None,
                tags: Mapping[str, Any] | None = None) -> tuple[str, Claimed | None]:
        """:meth:`submit`; ``claim_for(plan, signer)``: the owner to claim the new run's first attempt for in
        the same transaction (:mod:`.inline`), or None; returns the run's id and that claim."""
        if not plan.digest:
            plan = plan.with_digest()
        try:
            labels = check_tags(tags or {})
        except ValueError as exc:
            raise StepError("invalid_request", f"tags of a run of {plan.name} v{plan.version}: {exc}") from None
        acting = authz.authorize_submit(self.store, self.access, self.clock.now(), plan, initiator=initiator,
                                        tenant=tenant, run_as=run_as)
        for each in plan.with_called():  # the workflows it calls are checked as it is: they run under it
            self._check_models(each)
            self._check_arguments(each)
            honoured.check(each)  # a declared control this build cannot enforce is refused, never ignored
        try:
            input_json = dumps(input)
        except NotUnicode as exc:
            raise StepError("invalid_request", f"input for {plan.name} v{plan.version} holds text that is not "
                                               f"valid Unicode at input{exc.where[1:]} (an unpaired surrogate, as "
                                               "the escape \\ud800 alone decodes to); send whole characters"
                            ) from None
        except (TypeError, ValueError) as exc:
            raise StepError("invalid_request", f"input for {plan.name} v{plan.version} is not JSON: {exc}") from None
        over = over_payload_limit(input_json, self.config.payload_max_bytes)
        if over is not None:
            raise StepError("invalid_request", f"input for {plan.name} v{plan.version} is {over}; pass large "
                                               "documents by reference, e.g. an object store key")
        self._check_input(plan, input)  # after the size: a schema is never walked over an input too large to keep
        signed = signer is not None and signer != "unsigned"
        if pin and not signed:
            raise StepError("invalid_request", "pinning a version needs a signed definition (--trust): only "
                                               "signed versions are recorded and pinned")
        if pin:
            self._authorize_pin(plan, initiator, tenant)
        registration = Registration(plan.name, plan.version, plan.digest, signer, source, pin, initiator) \
            if signed and signer is not None else None  # (signed: it has a signer)
        for each in plan.with_called():  # warns about a pool the configuration does not list
            coordination.check_plan(each, self.config.pools)
        now = self.clock.now()
        budget = plan.budget.max_runtime_ms
        first = plan.step(plan.start)
        plan_json = self._plan_json.get(plan.digest)
        if plan_json is None:
            plan_json = self._plan_json[plan.digest] = plan.to_json(indent=None)
        new = NewRun(id=new_run_id(), tenant=tenant, workflow=plan.name,
                     workflow_version=plan.version, plan_digest=plan.digest, plan_json=plan_json,
                     input_json=input_json, input_hash=input_hash(input), initiator=initiator,
                     idempotency_key=idempotency_key, deadline=None if budget is None else now + budget / 1000.0,
                     first_step=plan.start, first_lease_ms=lease_ms(first), priority=plan.priority,
                     acting_as=acting, access_mode=mode_of(self.access), signer=signer, tags=labels)
        limits = self.config.limits(tenant)
        admit = None if limits.admits_all else limits
        self.engine.remember(plan)  # (before the claim is decided: it reads the plan's steps)
        owner = None if claim_for is None else claim_for(plan, signer)
        try:
            if owner is None:
                run, _created = self.store.submit(new, now, admit, registration)
                claimed = None
            else:
                run, _created, claimed = self.store.submit_claimed(new, now, admit, registration, owner=owner)
        except AdmissionRefused as exc:  # nothing was created; the refusal is audited
            self.store.append_audit(AuditEvent("submit_refused", None, initiator, tenant=tenant, detail={
                "limit": exc.limit, "retry_after": round(exc.retry_after, 3), "workflow": plan.name,
                "version": plan.version}), now)
            raise
        self.priority_of.note(run.id, run.priority)
        return run.id, claimed

    def _check_arguments(self, plan: Plan) -> None:
        """Refuse (nothing created) a plan whose ``with:`` does not fit an action this process registers: an
        argument it does not take or a missing required one (compiled elsewhere, without these actions)."""
        from sealflow.execution.arguments import plan_problems

        problems = plan_problems(plan, self.engine.services.registry)
        if problems:
            raise StepError("invalid_request", f"{plan.name} v{plan.version} does not fit its actions: "
                                               + "; ".join(problems[:5])
                                               + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
                                               + "; sealflow validate --actions shows where")

    def _check_models(self, plan: Plan) -> None:
        """Refuse (nothing created) a plan naming a model no provider here serves."""
        missing = [m for m in plan_models(plan) if m not in self.providers]
        if missing:
            where = self.config.source or "the runtime configuration ($SEALFLOW_CONFIG or --config FILE)"
            raise ModelNotConfigured(
                f"{plan.name} v{plan.version} names model{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)}, which {where} does not define under models: "
                "(docs/models.md)")

    def _authorize_pin(self, plan: Plan, initiator: str, tenant: str) -> None:
        """A pin overrides the rollback protection, so it is an operator's decision: the caller needs
        :data:`PIN_PERMISSION` in the tenant, beyond the right to submit (else audited and refused)."""
        perms, _member = authz.member_permissions(self.access, tenant, initiator)
        if not missing(perms, (PIN_PERMISSION,)):
            return
        self.store.append_audit(AuditEvent("submit_denied", None, initiator, tenant=tenant, detail={
            "tenant": tenant, "workflow": plan.name, "version": plan.version, "plan": plan.digest,
            "reason": "missing_permissions", "missing": [PIN_PERMISSION], "pin": True}), self.clock.now())
        raise authz.Unauthorized(f"{initiator} may not pin {plan.name} v{plan.version} in tenant {tenant!r}: pinning "
                                 f"a version (a rollback) needs the permission {PIN_PERMISSION}; ask an administrator "
                                 "of the access policy", missing=(PIN_PERMISSION,))

    def _check_input(self, plan: Plan, value: Any) -> None:
        if plan.input_schema is None:
            return
        validator = self._input_validators.get(plan.digest)
        if validator is None:
            import jsonschema

            cls = jsonschema.validators.validator_for(plan.input_schema)
            validator = self._input_validators[plan.digest] = cls(plan.input_schema)
        errors = list(validator.iter_errors(value))
        if errors:
            import jsonschema

            best = jsonschema.exceptions.best_match(errors)

            def at(e: Any) -> str:
                return "/".join(str(p) for p in e.absolute_path) or "(root)"

            # every problem at once (bounded), the most relevant first: a newcomer fixes the input in one go
            rest = sorted((e for e in errors if e is not best), key=lambda e: (at(e), e.message))
            also = "".join(f"; also at {at(e)}: {_said(e.message)}" for e in rest[:9])
            more = f"; and {len(rest) - 9} more" if len(rest) > 9 else ""
            raise StepError("invalid_request", f"input for {plan.name} v{plan.version} is invalid at {at(best)}: "
                                               f"{_said(best.message)}{also}{more}; fix the input to match its "
                                               "input.schema")
