"""The one HTTP call adapters make: POST JSON, read the answer, classify transport failures.

Plain ``http.client`` (no SDK): no hidden retries, so Sealflow's retry classes are the
one retry layer; the timeout is the smaller of the model's ``timeout`` and what is left
of the step's deadline. Connections are kept alive per thread and host.

Transport failures become :class:`~sealflow.core.errors.StepError`: a timeout
``timeout``, a refused/reset/unresolvable connection ``network``. Messages name the
host and never the request headers (which hold the API key). An answer is read up to
:data:`MAX_ANSWER_BYTES` (a model's answer is a few KiB; a server sending more, whatever it is,
fails the attempt with ``invalid_output`` and its connection is closed: the worker's memory is
bounded by what it reads, not by what a server sends).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sealflow.core.errors import StepError


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP response: ``status``, lower-cased ``headers`` and the body bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None


_local = threading.local()
#: the most of an answer's body that is read (a larger one fails the call)
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class _NoDelay:
    """Send small requests at once (no Nagle wait for an ACK), as urllib3 and httpx do."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # type: ignore[attr-defined]


class _HTTP(_NoDelay, http.client.HTTPConnection):
    pass


class _HTTPS(_NoDelay, http.client.HTTPSConnection):
    pass


def _connection(scheme: str, netloc: str, timeout: float) -> http.client.HTTPConnection:
    pool: dict[tuple[str, str], http.client.HTTPConnection] = getattr(_local, "pool", None) or {}
    _local.pool = pool
    conn = pool.get((scheme, netloc))
    if conn is None:
        if scheme == "https":
            conn = _HTTPS(netloc, timeout=timeout, context=ssl.create_default_context())
        else:
            conn = _HTTP(netloc, timeout=timeout)
        pool[(scheme, netloc)] = conn
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn


def _drop(scheme: str, netloc: str) -> None:
    conn = getattr(_local, "pool", {}).pop((scheme, netloc), None)
    if conn is not None:
        conn.close()


def post_json(url: str, body: Any, headers: Mapping[str, str], timeout: float) -> HttpAnswer:
    """POST ``body`` as JSON to ``url``; ``timeout`` (seconds) bounds connecting and each read."""
    if timeout <= 0:
        raise StepError("timeout", "the step's deadline passed before the model was called")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StepError("configuration", f"model base_url {url!r} is not an http(s) URL")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    sent = {"content-type": "application/json", "accept": "application/json", **headers}
    for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is reopened once
        conn = _connection(parts.scheme, parts.netloc, timeout)
        reused = conn.sock is not None
        try:
            conn.request("POST", path, body=data, headers=sent)
            response = conn.getresponse()
            payload = response.read(MAX_ANSWER_BYTES + 1)
            if len(payload) > MAX_ANSWER_BYTES:
                _drop(parts.scheme, parts.netloc)
                raise StepError("invalid_output", f"the model server at {parts.netloc} sent an answer of more than "
                                                  f"{MAX_ANSWER_BYTES} bytes; it was not read further")
            answer = HttpAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, payload)
            if response.will_close:
                _drop(parts.scheme, parts.netloc)
            return answer
        except TimeoutError:
            _drop(parts.scheme, parts.netloc)
            raise StepError("timeout", f"the model server at {parts.netloc} did not answer within {timeout:.1f}s") \
                from None
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            _drop(parts.scheme, parts.netloc)
            if attempt == 2 or not reused:
                raise StepError("network", f"the model server at {parts.netloc} closed the connection "
                                           f"({type(exc).__name__})") from None
        except (OSError, http.client.HTTPException) as exc:
            _drop(parts.scheme, parts.netloc)
            raise StepError("network", f"cannot reach the model server at {parts.netloc}: "
                                       f"{type(exc).__name__}: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover
