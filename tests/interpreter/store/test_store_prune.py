"""Retention: prune deletes finished runs older than the cutoff and nothing else, on every backend, and
the audit chain stays verifiable with a checkpoint event carrying the hash of what went."""

from __future__ import annotations

import json

import pytest
from test_store_suite import T0, submit_and_claim, succeed_and_go

from sealflow.cli import main
from sealflow.store import DeadLetterSpec, open_store
from sealflow.store.auditchain import verify
from sealflow.store.errors import NotFound

DAY = 86_400.0


def _finish(store, run_id, now, *, state="completed", dead=None):
    claimed, _ = submit_and_claim(store, run_id, now)
    store.commit(succeed_and_go(claimed, next_step=None, state=state, now=now, dead=dead), now)


def test_given_old_and_new_runs_when_pruned_then_only_old_finished_ones_go_and_the_chain_verifies(store):
    # Given two runs finished 40 days ago, one finished yesterday, one old but still running
    _finish(store, "old1", T0)
    _finish(store, "old2", T0 + 1, state="failed")
    _finish(store, "new", T0 + 39 * DAY)
    submit_and_claim(store, "live", T0)
    now = T0 + 40 * DAY
    # When finished runs older than 30 days are pruned
    report = store.prune_runs(now - 30 * DAY, now, actor="operator:test")
    # Then exactly the two old finished runs are gone, with their attempts and outbox rows
    assert report.total == 2 and report.runs == {"default": 2}
    remaining = {r.id for r in store.list_runs(limit=100)}
    assert remaining == {"new", "live"}
    assert store.attempts("old1") == [] and store.outbox("old2") == []
    assert store.attempts("live") and store.attempts("new")
    # And the audit chain verifies, its last event a checkpoint carrying the hash of what was pruned
    chain = verify(store)
    assert chain.ok, chain.breaks
    (pruned,) = [e for e in store.audit_chain("default") if e[11] == "store.pruned"]
    detail = json.loads(pruned[19])
    assert detail["runs"] == 2 and detail["sha256"] == report.hashes["default"][0]
    # And pruning again removes nothing more
    assert store.prune_runs(now - 30 * DAY, now).total == 0


def test_given_a_run_in_the_dead_letter_queue_when_pruned_then_it_stays_unless_asked(store):
    # Given an old run that failed into the dead-letter queue
    dead = DeadLetterSpec(step_id="a", reason="boom", error_class="Boom", fingerprint="fp")
    _finish(store, "dlq", T0, state="failed", dead=dead)
    now = T0 + 40 * DAY
    # When pruned without --include-dead-letters, then it stays (it may be redriven)
    report = store.prune_runs(now - 30 * DAY, now)
    assert report.total == 0 and report.kept_dead_letters == 1 and store.get_run("dlq") is not None
    # When pruned with it, then it goes with its dead letter
    assert store.prune_runs(now - 30 * DAY, now, include_dead_letters=True).total == 1
    assert store.dead_letter("dlq") is None
    assert verify(store).ok


def test_given_a_store_with_old_runs_when_the_cli_prunes_then_audit_verify_stays_green(tmp_path, capsys):
    # Given a SQLite store with a run finished long ago (1970s timestamps are older than any cutoff)
    url = f"sqlite:///{tmp_path}/state.db"
    s = open_store(url)
    _finish(s, "ancient", T0 - 400 * DAY)
    s.close()
    # When `sealflow store prune --older-than 30d --dry-run`, then nothing goes
    assert main(["store", "prune", "--older-than", "30d", "--dry-run", "--store", url]) == 0
    assert "would delete 1 finished run " in capsys.readouterr().out
    # When it runs for real
    assert main(["store", "prune", "--older-than", "30d", "--store", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Then the run is gone and `sealflow audit verify` is green
    assert out["total"] == 1 and out["checkpoints"]["default"][0].startswith("sha256:")
    assert main(["audit", "verify", "--store", url]) == 0
    assert "ok      tenant default" in capsys.readouterr().out


def test_given_a_bad_age_when_pruning_then_a_usage_error_says_how_to_write_one(tmp_path, capsys):
    code = main(["store", "prune", "--older-than", "thirty", "--store", f"sqlite:///{tmp_path}/s.db"])
    assert code == 2 and "30s" in capsys.readouterr().err
    # And an age from before the epoch (a cutoff in the year -273788674) is refused, not a prune of nothing
    code = main(["store", "prune", "--older-than", "99999999999d", "--store", f"sqlite:///{tmp_path}/s.db"])
    err = capsys.readouterr().err
    assert code == 2 and "'99999999999d': the age must be at most" in err


def test_given_an_access_policy_then_only_its_operators_prune_the_store(tmp_path, capsys):
    # Given a store with an old finished run, and a policy where user:ana holds every permission of tenant
    # acme and user:ops is an operator
    url = f"sqlite:///{tmp_path}/state.db"
    s = open_store(url)
    _finish(s, "ancient", T0 - 400 * DAY)
    s.close()
    policy = tmp_path / "access.yaml"
    policy.write_text("operators: [user:ops]\ntenants:\n  acme:\n"
                      "    roles: {admin: ['runs:*', 'dlq:*', 'audit:read']}\n    members: {user:ana: [admin]}\n")
    # When the tenant's member prunes, then it is refused (pruning deletes every tenant's runs), nothing goes
    args = ["store", "prune", "--older-than", "30d", "--store", url, "--access", str(policy)]
    assert main([*args, "--as", "user:ana"]) == 1
    assert "user:ana may not prune the store's finished runs" in capsys.readouterr().err
    assert open_store(url).get_run("ancient").state == "completed"
    # When the operator prunes, then the run goes and the audit checkpoint names the operator
    assert main([*args, "--as", "user:ops"]) == 0
    s = open_store(url)
    with pytest.raises(NotFound):
        s.get_run("ancient")
    assert [e.actor for e in s.audit() if e.event == "store.pruned"] == ["user:ops"]
    s.close()
