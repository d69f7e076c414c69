"""The chaos suite's size and report.

How many runs: ``$SEALFLOW_CHAOS_RUNS`` if set; else 300 when the chaos suite was asked for by name
(``pytest -m chaos``); else 30, the bounded size the default suite (``python -m pytest -q``, CI) runs.
The hosts variant (test_chaos_hosts.py: workers in network namespaces, partitions) runs 12 and 120 instead
(``hosts_chaos_size``; ``$SEALFLOW_CHAOS_RUNS`` sets it too): its partitions last 15 s and more.
Each chaos test gets a ``pytest-timeout`` that grows with its size (the test's own stall check fires
first, with a diagnosis), and its counts are printed at the end of the session, also under ``-q``.
"""

from __future__ import annotations

import os

import pytest

CI_RUNS = 30
LOCAL_RUNS = 300
HOSTS_CI_RUNS = 12
HOSTS_LOCAL_RUNS = 120
_REPORT = pytest.StashKey[list]()


def chaos_runs(config: pytest.Config, ci: int = CI_RUNS, local: int = LOCAL_RUNS) -> int:
    raw = os.environ.get("SEALFLOW_CHAOS_RUNS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise pytest.UsageError(f"SEALFLOW_CHAOS_RUNS={raw!r}: give a whole number of runs, 1 or more")
        return int(raw)
    return local if "chaos" in (config.getoption("markexpr") or "") else ci


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    runs = chaos_runs(config)
    for item in items:
        if item.get_closest_marker("chaos") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(240 + 2 * runs))


@pytest.fixture
def chaos_size(request) -> int:
    return chaos_runs(request.config)


@pytest.fixture
def hosts_chaos_size(request) -> int:
    return chaos_runs(request.config, HOSTS_CI_RUNS, HOSTS_LOCAL_RUNS)


@pytest.fixture
def chaos_report(request):
    """Lines the test wants shown at the end of the session (its counts)."""
    lines = request.config.stash.setdefault(_REPORT, [])
    return lines.append


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("chaos")
        for line in lines:
            terminalreporter.write_line(line)
