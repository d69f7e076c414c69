"""A PostgreSQL store whose disk fills up: clear errors naming the store and the cause, nothing half-written,
and runs go on once there is room. The database lives in a tablespace on a small tmpfs of its own (mounted
here: this needs root, as the CI machine is; elsewhere the test skips saying so) on a private PostgreSQL.
Given / When / Then."""

from __future__ import annotations

import base64
import collections
import logging
import os
import random
import subprocess
import tempfile

import pytest
from interp_helpers import S, make_plan
from private_services import PrivatePostgres

from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import StoreError, auditchain, open_store


@pytest.fixture
def small_disk():
    """A 16 MB tmpfs owned by the postgres user; grown with ``grow()``."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the database needs root")
    mnt = tempfile.mkdtemp(prefix="sealflow-pgfull-")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt], capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    import pwd

    owner = pwd.getpwnam("postgres")
    os.chown(mnt, owner.pw_uid, owner.pw_gid)

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=256m", mnt], check=True)

    yield mnt, grow
    subprocess.run(["umount", "-l", mnt], check=False)
    os.rmdir(mnt)


def test_a_full_disk_is_a_clear_error_nothing_is_half_written_and_runs_go_on_with_room(small_disk, caplog):
    import psycopg

    mnt, grow = small_disk
    pg = PrivatePostgres()
    try:
        # Given a store in a database on a 16 MB disk, and runs whose steps each write about 200 KB that
        # does not compress
        with psycopg.connect(pg.url, autocommit=True) as c:
            c.execute(f"CREATE TABLESPACE small LOCATION '{mnt}'")
            c.execute("CREATE DATABASE sf TABLESPACE small")
        store = open_store(pg.url.rsplit("/", 1)[0] + "/sf?migrate=1")
        registry = Registry()

        @action("t.blob", registry=registry)
        def blob(ctx):
            return {"blob": base64.b64encode(random.randbytes(150_000)).decode()}

        plan = make_plan(S("a", "action", action="t.blob"), S("b", "action", action="t.blob"))
        rt = Runtime(store, registry, {}, rng=random.Random(7), worker_timeout_ms=20)
        try:
            # When runs go on until the disk is full
            errors, stalled = [], None
            with caplog.at_level(logging.ERROR):
                for _ in range(200):
                    try:
                        status = rt.run(plan, {}, initiator="user:ana")
                    except StoreError as exc:  # a submit that found the disk full
                        errors.append(str(exc))
                        break
                    if status.state != "completed":
                        stalled = status
                        break
            # Then the failure names the store and the cause, once per failed step message, without a traceback
            said = errors + [r.getMessage() for r in caplog.records if r.name == "sealflow.actors"]
            assert said, "the disk never filled up"
            assert all("PostgreSQL store" in m and "No space left on device" in m for m in said), said
            assert all(r.exc_info is None for r in caplog.records if r.name == "sealflow.actors")
            # and nothing is half-written: a run that could not go on stays where its last commit left it
            if stalled is not None:
                assert stalled.state == "running"
                assert [a.state for a in stalled.attempts][-1] in ("running", "scheduled")
            # When there is room again / Then new runs complete, and the audit chain verifies
            grow()
            states = [rt.run(plan, {}, initiator="user:ana").state for _ in range(3)]
            assert states == ["completed"] * 3
            assert auditchain.verify(store).ok
            assert collections.Counter(r.state for r in store.list_runs(limit=500))["completed"] >= 3
        finally:
            rt.close()
            store.close()
    finally:
        pg.close()
