"""Retention for workers: the configuration's retention: section prunes finished runs on a schedule."""

from __future__ import annotations

import pytest
from test_store_suite import T0, submit_and_claim, succeed_and_go

from sealflow.core.errors import ConfigError
from sealflow.operations.retention import Retention
from sealflow.store import open_store
from sealflow.store.auditchain import verify


def test_given_a_retention_section_when_read_then_ages_are_seconds_and_mistakes_are_named():
    got = Retention.from_config({"retention": {"finished_runs": "30d", "every": "10m"}})
    assert (got.older_than, got.every, got.dead_letters) == (30 * 86_400, 600, False)
    assert Retention.from_config({}) is None
    with pytest.raises(ConfigError, match="retention.finished_runs"):
        Retention.from_config({"retention": {"finished_runs": "soon"}})
    with pytest.raises(ConfigError, match="finished_runs"):
        Retention.from_config({"retention": {"keep": "30d"}})


def test_given_a_worker_retention_when_it_is_time_then_old_finished_runs_go_once_per_interval(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/state.db")
    try:
        claimed, _ = submit_and_claim(store, "old", T0)
        store.commit(succeed_and_go(claimed, next_step=None, state="completed", now=T0), T0)
        retention = Retention.from_config({"retention": {"finished_runs": "30d"}})
        now = T0 + 31 * 86_400
        assert retention.maybe_prune(store, now, "worker:test") == 1
        assert retention.maybe_prune(store, now, "worker:test") == 0  # not again within `every`
        assert store.list_runs() == [] and verify(store).ok
    finally:
        store.close()
