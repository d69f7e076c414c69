"""Bounded disk and clear I/O errors on the SQLite store: the WAL stays small under sustained load, and a
full or read-only disk is a message naming the store and the cause (never a traceback), with nothing lost."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from test_store_suite import T0, new_run, submit_and_claim, succeed_and_go

from sealflow.cli import main
from sealflow.store import StoreUnavailable, open_store
from sealflow.store.sqlite.store import SqliteStore, wal_size

LIMIT = 256 * 1024


def _one_run(store, i: int, now: float) -> None:
    claimed, _ = submit_and_claim(store, f"r{i}", now)
    store.commit(succeed_and_go(claimed, next_step=None, state="completed", now=now), now)


def test_given_a_small_wal_limit_when_hundreds_of_runs_are_written_then_the_wal_stays_bounded(tmp_path):
    # Given a store whose WAL limit is 256 KiB (about two runs' worth of pages); without the bound, 400
    # runs leave a WAL of about 45 MB
    store = SqliteStore(str(tmp_path / "state.db"), wal_limit=LIMIT)
    try:
        # When 400 runs are submitted, claimed and finished
        biggest = 0
        for i in range(400):
            _one_run(store, i, T0 + i)
            biggest = max(biggest, wal_size(store.path))
        # Then the WAL never grew past a small multiple of the limit, and ends under it
        assert biggest < 2 * LIMIT, f"the WAL reached {biggest} bytes"
        assert wal_size(store.path) <= LIMIT
        assert len(store.list_runs(limit=1000)) == 400
    finally:
        store.close()
    # and after close nothing is left in the WAL
    assert wal_size(str(tmp_path / "state.db")) == 0


def _checkpoint_sequence(path: str) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one each time the WAL starts over."""
    with open(path + "-wal", "rb") as fh:
        return int.from_bytes(fh.read(16)[12:16], "big")


def test_given_a_wal_past_its_limit_when_the_store_bounds_it_then_it_starts_over_in_the_same_file(tmp_path):
    # Given a store with a small WAL limit and no background checkpoints: only the store's bound resets it
    store = SqliteStore(str(tmp_path / "state.db"), wal_limit=LIMIT, checkpoint_interval=0)
    fired: list[tuple[int, int]] = []
    real = store._bound_wal

    def bound(c):
        before = wal_size(store.path)
        real(c)
        if before > LIMIT:
            fired.append((before, wal_size(store.path)))

    store._bound_wal = bound
    try:
        _one_run(store, 0, T0)
        first = _checkpoint_sequence(store.path)
        # When enough runs are written to pass the limit again and again
        for i in range(1, 100):
            _one_run(store, i, T0 + i)
        # Then each time the WAL was checkpointed and restarted in its own file, not cut to zero (writing over
        # the file's blocks costs less than growing it again), and the next commit cut it back to the limit
        assert len(fired) >= 3, fired
        assert all(after > 0 for _, after in fired), fired
        assert _checkpoint_sequence(store.path) >= first + len(fired) - 1
        assert wal_size(store.path) <= LIMIT
        assert len(store.list_runs(limit=1000)) == 100
    finally:
        store.close()


def test_given_a_reader_holding_a_snapshot_when_it_lets_go_then_the_wal_is_cut_back_again(tmp_path):
    # Given a store with a small WAL limit, and another process's reader holding one snapshot open while
    # 50 runs are written (no checkpoint can reset the WAL past a reader's snapshot, so it grows)
    store = SqliteStore(str(tmp_path / "state.db"), wal_limit=LIMIT)
    reader = sqlite3.connect(str(tmp_path / "state.db"))
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM runs").fetchone()
        for i in range(50):
            _one_run(store, i, T0 + i)
        grown = wal_size(store.path)
        assert grown > LIMIT, "the reader's snapshot should have kept the WAL from being reset"
        # When the reader lets go and writing goes on
        reader.execute("COMMIT")
        settled = False
        for i in range(50, 400):  # bounded: a checkpoint is retried on the next commit past its pause
            _one_run(store, i, T0 + i)
            if wal_size(store.path) <= LIMIT:
                settled = True
                break
            threading.Event().wait(0.01)
        # Then the WAL is cut back under the limit, and nothing written meanwhile is lost
        assert settled, f"the WAL stayed at {wal_size(store.path)} bytes after the reader let go"
        assert len(store.list_runs(limit=1000)) == i + 1
    finally:
        reader.close()
        store.close()


def test_given_a_full_disk_when_a_run_is_submitted_then_a_clear_error_names_the_store_and_nothing_is_kept(
        tmp_path, monkeypatch):
    # Given a store whose disk fills up at the next commit
    store = open_store(f"sqlite:///{tmp_path}/state.db")
    real = store._conn

    class FullDisk:
        def __getattr__(self, name):
            return getattr(real, name)

        def execute(self, sql, *args):
            if sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            return real.execute(sql, *args)

    monkeypatch.setattr(store, "_conn", FullDisk())
    try:
        # When a run is submitted
        with pytest.raises(StoreUnavailable) as err:
            store.submit(new_run("full"), T0)
        # Then the message names the store, the cause and what to do; no half-written run is left
        text = str(err.value)
        assert str(tmp_path / "state.db") in text and "disk is full" in text and "free disk space" in text
        monkeypatch.setattr(store, "_conn", real)
        assert store.list_runs() == []
        assert not real.in_transaction
        # and once there is room again the same submit succeeds
        run, created = store.submit(new_run("full"), T0)
        assert created and run.state == "queued"
    finally:
        monkeypatch.setattr(store, "_conn", real)
        store.close()


def test_given_a_read_only_store_file_when_the_cli_opens_it_then_it_says_so_without_a_traceback(
        tmp_path, monkeypatch, capsys):
    # Given a store file SQLite cannot write (read-only; simulated: the tests may run as root)
    path = tmp_path / "state.db"
    open_store(f"sqlite:///{path}").close()
    real_connect = sqlite3.connect

    class ReadOnly(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode") or sql.startswith("BEGIN"):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return super().execute(sql, *args)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: real_connect(*a, factory=ReadOnly, **kw))
    # When a CLI command opens it to write
    code = main(["store", "prune", "--older-than", "1d", "--store", f"sqlite:///{path}"])
    err = capsys.readouterr().err
    # Then it fails with the store named and the cause, not "internal error"
    assert code in (1, 2) and "internal error" not in err and str(path) in err
    assert "readonly" in err and "writable" in err


def test_given_a_file_that_is_not_a_database_when_the_cli_opens_it_as_the_store_then_it_says_so(tmp_path, capsys):
    # Given a --store naming a file that is not a SQLite database (a YAML file given by mistake)
    path = tmp_path / "sealflow-config.yaml"
    path.write_text("models:\n  m: {provider: local}\n" * 50)
    for argv in (("doctor", "--json"), ("status", "r_1"), ("notifications", "list")):
        # When a command opens it
        code = main([*argv, "--store", f"sqlite:///{path}"])
        err = capsys.readouterr().err
        # Then a usage error names the file and what it is not, not "internal error"; the file is untouched
        assert code == 2 and "internal error" not in err and f"{path} is not a SQLite database" in err, argv
    assert path.read_text().startswith("models:")


def test_given_a_store_path_whose_folder_cannot_be_made_or_that_is_a_folder_then_the_cli_says_so(tmp_path, capsys):
    # Given a --store under a regular file (its folder cannot be made, even as root), and one naming a folder
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cases = ((f"sqlite:///{blocker}/state.db", f"its folder {blocker} cannot be made"),
             (f"sqlite:///{tmp_path}", "it is a folder, not a file"))
    for url, says in cases:
        # When a command opens it
        code = main(["runs", "list", "--store", url])
        err = capsys.readouterr().err
        # Then an error names the store and why, not "internal error", and nothing is created
        assert code in (1, 2) and "internal error" not in err and says in err, (url, err)
    assert blocker.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_given_no_wal_limit_when_runs_are_written_then_the_background_checkpoints_keep_the_wal_small(tmp_path):
    # Given a store with the after-commit truncation off (wal_limit=0) and background checkpoints every 20 ms:
    # only the checkpointer thread can keep the WAL from growing (wal_autocheckpoint is off)
    store = SqliteStore(str(tmp_path / "state.db"), wal_limit=0, checkpoint_interval=0.02)
    try:
        # When 400 runs are written, with a pause now and then for the checkpointer to run
        for i in range(400):
            _one_run(store, i, T0 + i)
            if i % 20 == 19:
                threading.Event().wait(0.05)
        # Then the WAL stayed a small fraction of the ~45 MB it reaches without checkpoints
        assert wal_size(store.path) < 8 * 1024 * 1024, f"the WAL is {wal_size(store.path)} bytes"
        assert len(store.list_runs(limit=1000)) == 400
    finally:
        store.close()
