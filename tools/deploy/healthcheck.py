"""sealflow-healthcheck [URL]: exit 0 when URL answers 200, else 1 with one line on stderr (the image's HEALTHCHECK).

URL defaults to ``$SEALFLOW_HEALTH_URL``, else the server's readiness, ``http://127.0.0.1:8300/readyz`` (the store
answers and every secret resolves). A worker or a scheduler is checked on its metrics port
(``http://127.0.0.1:9464/metrics``): a worker listens there only once it reached its broker and its store.
Installed in the image as /usr/local/bin/sealflow-healthcheck (tools/deploy/Containerfile); standard library only.
"""

from __future__ import annotations

import os
import sys
import urllib.request

DEFAULT = "http://127.0.0.1:8300/readyz"


def check(url: str, timeout: float = 4.0) -> str | None:
    """None when ``url`` answers 200; else what went wrong."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 - a loopback URL of our own
            return None if answer.status == 200 else f"answered {answer.status}"
    except Exception as exc:  # noqa: BLE001 - any failure is "unhealthy", said in one line
        return f"{type(exc).__name__}: {exc}"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("SEALFLOW_HEALTH_URL", DEFAULT)
    problem = check(url)
    if problem is not None:
        print(f"sealflow-healthcheck: {url}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
