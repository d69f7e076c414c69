"""The receiver of the chaos workflow's effects: a real HTTP server (in the test's process, which no chaos
touches) that honours idempotency keys as a payment API does. The first POST with a key applies the effect
and returns a receipt; a later POST with the same key and body is a duplicate: suppressed, answered with
the first receipt; the same key with another body is refused (422). It counts every delivery, and each key's.
The hosts variant (test_chaos_hosts.py) builds it inside the services namespace, bound to all of that
namespace's addresses (``host="0.0.0.0"``: only the test's own links)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.lock = threading.Lock()
        self.deliveries = 0
        self.per_key: Counter = Counter()  # idempotency key -> deliveries
        self.suppressed = 0
        self.conflicts: list[tuple[str, dict, dict]] = []
        self.applied: dict[str, dict] = {}  # idempotency key -> the body that applied it
        self.receipts: dict[str, int] = {}  # idempotency key -> the receipt number it was given
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                key = self.headers.get("Idempotency-Key")
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    body = None
                if not key or not isinstance(body, dict):
                    self._answer(400, {"error": "an Idempotency-Key header and a JSON object body are required"})
                    return
                status, answer = receiver.deliver(key, body)
                self._answer(status, answer)

            def _answer(self, status: int, value: dict) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: thousands of requests
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}/effects"
        self.thread = threading.Thread(target=self.server.serve_forever, name="chaos-receiver", daemon=True)
        self.thread.start()

    def deliver(self, key: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.deliveries += 1
            self.per_key[key] += 1
            first = self.applied.get(key)
            if first is None:
                self.applied[key] = body
                self.receipts[key] = len(self.receipts) + 1
                return 201, {"receipt": self.receipts[key], "key": key}
            if first != body:
                self.conflicts.append((key, first, body))
                return 422, {"error": "this idempotency key was used with another body"}
            self.suppressed += 1
            return 200, {"receipt": self.receipts[key], "key": key}

    def applied_per_effect(self) -> Counter:
        """How many times each (run, effect) was applied, whatever key it came with."""
        with self.lock:
            return Counter((body["run"], body["effect"]) for body in self.applied.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
