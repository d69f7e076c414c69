"""Record model calls to a JSONL file and serve them back without any provider.

:class:`RecordingProvider` wraps a provider: each call's request and its answer (a result
or a classified error) is appended to the file as one JSON line::

    {"key": "<sha256>", "model": "fast", "request": {...}, "result": {...}}
    {"key": "<sha256>", "model": "fast", "request": {...}, "error": {"class": "rate_limited", ...}}

Secret values known to the process (:data:`sealflow.execution.secrets.REDACTOR`, which
remembers every resolved secret, API keys included) are redacted from what is written.

:class:`ReplayProvider` answers from such a file: the request's canonical hash
(:func:`request_key`: every field of the request except ``deadline`` and
``idempotency_key``, which change from run to run, as canonical JSON) picks the recorded
answers, served in recorded order (the last one again once they are used up). A request
that was not recorded raises :class:`ReplayMiss`, which is not a ``StepError`` (no retry
class or fallback swallows it) and is kept in :attr:`ReplayProvider.misses`, so a test
can fail on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.base import ModelRequest, ModelResult, Provider, ToolCall
from sealflow.providers.registry import ProviderRegistry


class ReplayMiss(Exception):
    """A request the recording does not hold (the message names the model and the request's key)."""


def request_dict(request: ModelRequest) -> dict[str, Any]:
    """The parts of ``request`` that decide the answer, as JSON values."""
    return {"model": request.model, "system": request.system, "prompt": request.prompt,
            "output_schema": request.output_schema, "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters}
                      for t in request.tools],
            "transcript": list(request.transcript)}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def request_key(request: ModelRequest) -> str:
    """The canonical hash a recording is matched on."""
    return hashlib.sha256(canonical(request_dict(request)).encode()).hexdigest()


def _result_dict(result: ModelResult) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    call = result.tool_call
    data["tool_call"] = call.to_dict() if isinstance(call, ToolCall) else (dict(call) if call else None)
    return data


def _result(data: dict[str, Any]) -> ModelResult:
    call = data.get("tool_call")
    tool_call = ToolCall(call["name"], call.get("arguments") or {}, id=call.get("id")) if call else None
    return ModelResult(output=data.get("output"), text=data.get("text", ""),
                       input_tokens=int(data.get("input_tokens", 0)), output_tokens=int(data.get("output_tokens", 0)),
                       cost_usd=float(data.get("cost_usd", 0.0)), model=data.get("model", ""), tool_call=tool_call)


def _redacted_line(entry: dict[str, Any]) -> str:
    """``entry`` as one JSON line, secrets redacted leaf by leaf and then (escaped forms) in the text."""
    from sealflow.execution.secrets import REDACTOR

    return REDACTOR.text(canonical(REDACTOR.value(entry))) or ""


_FILE_LOCKS: dict[Path, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: Path) -> threading.Lock:
    """One lock per recording file in this process, shared by every provider writing to it."""
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(path.resolve(), threading.Lock())


class RecordingProvider:
    """``inner``, with every call appended to ``path`` (see the module docstring)."""

    def __init__(self, inner: Provider, path: str | os.PathLike[str]):
        self.inner = inner
        self.name = f"recording:{inner.name}"
        # the inner model's configuration (rate limit, breaker) and price still apply to recorded calls
        self.config = getattr(inner, "config", None)
        self.price = getattr(inner, "price", None)
        self.path = Path(path)
        self._lock = _file_lock(self.path)

    def complete(self, request: ModelRequest) -> ModelResult:
        entry: dict[str, Any] = {"key": request_key(request), "model": request.model,
                                 "request": request_dict(request)}
        try:
            result = self.inner.complete(request)
        except StepError as exc:
            entry["error"] = {"class": exc.error_class, "message": exc.message, "retry_after": exc.retry_after}
            self._write(entry)
            raise
        entry["result"] = _result_dict(result)
        self._write(entry)
        return result

    def _write(self, entry: dict[str, Any]) -> None:
        line = _redacted_line(entry) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line)


class ReplayProvider:
    """Answers recorded in ``path``; never calls a provider (see the module docstring)."""

    name = "replay"

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._answers: dict[str, list[dict[str, Any]]] = {}
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        self.misses: list[str] = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise ReplayMiss(f"no model recording at {self.path}; record one first (docs/models.md)") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                self._answers.setdefault(entry["key"], []).append(entry)
            except (ValueError, KeyError, TypeError):
                raise ReplayMiss(f"{self.path}:{number}: not a recording line") from None

    def models(self) -> list[str]:
        return sorted({e.get("model", "") for answers in self._answers.values() for e in answers} - {""})

    def complete(self, request: ModelRequest) -> ModelResult:
        key = request_key(request)
        with self._lock:
            answers = self._answers.get(key)
            if not answers:
                message = (f"model call not in the recording {self.path}: model {request.model!r}, request key "
                           f"{key[:16]}, prompt {request.prompt[:80]!r}; the workflow asks something new: record "
                           "again (docs/models.md)")
                self.misses.append(message)
                raise ReplayMiss(message)
            index = self._served.get(key, 0)
            self._served[key] = index + 1
            entry = answers[min(index, len(answers) - 1)]
        if "error" in entry:
            error = entry["error"]
            raise StepError(error["class"], error.get("message", ""), retry_after=error.get("retry_after"))
        return _result(entry["result"])


class ReplayRegistry(ProviderRegistry):
    """Serves every model name from one :class:`ReplayProvider` (an unrecorded call fails loudly)."""

    def __init__(self, replay: ReplayProvider):
        super().__init__()
        self.replay = replay

    def get(self, model: str) -> Provider:
        return self.replay

    def known(self) -> list[str]:
        return self.replay.models()


class RecordingRegistry(ProviderRegistry):
    """``inner``'s providers, each wrapped in a :class:`RecordingProvider` writing to ``path``."""

    def __init__(self, inner: ProviderRegistry, path: str | os.PathLike[str]):
        super().__init__()
        self.inner = inner
        self.path = Path(path)
        self._wrapped: dict[int, RecordingProvider] = {}

    def get(self, model: str) -> Provider:
        provider = self.inner.get(model)
        wrapped = self._wrapped.get(id(provider))
        if wrapped is None:
            wrapped = self._wrapped[id(provider)] = RecordingProvider(provider, self.path)
        return wrapped

    def known(self) -> list[str]:
        return self.inner.known()
