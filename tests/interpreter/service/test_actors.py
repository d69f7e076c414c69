"""The step actor (service/actors.py): what it logs when handling a message fails. Given / When / Then."""

from __future__ import annotations

import logging

import pytest

from sealflow.interpreter.service.actors import declare_step_actor, embedded_broker
from sealflow.interpreter.store.errors import StoreUnavailable


class _Failing:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def handle(self, *message, carry=False):
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
