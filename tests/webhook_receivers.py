"""A real webhook receiver on loopback for the notification tests (``http.server`` in a thread).

Each path has a script of answers: ``receiver.script("/hook", [500, 500, 200])`` answers the first two
POSTs with 500 and every later one with the last status (200). A status 3xx answers with a ``Location``
to ``/elsewhere`` (whose hits are counted, so a followed redirect shows). ``slow`` seconds delay every
answer. Every request is kept as ``(path, headers (lower-cased), body)``.

The receiver verifies nothing itself: tests check signatures with :func:`standard_webhooks_signature`,
written here from the Standard Webhooks specification, independently of sealflow's signing code.

:func:`guard_connections` records every connection a test attempts and refuses, before any packet, one to an
address outside 127.0.0.0/8: the proof that a refused address was refused before a connection was tried.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import ipaddress
import socket
import threading
import time

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def guard_connections(monkeypatch) -> list[tuple]:
    """Patch ``socket.socket.connect`` for the test: every connection attempted is kept as ``(host, port)``, and
    one to an address outside 127.0.0.0/8 raises AssertionError instead of connecting (no packet leaves)."""
    attempted: list[tuple] = []
    real = socket.socket.connect

    def guarded(sock, address):
        attempted.append(tuple(address[:2]))
        if ipaddress.ip_address(str(address[0]).split("%")[0]) not in LOOPBACK:
            raise AssertionError(f"a connection to {address[0]} was attempted")
        return real(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return attempted


def standard_webhooks_signature(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    """``v1,`` + base64(HMAC-SHA256(base64-decoded secret without ``whsec_``, "{id}.{timestamp}.{body}"))."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class LoopbackServer:
    """A threaded ``http.server`` on a free loopback port, served while used as a context manager."""

    def serve(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class Receiver(LoopbackServer):
    def __init__(self, slow: float = 0.0):
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.scripts: dict[str, list[int]] = {}
        self.slow = slow
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                owner.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if owner.slow:
                    time.sleep(owner.slow)
                script = owner.scripts.get(self.path) or [200]
                status = script.pop(0) if len(script) > 1 else script[0]
                answer = b'{"echo": "a response body sealflow must not keep"}'
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.serve(Handler)

    def script(self, path: str, statuses: list[int]) -> str:
        self.scripts[path] = list(statuses)
        return self.url + path

    def hits(self, path: str) -> list[tuple[str, dict[str, str], bytes]]:
        return [r for r in self.requests if r[0] == path]
