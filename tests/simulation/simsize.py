"""How many schedules the simulator runs, and from which seed (see conftest.py)."""

from __future__ import annotations

import os

import pytest

CI_SCHEDULES = {"sqlite": 250, "postgres": 30}
LONG_SCHEDULES = 100_000


def whole(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise pytest.UsageError(f"{name}={raw!r}: give a whole number")
    return int(raw)


def sim_seeds(config: pytest.Config, backend: str) -> list[int]:
    one = whole("SEALFLOW_SIM_SEED")
    if one is not None:
        return [one]
    count = whole("SEALFLOW_SIM_SCHEDULES")
    if count is None:
        count = LONG_SCHEDULES if "simulation" in (config.getoption("markexpr") or "") else CI_SCHEDULES[backend]
    first = whole("SEALFLOW_SIM_FIRST") or 1
    return list(range(first, first + count))
