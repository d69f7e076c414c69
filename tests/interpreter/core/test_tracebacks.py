"""An action's exception as a failed attempt keeps it: its bounded traceback and where in the action it happened."""

from __future__ import annotations

import json
import re

from interp_helpers import line_of

from sealflow.core import tracebacks
from sealflow.core.errors import StepError

HERE = "tests/interpreter/core/test_tracebacks.py"


def lookup(d):
    return d["missing"]


def greet(name):
    return lookup({"name": name})


def raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    raise AssertionError("it did not raise")


def test_a_failure_names_the_innermost_frame_of_the_users_code_and_keeps_each_frame_with_its_source():
    # Given an exception raised two calls deep in code outside sealflow
    exc = raised(greet, "ann")
    # When it is kept as a failed attempt keeps it
    error_class, message, retry_after, trace = tracebacks.failure(exc)
    # Then the one-line message names the file (relative to here), the line and the function
    where = f"{HERE}:{line_of(lookup, 'missing')} in lookup"
    assert (error_class, message, retry_after) == ("internal", f"KeyError: 'missing' ({where})", None)
    # and the traceback lists each frame as file:line in function with its source line, the exception last
    assert f"  {HERE}:{line_of(greet, 'lookup(')} in greet\n    return lookup({{\"name\": name}})" in trace
    assert f"  {where}\n    return d[\"missing\"]" in trace
    assert trace.startswith("Traceback (most recent call last):") and trace.endswith("KeyError: 'missing'")


def test_a_classified_step_error_keeps_its_message_and_no_traceback():
    # Given an action's deliberate, classified failure
    exc = raised(lambda: (_ for _ in ()).throw(StepError("rate_limited", "slow down", retry_after=2.0)))
    # When it is kept / Then it is as the action said, with no traceback and no location
    assert tracebacks.failure(exc) == ("rate_limited", "slow down", 2.0, None)


def test_an_exception_classified_by_its_type_keeps_its_message_and_its_traceback():
    # Given an action whose call timed out (a TimeoutError: the class timeout, retried where the policy says)
    def call():
        raise TimeoutError("the CRM did not answer")

    # When it is kept / Then its message is as it was (no location), and its traceback is kept
    error_class, message, _, trace = tracebacks.failure(raised(call))
    assert (error_class, message) == ("timeout", "the CRM did not answer")
    assert f"{HERE}:{line_of(call, 'raise')} in call" in trace


def test_the_frames_of_the_library_an_action_called_are_kept_but_the_location_is_the_actions_own_line():
    # Given an action passing bad JSON to the standard library
    def parse():
        return json.loads("{not json")

    exc = raised(parse)
    # When it is kept
    _, message, _, trace = tracebacks.failure(exc)
    # Then the message names the action's line, not json's, while the traceback shows json's frames too
    assert message.endswith(f"({HERE}:{line_of(parse, 'json.loads')} in parse)")
    assert re.search(r"json/decoder\.py:\d+ in raw_decode", trace)


def test_a_cause_is_shown_before_the_exception_it_caused():
    # Given an exception raised from another one
    def convert():
        try:
            lookup({})
        except KeyError as exc:
            raise ValueError("no such customer") from exc

    trace = tracebacks.capture(raised(convert)).text
    # Then both are shown, the cause first, linked as Python links them
    first, second = trace.split("The above exception was the direct cause of the following exception:")
    assert "KeyError: 'missing'" in first and second.rstrip().endswith("ValueError: no such customer")


def test_a_deep_recursion_keeps_the_innermost_frames_and_says_how_many_were_cut():
    # Given an exception raised 60 calls deep (62 frames, with the call that raised it and this test)
    def down(n):
        if n == 0:
            raise RuntimeError("bottom")
        return down(n - 1)

    got = tracebacks.capture(raised(down, 60))
    # Then at most 20 frames are kept, the innermost, and the cut is said
    frames = re.findall(rf"^  {re.escape(HERE)}:\d+ in down$", got.text, flags=re.M)
    assert len(frames) == tracebacks.MAX_FRAMES
    assert "... 42 outer frame(s) cut (at most 20 are kept)" in got.text
    assert got.text.endswith("RuntimeError: bottom")


def test_a_huge_message_is_bounded_keeping_the_end_of_the_trace():
    # Given an exception whose message is a megabyte, and long source lines
    exc = raised(lambda: (_ for _ in ()).throw(ValueError("x" * 1_000_000)))
    # When it is kept
    text = tracebacks.capture(exc).text
    # Then the trace stays within its bound and says that it was cut
    assert len(text) <= tracebacks.MAX_CHARS + 200
    assert "more characters" in text
    small = tracebacks.capture(raised(down_to, 200), max_chars=1000).text
    assert len(small) <= 1100 and small.startswith("... ") and "character(s) cut from the start" in small
    assert small.endswith("RuntimeError: deep")


def down_to(n):
    if n == 0:
        raise RuntimeError("deep")
    return down_to(n - 1)


def test_an_exception_whose_text_cannot_be_made_still_fails_the_attempt_with_a_trace():
    # Given an exception whose str() raises
    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    def odd():
        raise Odd()

    # When it is kept / Then its traceback still names the frame, and nothing raises
    trace = tracebacks.capture(raised(odd)).text
    assert f"{HERE}:{line_of(odd, 'raise Odd')} in odd" in trace
