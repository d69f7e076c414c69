"""Benchmark: the overhead of a provider call over the bare HTTP call, against the fake model server.

    python -m tools.benchmarks.models [--calls 2000] [--provider openai|anthropic]

Starts the fake model server of the tests (``tests/fake_model_servers.py``, loopback, keep-alive)
and times, in the same process and run, ``--calls`` of each:

* bare: ``http.client`` POSTing a pre-serialised request body on a kept-alive connection and
  ``json.loads`` of the answer: the floor;
* sealflow: ``adapter.complete(ModelRequest(...))`` with an ``output_schema``: building the
  body (strict-schema conversion), the POST, error mapping, parsing, schema check, tokens and cost.

Both ask for the same structured answer, so the server's work is the same. Prints the median
and mean microseconds per call and the ratio sealflow / bare.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fake_model_servers import FakeModelServer  # noqa: E402

from sealflow.providers.anthropic_messages import AnthropicAdapter  # noqa: E402
from sealflow.providers.base import ModelRequest  # noqa: E402
from sealflow.providers.config import parse_model  # noqa: E402
from sealflow.providers.openai_chat import OpenAIAdapter  # noqa: E402

KEY = "sk-bench-000000000000000000"
SCHEMA = {"type": "object", "required": ["label", "reason"],
          "properties": {"label": {"enum": ["high", "medium", "low"]}, "reason": {"type": "string"}}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    args = parser.parse_args(argv)
    with FakeModelServer(api_key=KEY) as server:
        config = parse_model("bench", {"provider": args.provider, "model": "gpt-4o-mini", "base_url": server.base_url,
                                       "api_key": {"secret": "K"}}, "models.bench")
        adapter = (OpenAIAdapter if args.provider == "openai" else AnthropicAdapter)(config, KEY)
        request = ModelRequest(model="bench", prompt="Classify the lead: Acme, 5000 employees.", system="Be brief.",
                               output_schema=SCHEMA, max_tokens=200)
        body = json.dumps(adapter.body(request)).encode()
        headers = {"content-type": "application/json", **adapter.headers(KEY)}
        parts = urlsplit(adapter.url())
        conn = http.client.HTTPConnection(parts.netloc, timeout=30)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the adapters' transport does

        def bare() -> None:
            conn.request("POST", parts.path, body=body, headers=headers)
            json.loads(conn.getresponse().read())

        def sealflow() -> None:
            adapter.complete(ModelRequest(**{**request.__dict__, "deadline": time.time() + 30}))

        for fn in (bare, sealflow):  # warm up both connections and caches
            for _ in range(50):
                fn()
        times: dict[str, list[float]] = {"bare": [], "sealflow": []}
        for _ in range(args.calls):  # interleaved, so drift on a shared machine hits both alike
            for name, fn in (("bare", bare), ("sealflow", sealflow)):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e6)
        conn.close()
    for name, values in times.items():
        print(f"{name:9s} median {statistics.median(values):8.1f} µs   mean {statistics.fmean(values):8.1f} µs "
              f"per call ({args.calls} calls, {args.provider})")
    ratio = statistics.median(times["sealflow"]) / statistics.median(times["bare"])
    print(f"ratio sealflow / bare (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()
