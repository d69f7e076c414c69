"""The redacting wrapper of sys.stdout / sys.stderr (interpreter/core/redacted_output.py) and the log record
factory (interpreter/core/redaction.py): secrets blanked out of what a process writes, a secret split over
writes included. The end-to-end proof is tests/e2e/test_output_redaction.py."""

from __future__ import annotations

import io
import logging
import sys
import uuid

from sealflow.core import redacted_output
from sealflow.core.redacted_output import RedactingStream
from sealflow.core.redaction import REDACTOR, Redactor

SECRET = "pw-7c1e9b0d55aa-secret"


def stream() -> tuple[RedactingStream, io.StringIO, Redactor]:
    red = Redactor()
    red.remember("db_password", SECRET)
    raw = io.StringIO()
    return RedactingStream(raw, red), raw, red


def test_given_a_known_secret_when_written_whole_then_the_stream_gets_its_name():
    wrapped, raw, _ = stream()
    assert wrapped.write(f"connecting with {SECRET}\n") == len(f"connecting with {SECRET}\n")
    assert raw.getvalue() == "connecting with [redacted:db_password]\n"


def test_given_a_secret_split_over_two_writes_then_neither_half_reaches_the_stream():
    wrapped, raw, _ = stream()
    # When the secret arrives in two pieces, the first flushed
    wrapped.write("token: " + SECRET[:6])
    wrapped.flush()
    # Then what could be its start is held back, not written
    assert raw.getvalue() == "token: "
    wrapped.write(SECRET[6:] + " ok\n")
    assert raw.getvalue() == "token: [redacted:db_password] ok\n"


def test_given_text_that_only_looks_like_the_start_of_a_secret_then_it_is_written_with_the_next_write():
    wrapped, raw, _ = stream()
    wrapped.write("prefix pw-7c")  # the start of the secret
    assert raw.getvalue() == "prefix "
    wrapped.write("hello\n")  # ... but it goes on otherwise
    assert raw.getvalue() == "prefix pw-7chello\n"
    # and what is still held at the end is written when released
    wrapped.write("last pw")
    wrapped.release()
    assert raw.getvalue().endswith("last pw")


def test_given_no_secret_known_then_writes_pass_through_unchanged():
    raw = io.StringIO()
    wrapped = RedactingStream(raw, Redactor())
    wrapped.write("pw-7c1e9b0d55aa-secret, and nothing is known")
    assert raw.getvalue() == "pw-7c1e9b0d55aa-secret, and nothing is known"
    assert wrapped.getvalue() == raw.getvalue()  # any other attribute is the real stream's


def test_given_an_armed_process_when_a_secret_becomes_known_then_stdout_and_stderr_redact_until_lifted(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    secret = f"armed-{uuid.uuid4().hex}"
    # Given a process that armed the guard
    lift = redacted_output.arm()
    try:
        # When a secret becomes known, then what is printed has it blanked out
        REDACTOR.remember("armed_token", secret)
        assert isinstance(sys.stdout, RedactingStream) and isinstance(sys.stderr, RedactingStream)
        print("out", secret)
        print("err", secret, file=sys.stderr)
    finally:
        lift()
    # And lifting the guard puts the streams back
    assert sys.stdout is out and sys.stderr is err
    assert out.getvalue() == "out [redacted:armed_token]\n" and err.getvalue() == "err [redacted:armed_token]\n"


def test_given_a_known_secret_when_any_logger_logs_it_then_the_record_is_redacted_as_it_is_made():
    secret = f"logged-{uuid.uuid4().hex}"
    REDACTOR.remember("log_token", secret)
    # Given a handler of an action's own logger (not a sealflow logger), holding its own stream
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    mine = logging.getLogger(f"vendor.{uuid.uuid4().hex}")
    mine.addHandler(handler)
    mine.propagate = False
    try:
        # When it logs the secret as an argument, in the message and in an exception
        mine.warning("token %s", secret)
        try:
            raise ValueError(f"refused {secret}")
        except ValueError:
            mine.exception("failed")
    finally:
        mine.removeHandler(handler)
    # Then the handler wrote only redacted text
    text = sink.getvalue()
    assert secret not in text
    assert "token [redacted:log_token]" in text and "ValueError: refused [redacted:log_token]" in text
