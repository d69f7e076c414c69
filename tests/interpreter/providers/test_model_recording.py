"""Record model calls to JSONL and replay them with no provider; an unrecorded request fails loudly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from model_helpers import KEY

from sealflow.core.errors import StepError
from sealflow.providers.base import ModelRequest, ToolSpec
from sealflow.providers.loader import load_models
from sealflow.providers.recording import (
    RecordingProvider,
    RecordingRegistry,
    ReplayMiss,
    ReplayProvider,
    ReplayRegistry,
    request_key,
)

SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["high", "low"]}}}
ROOT = Path(__file__).resolve().parents[3]


def live(server):
    entry = {"provider": "openai", "base_url": server.base_url, "api_key": {"secret": "K"}}
    return load_models({"models": {"fast": {**entry, "model": "gpt-4o-mini"},
                                   "down": {**entry, "model": "status-503"}}}, {"K": KEY})


def test_a_recording_replays_the_same_answers_with_no_provider(server, tmp_path):
    # Given calls recorded against the live (fake) server, one of which failed
    path = tmp_path / "calls.jsonl"
    recording = RecordingRegistry(live(server), path)
    request = ModelRequest(model="fast", prompt="classify acme", output_schema=SCHEMA, deadline=time.time() + 60,
                           idempotency_key="run:1", tools=(ToolSpec("kb.search"),))
    first = recording.get("fast").complete(ModelRequest(model="fast", prompt="classify acme", output_schema=SCHEMA))
    tool = recording.get("fast").complete(request)
    with pytest.raises(StepError):
        recording.get("down").complete(ModelRequest(model="down", prompt="p"))
    assert len(path.read_text().splitlines()) == 3
    # When they are replayed (no server involved; deadline and idempotency key may differ)
    server_calls = len(server.requests)
    replay = ReplayRegistry(ReplayProvider(path))
    again = replay.get("fast").complete(ModelRequest(model="fast", prompt="classify acme", output_schema=SCHEMA))
    tool_again = replay.get("fast").complete(ModelRequest(**{**request.__dict__, "deadline": 99.0,
                                                             "idempotency_key": "run:2"}))
    # Then the answers are the recorded ones, errors included, and the server saw nothing
    assert again == first and tool_again.tool_call == tool.tool_call
    with pytest.raises(StepError) as caught:
        replay.get("down").complete(ModelRequest(model="down", prompt="p"))
    assert caught.value.error_class == "unavailable"
    assert len(server.requests) == server_calls and replay.known() == ["down", "fast"]


def test_a_request_that_was_not_recorded_fails_loudly(server, tmp_path):
    path = tmp_path / "calls.jsonl"
    RecordingProvider(live(server).get("fast"), path).complete(ModelRequest(model="fast", prompt="one"))
    replay = ReplayProvider(path)
    with pytest.raises(ReplayMiss, match="not in the recording") as caught:
        replay.complete(ModelRequest(model="fast", prompt="two"))
    assert not isinstance(caught.value, StepError) and replay.misses
    with pytest.raises(ReplayMiss, match="no model recording"):
        ReplayProvider(tmp_path / "missing.jsonl")


def test_repeated_requests_replay_in_recorded_order(tmp_path):
    class Flaky:
        name = "flaky"
        calls = 0

        def complete(self, request):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise StepError("rate_limited", "slow down", retry_after=1.5)
            from sealflow.providers.base import ModelResult
            return ModelResult(output="ok", text="ok")

    path = tmp_path / "calls.jsonl"
    recorder = RecordingProvider(Flaky(), path)
    request = ModelRequest(model="m", prompt="p")
    with pytest.raises(StepError):
        recorder.complete(request)
    recorder.complete(request)
    replay = ReplayProvider(path)
    with pytest.raises(StepError) as caught:
        replay.complete(request)
    assert caught.value.retry_after == 1.5
    assert replay.complete(request).output == "ok" and replay.complete(request).output == "ok"


def test_the_key_and_known_secrets_never_reach_the_recording(server, tmp_path):
    # Given a prompt that (wrongly) carries the API key, and a gateway that echoes it in an error
    path = tmp_path / "calls.jsonl"
    registry = live(server)  # resolving the key made the process-wide redactor remember it
    recorder = RecordingRegistry(registry, path)
    recorder.get("fast").complete(ModelRequest(model="fast", prompt=f"my key is {KEY}"))
    echo = load_models({"models": {"echo": {"provider": "openai", "model": "echo-key", "base_url": server.base_url,
                                            "api_key": {"secret": "K"}}}}, {"K": KEY})
    with pytest.raises(StepError):
        RecordingRegistry(echo, path).get("echo").complete(ModelRequest(model="echo", prompt="p"))
    # Then the recording holds neither
    text = path.read_text()
    assert KEY not in text and "redacted" in text.lower()
    assert all("key" in json.loads(line) for line in text.splitlines())


def test_request_keys_ignore_deadline_and_idempotency_key_only():
    a = ModelRequest(model="m", prompt="p", deadline=1.0, idempotency_key="x")
    assert request_key(a) == request_key(ModelRequest(model="m", prompt="p"))
    assert request_key(a) != request_key(ModelRequest(model="m", prompt="p", temperature=0.5))


def test_the_pytest_plugin_replays_and_fails_a_test_on_a_miss(tmp_path):
    # Given a user's project with a recording and the plugin enabled in its conftest
    request = ModelRequest(model="fast", prompt="hello")
    from sealflow.providers.base import ModelResult

    class Canned:
        name = "canned"

        def complete(self, request):
            return ModelResult(output="hi there", text="hi there")

    RecordingProvider(Canned(), tmp_path / "rec.jsonl").complete(request)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["sealflow.testing.pytest_plugin"]\n')
    (tmp_path / "test_flow.py").write_text(textwrap.dedent("""
        from sealflow.providers.base import ModelRequest

        def test_recorded(model_replay):
            providers = model_replay("rec.jsonl")
            assert providers.get("fast").complete(ModelRequest(model="fast", prompt="hello")).output == "hi there"

        def test_not_recorded(model_replay):
            providers = model_replay("rec.jsonl")
            try:
                providers.get("fast").complete(ModelRequest(model="fast", prompt="something new"))
            except Exception:
                pass  # even a workflow that swallows the error fails the test
    """))
    # When its tests run
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    # Then the recorded call passes and the new one fails the test, naming the recording
    assert "1 error" in done.stdout and "ERROR test_flow.py::test_not_recorded" in done.stdout, done.stdout
    assert "model calls missing from the recording" in done.stdout
