"""Issue 9, defect 1, end to end: a real `sealflow worker --trust POLICY` trusts its own policy only.

Given two key pairs, a genuine trust policy naming the genuine key `ops` and an attacker's policy naming
the attacker's key `ops`, and a worker process started with the genuine policy, when the attacker signs
v2 with their key and submits it with their own policy, then the worker refuses the run before its first
effect (dead-lettered, audited), v2 never becomes active, and the genuine v1 still runs (it is no
rollback). Needs Redis at 127.0.0.1:6379 (skipped without it; CI turns skips into failures).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from test_worker_redis import ACTIONS, ROOT, WORKFLOW, Deployment, redis_or_skip


@pytest.fixture
def deployment(tmp_path):
    d = Deployment(tmp_path, redis_or_skip())
    yield d
    d.close()


def keys(d: Deployment, name: str) -> Path:
    """A folder with a key pair, a policy naming its public key `ops`, and crash v1 and v2 signed with it."""
    folder = d.tmp / name
    folder.mkdir()
    assert d.sealflow("keygen", "--out", str(folder / "ops")).returncode == 0
    (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    shutil.copy(WORKFLOW, folder / "crash.v1.yaml")
    (folder / "crash.v2.yaml").write_text(WORKFLOW.read_text().replace("version: 1", "version: 2", 1))
    for f in ("crash.v1.yaml", "crash.v2.yaml"):
        assert d.sealflow("sign", str(folder / f), "--key", str(folder / "ops.pem")).returncode == 0
    return folder


def submit(d: Deployment, folder: Path, file: str) -> str:
    done = d.sealflow("submit", str(folder / file), "--trust", str(folder / "policy.yaml"), "--store", d.store,
                      "--actions", str(ACTIONS))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def wait_final(d: Deployment, run_id: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = d.run_states([run_id]).get(run_id)
        if state in ("completed", "failed"):
            return state
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} not final: {d.run_states([run_id])}; log: {d.log('w')[-3000:]}")


def test_given_a_worker_with_the_genuine_policy_when_an_attacker_signs_as_ops_then_refused(deployment):
    d = deployment
    genuine, mallory = keys(d, "genuine"), keys(d, "mallory")
    with open(d.tmp / "w.out", "w") as out, open(d.tmp / "w.err", "w") as err:
        d.workers["w"] = subprocess.Popen(d.worker_args("--allow-open", "--trust", str(genuine / "policy.yaml")),
                                          cwd=ROOT, env=d.env, stdout=out, stderr=err, text=True)
    d.wait_ready("w")
    # Given the genuine v1 ran on the worker
    first = submit(d, genuine, "crash.v1.yaml")
    assert wait_final(d, first) == "completed"
    effects = len(d.table("effects"))
    # When the attacker submits v2, signed with their own key, with their own policy naming that key "ops"
    forged = submit(d, mallory, "crash.v2.yaml")
    # Then the worker refuses it before its first effect: failed, unauthorized, dead-lettered
    assert wait_final(d, forged) == "failed"
    assert len(d.table("effects")) == effects
    conn = sqlite3.connect(f"file:{d.tmp / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        error_class, = conn.execute("SELECT error_class FROM runs WHERE id = ?", (forged,)).fetchone()
        dead = conn.execute("SELECT reason FROM dead_letters WHERE run_id = ?", (forged,)).fetchone()
        audited = conn.execute("SELECT detail FROM audit WHERE run_id = ? AND event = 'trust_refused'",
                               (forged,)).fetchall()
    finally:
        conn.close()
    assert error_class == "unauthorized" and dead is not None and "trust policy refuses" in dead[0]
    assert audited and json.loads(audited[0][0])["signer"].startswith("key:")
    assert d.log("w").count(f"run {forged} executes crash v2") == 1  # logged once
    # And v2 never became active; the genuine v1 is active and runs again (no rollback)
    shown = d.sealflow("definitions", "show", "crash", "--store", d.store, "--json")
    records = {r["version"]: r for r in json.loads(shown.stdout)}
    assert records[1]["active"] and not records[2]["active"]
    again = submit(d, genuine, "crash.v1.yaml")
    assert wait_final(d, again) == "completed"
