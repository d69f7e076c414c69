"""The step actor (service/actors.py): what it logs when handling a message fails. Given / When / Then."""

from __future__ import annotations

import logging

import pytest

from sealflow.engine.engine import NOTHING, Handled
from sealflow.runtime.actors import declare_step_actor, embedded_broker
from sealflow.store.errors import StoreUnavailable
from sealflow.store.records import Message


class _Failing:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def handle(self, *message, carry=False, claimed=None):
        raise self.exc


@pytest.mark.parametrize(("exc", "traceback"), [
    (StoreUnavailable("PostgreSQL store postgresql://db/sf: commit failed, nothing was changed: could not extend "
                      "file: No space left on device"), False),
    (KeyError("a bug"), True),
])
def test_a_failed_step_message_is_logged_once_with_a_traceback_only_for_a_bug(caplog, exc, traceback):
    # Given a step actor whose engine fails with the store's own clear error (the database's disk is full),
    # or with a bug
    broker = embedded_broker()
    try:
        actor = declare_step_actor(broker, _Failing(exc), queue_name="t-actors")
        # When a message is handled
        with caplog.at_level(logging.ERROR, logger="sealflow.actors"):
            actor.fn("run_1", "a", 1, 7)
    finally:
        broker.close()
    # Then one error line says what failed and that the step will be retried; a store error comes without
    # a traceback (it is the environment's, and says so), a bug with one
    (record,) = [r for r in caplog.records if r.name == "sealflow.actors"]
    assert "step message (run_1, a, 1) failed" in record.getMessage()
    assert "will be retried" in record.getMessage()
    assert (record.exc_info is not None) is traceback
    if not traceback:
        assert "No space left on device" in record.getMessage()


class _Recording:
    """An engine that records the messages handed to it and the refusals counted."""

    def __init__(self):
        self.handled: list[tuple] = []
        self.refusals: list[str] = []

    def handle(self, *message, carry=False, claimed=None) -> Handled:
        self.handled.append(message)
        return NOTHING

    def claim_refused(self, reason: str) -> None:
        self.refusals.append(reason)


@pytest.mark.parametrize(("args", "kwargs", "says"), [
    ((), {}, "0 arguments and keywords [], not (run_id, step_id, attempt, token[, tenant])"),
    (("run_1",), {}, "1 arguments"),
    (("run_1", "a", 1, 7, "default", "extra"), {}, "6 arguments"),
    (("run_1", "a", 1, 7), {"evil": 1}, "keywords ['evil']"),
    (("run_1", "a", 1, 7, "default"), {"tenant": "other"}, "keywords ['tenant']"),
    ((123, "a", 1, 7, "default"), {}, "run_id is int 123, not an id"),
    (("", "a", 1, 7, "default"), {}, "run_id is empty text, not an id"),
    (("run_1", None, 1, 7, "default"), {}, "step_id is null, not an id"),
    (("r" * 100_000, "a", 1, 7, "default"), {}, "run_id is text of 100000 characters, not an id (text of 1 to 4096"),
    (("run_1", "a", "1", 7, "default"), {}, "attempt is '1', not a whole number"),
    (("run_1", "a", True, 7, "default"), {}, "attempt is bool True, not a whole number"),
    (("run_1", "a", 1.5, 7, "default"), {}, "attempt is float 1.5"),
    (("run_1", "a", 0, 7, "default"), {}, "attempt is 0; attempts count from 1"),
    (("run_1", "a", 1, [7], "default"), {}, "token is list [7], not a whole number"),
    (("run_1", "a", 1, 7, {"t": 1}), {}, "tenant is dict {'t': 1}, not a tenant's name"),
])
def test_a_malformed_step_message_is_refused_in_one_bounded_line_before_the_engine_sees_it(caplog, args, kwargs,
                                                                                           says):
    # Given a step actor, and a message on its queue that is not a step message's shape (forged, corrupt, or
    # another application's)
    broker = embedded_broker()
    engine = _Recording()
    try:
        actor = declare_step_actor(broker, engine, queue_name="t-actors-malformed")
        # When it is handled
        with caplog.at_level(logging.WARNING, logger="sealflow.actors"):
            actor.fn(*args, **kwargs)
    finally:
        broker.close()
    # Then the engine never sees it, the refusal is counted, and one warning line (no traceback, bounded even
    # for a huge argument) says what is wrong
    assert engine.handled == [] and engine.refusals == ["malformed"]
    (record,) = [r for r in caplog.records if r.name == "sealflow.actors"]
    text = record.getMessage()
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert text.startswith("refused a malformed step message ") and says in text, text
    assert text.endswith("nothing was read or run") and len(text) < 500


@pytest.mark.parametrize(("args", "kwargs"), [
    (("run_1", "a", 1, 7, "default"), {}),
    (("run_1", "a", 1, 7), {"tenant": "default"}),
    (("run_1", "a@compensate", 2, 2**62, None), {}),
])
def test_a_step_message_of_the_right_shape_goes_to_the_engine(args, kwargs):
    # Given a step actor / When a step message of the right shape is handled (positional, or the tenant named)
    broker = embedded_broker()
    engine = _Recording()
    try:
        declare_step_actor(broker, engine, queue_name="t-actors-wellformed").fn(*args, **kwargs)
    finally:
        broker.close()
    # Then the engine handles it, with its five ids
    assert engine.handled == [(*args, kwargs.get("tenant"))[:5]] and engine.refusals == []


class _CarriesOnce:
    """An engine whose first message makes its run's next step due (carried on), and whose second ends the run."""

    def __init__(self):
        self.handled: list[tuple] = []

    def handle(self, *message, carry=False, claimed=None) -> Handled:
        self.handled.append(message)
        if len(self.handled) == 1:
            return Handled((Message("run_1", "b", 1, 8, "default"),), None, "running")
        return Handled((), None, "completed")


class _Watch:
    """A step log as the step actor sees it (runtime/actors.CarryWatch): what it was told, in order."""

    def __init__(self):
        self.told: list[tuple] = []

    def carried(self, first, now) -> None:
        self.told.append(("carried", first, now))

    def ended(self, first, state) -> None:
        self.told.append(("ended", first, state))


def test_the_step_actor_tells_its_watch_the_step_it_carried_on_to_and_the_runs_state_at_the_end():
    # Given a step actor with a watch, whose engine carries the message's run on to step b, which ends the run
    broker = embedded_broker()
    engine, watch = _CarriesOnce(), _Watch()
    try:
        # When a message of step a is handled
        declare_step_actor(broker, engine, queue_name="t-actors-watch", watch=watch).fn("run_1", "a", 1, 7, "default")
    finally:
        broker.close()
    # Then the watch heard that the message went on to step b, then that it ended with the run completed
    assert [m[:2] for m in engine.handled] == [("run_1", "a"), ("run_1", "b")]
    assert watch.told == [("carried", ("run_1", "a", 1), ("run_1", "b", 1)),
                          ("ended", ("run_1", "a", 1), "completed")]
