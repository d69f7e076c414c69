"""``sealflow`` as a user runs it: a separate process from the repository's root, its output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sealflow(args, env, **kw) -> subprocess.CompletedProcess:
    """Run ``python -m sealflow ARGS`` with ``env`` (text output; at most two minutes)."""
    return subprocess.run([sys.executable, "-m", "sealflow", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, **kw)
