"""The store conformance kit: the backend-independent checks of the store contract, for any backend.

Subclass :class:`StoreConformance` in a test module, give it a ``store`` fixture (a fresh, empty store opened
on the ``clock`` fixture's clock) and the optional capabilities it declares, and pytest runs every check
against it (in the spirit of LangGraph's ``checkpoint-conformance``)::

    from sealflow.testing.conformance.kit import StoreConformance

    class TestMyStore(StoreConformance):
        capabilities = frozenset({"sql_reads"})

        @pytest.fixture
        def store(self, clock, tmp_path):
            s = MyStore(tmp_path / "state", clock=clock)
            yield s
            s.close()

The checks: the store implements every store protocol (:data:`sealflow.store.base.PROTOCOLS`), declares exactly
the capabilities it says (:class:`~sealflow.store.capabilities.Capabilities`), and keeps the contract of submit
and idempotency, claim and fencing, reading runs (keyset pages, counts by state), and the definition registry.
The repository runs it for SQLite and PostgreSQL (``tests/interpreter/store/test_store_conformance.py``); the
rest of its backend suite
(``tests/interpreter/store/test_store_suite*.py``) moves here check by check.
"""

from __future__ import annotations

import pytest

from sealflow.core.clock import FakeClock
from sealflow.store.base import PROTOCOLS, Store
from sealflow.store.capabilities import Capabilities
from sealflow.store.errors import (
    ConcurrencyError,
    FencingError,
    IdempotencyConflict,
    MessageRefused,
)
from sealflow.store.records import LedgerEntry, RunQuery
from sealflow.testing.conformance import protocol_gaps
from sealflow.testing.conformance.helpers import T0, new_run, snapshot, submit_and_claim, succeed_and_go


class StoreConformance:
    """The checks; a subclass gives the ``store`` fixture and :attr:`capabilities`."""

    #: the optional capabilities the backend declares (field names of :class:`Capabilities`)
    capabilities: frozenset[str] = frozenset()

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The clock the store is opened on (the store stamps with it; the checks move it)."""
        return FakeClock(T0)

    @pytest.fixture
    def store(self, clock: FakeClock) -> Store:
        raise NotImplementedError("a StoreConformance subclass gives a `store` fixture: a fresh store on `clock`")

    # -- the protocols and the capabilities ---------------------------------------------------------------

    def test_it_implements_every_store_protocol(self, store: Store) -> None:
        # Given the backend's store / When it is checked against every store protocol
        gaps = protocol_gaps(store)
        # Then nothing is missing, and it is an instance of each
        assert gaps == {}
        assert [p.__name__ for p in PROTOCOLS if not isinstance(store, p)] == []

    def test_it_declares_the_capabilities_it_says(self, store: Store) -> None:
        # Given the backend's store / When its optional capabilities are decided
        caps = Capabilities.of(store)
        # Then they are exactly the declared ones, each the store itself
        assert set(caps.names()) == set(self.capabilities)
        assert all(getattr(caps, name) is store for name in caps.names())

    def test_it_keeps_time_on_the_clock_it_was_opened_on(self, store: Store, clock: FakeClock) -> None:
        # Given the backend's store opened on the kit's clock / Then that is its clock
        assert store.clock is clock

    # -- reading runs -------------------------------------------------------------------------------------

    def test_runs_are_listed_by_keyset_pages_and_counted_by_state(self, store: Store) -> None:
        # Given three runs of one tenant, one of them cancelled, and one run of another tenant
        for i, tenant in enumerate(("acme", "acme", "acme", "globex")):
            store.submit(new_run(f"r{i}", tenant=tenant), T0 + i)
        store.cancel("r1", T0 + 5, actor="user:ana")
        # When acme's runs are read a page of two at a time, and counted by state
        first = store.query_runs(RunQuery(tenant="acme", limit=2))
        rest = store.query_runs(RunQuery(tenant="acme", limit=2, after=(first[-1].created_at, first[-1].id)))
        counts = store.count_runs(RunQuery(tenant="acme", states=("queued",)))
        # Then every acme run comes once, newest first, and the counts cover every state whatever is asked
        assert [r.id for r in first + rest] == ["r2", "r1", "r0"]
        assert sum(counts.values()) == 3 and counts["queued"] == 2
        assert store.count_runs(RunQuery(tenant="acme", version=2)) == {}

    # -- submit and idempotency --------------------------------------------------------------------------

    def test_submit_queues_the_run_with_its_first_attempt_and_an_outbox_row(self, store: Store) -> None:
        # Given a new run / When it is submitted
        run, created = store.submit(new_run(), T0)
        # Then it is queued, its first attempt scheduled, one message due, and the audit says so
        assert created and run.state == "queued" and run.rev == 1
        (att,) = store.attempts("r1")
        assert (att.step_id, att.attempt, att.try_no, att.state) == ("a", 1, 1, "scheduled")
        (row,) = store.outbox("r1")
        assert (row.step_id, row.attempt, row.token, row.sent_at) == ("a", 1, att.token, None)
        events = [e.event for e in store.audit("r1")]
        assert events == ["run.created", "run.queued", "step.scheduled"]
        assert store.get_plan("sha256:plan") == '{"plan": true}'

    def test_same_idempotency_key_and_input_returns_the_existing_run(self, store: Store) -> None:
        # Given a run submitted with a key
        first, _ = store.submit(new_run("r1", key="k"), T0)
        # When the same key and input are submitted again
        again, created = store.submit(new_run("r2", key="k"), T0 + 1)
        # Then the existing run comes back and nothing new is created
        assert not created and again.id == first.id == "r1"
        assert store.list_runs() == [store.get_run("r1")]

    def test_same_idempotency_key_with_another_input_is_a_conflict(self, store: Store) -> None:
        # Given a run submitted with a key
        store.submit(new_run("r1", key="k"), T0)
        # When the same key comes with another input / Then it is a conflict, and nothing new is written
        with pytest.raises(IdempotencyConflict, match="different input"):
            store.submit(new_run("r2", key="k", value={"n": 2}), T0)
        assert [r.id for r in store.list_runs()] == ["r1"]

    def test_idempotency_keys_are_scoped_by_tenant(self, store: Store) -> None:
        # Given a run submitted with a key in one tenant
        store.submit(new_run("r1", key="k", tenant="acme"), T0)
        # When another tenant submits with the same key
        _, created = store.submit(new_run("r2", key="k", tenant="globex"), T0)
        # Then its run is created: keys do not cross tenants
        assert created

    def test_submit_claimed_creates_the_run_with_its_first_attempt_claimed(self, store: Store) -> None:
        # Given a new run / When it is submitted with its first attempt claimed for the caller
        run, created, claimed = store.submit_claimed(new_run(), T0, owner="w1")
        # Then the run is running, its first attempt claimed under a lease for w1, and no message is due
        assert created and claimed is not None
        assert claimed.run.id == run.id == "r1" and claimed.run.state == "running"
        (att,) = store.attempts("r1")
        assert (att.step_id, att.attempt, att.state, att.lease_owner, att.lease_expires) == ("a", 1, "running", "w1",
                                                                                            T0 + 30)
        assert claimed.attempt.token == att.token and store.outbox("r1") == []
        # And the audit says the step was claimed (scheduled by the system) without a separate scheduling event
        events = [(e.event, e.actor, e.state_before, e.state_after) for e in store.audit("r1")]
        assert events[:2] == [("run.created", "user:ana", None, "created"), ("run.queued", "user:ana", "created",
                                                                             "queued")]
        assert [e[0] for e in events[2:]] == ["step.running", "run.running"]
        assert events[2][1:] == ("w1", "pending", "running")

    def test_submit_claimed_again_returns_the_existing_run_unclaimed(self, store: Store) -> None:
        # Given a run submitted and claimed with an idempotency key
        store.submit_claimed(new_run("r1", key="k"), T0, owner="w1")
        # When the same key and input are submitted again for another caller
        again, created, claimed = store.submit_claimed(new_run("r2", key="k"), T0 + 1, owner="w2")
        # Then the existing run comes back, nothing is claimed for the second caller
        assert not created and again.id == "r1" and claimed is None
        (att,) = store.attempts("r1")
        assert att.lease_owner == "w1"

    # -- claim and fencing -------------------------------------------------------------------------------

    def test_claim_takes_a_lease_with_a_new_token(self, store: Store) -> None:
        # Given a submitted run / When its message is claimed
        claimed, msg = submit_and_claim(store)
        # Then the attempt runs under a lease for the claimant, with a new token, and its message is gone
        assert claimed.attempt.state == "running" and claimed.attempt.token == msg.token + 1
        assert claimed.attempt.lease_owner == "w1" and claimed.attempt.lease_expires == T0 + 30
        assert claimed.run.state == "running" and not claimed.resumed
        assert store.outbox("r1") == []  # a claimed message leaves the outbox

    def test_duplicate_and_forged_messages_are_refused_and_audited(self, store: Store) -> None:
        # Given a claimed attempt
        claimed, msg = submit_and_claim(store)
        before = snapshot(store, "r1")[:4]
        # When the same message arrives again, and a forged one with a made-up token
        with pytest.raises(MessageRefused) as dup:
            store.claim(*msg, owner="w2", now=T0)
        with pytest.raises(MessageRefused) as forged:
            store.claim(msg.run_id, msg.step_id, msg.attempt, 42, owner="w3", now=T0)
        # Then nothing changes but the audit, which records both refusals with their reasons
        assert snapshot(store, "r1")[:4] == before
        assert (dup.value.reason, forged.value.reason) == ("stale_token", "stale_token")
        refused = [e for e in store.audit("r1") if e.event == "message_refused"]
        assert [e.actor for e in refused] == ["w2", "w3"]

    def test_a_stale_token_commit_fails_its_fence_and_changes_nothing(self, store: Store) -> None:
        # Given a claimed attempt whose lease expired and was requeued under a new token
        claimed, _ = submit_and_claim(store)
        report = store.sweep(T0 + 31)
        assert report.leases_expired == 1
        (att,) = store.attempts("r1")
        assert att.state == "scheduled" and att.token == claimed.attempt.token + 1
        before = snapshot(store, "r1")
        # When the zombie commits with its old token
        with pytest.raises(FencingError, match="no longer current"):
            store.commit(succeed_and_go(claimed, ledger=LedgerEntry("default", "k", "r1", "a", "1")), T0 + 32)
        # Then nothing changed: not the run, the attempts, the outbox, the audit, nor the ledger
        assert snapshot(store, "r1") == before
        assert store.ledger_get("default", "k") is None

    def test_a_stale_run_revision_is_a_concurrency_error(self, store: Store) -> None:
        # Given a claimed attempt
        claimed, _ = submit_and_claim(store)
        before = snapshot(store, "r1")
        # When a commit names an older revision of the run / Then it is refused and nothing changes
        with pytest.raises(ConcurrencyError, match="revision"):
            store.commit(succeed_and_go(claimed, rev=claimed.run.rev - 1), T0)
        assert snapshot(store, "r1") == before

    def test_the_definition_registry_refuses_a_second_digest_and_a_rollback_without_a_pin(
            self, store: Store, clock: FakeClock) -> None:
        from sealflow.store.definitions import DefinitionRefused

        # Given v1 and then v2 of a definition loaded
        store.register_definition("wf", 1, "d1", "ana@example.com")
        clock.advance(1)
        store.register_definition("wf", 2, "d2", "ana@example.com")
        # When v1 comes back with another digest / Then it is refused: a signed version never changes
        with pytest.raises(DefinitionRefused, match="already recorded") as got:
            store.register_definition("wf", 1, "dX", "eve@example.com")
        assert got.value.reason == "second-digest"
        # When v1 is loaded again without a pin / Then it is a rollback, refused
        with pytest.raises(DefinitionRefused) as got:
            store.register_definition("wf", 1, "d1", "ana@example.com")
        assert got.value.reason == "rollback"
        # When an operator pins it / Then v1 is the active version, pinned, and the pin is audited
        store.register_definition("wf", 1, "d1", "ana@example.com", pin=True, actor="ops")
        assert [(d.version, d.active, d.pinned) for d in store.definitions("wf")] == [(1, True, True),
                                                                                      (2, False, False)]
        assert [e.event for e in store.audit() if e.event in ("definition.recorded", "definition.pinned")] == [
            "definition.recorded", "definition.recorded", "definition.pinned"]
        # And loading the highest version again clears the pin
        store.register_definition("wf", 2, "d2", "ana@example.com")
        assert [(d.version, d.active, d.pinned) for d in store.definitions("wf")] == [(1, False, False),
                                                                                      (2, True, False)]
