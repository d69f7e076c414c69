"""The simulator's size, seeds and stores.

How many schedules: ``$SEALFLOW_SIM_SCHEDULES`` if set; else 100,000 when the simulation was asked for by name
(``pytest -m simulation``); else the bounded size the default suite (and CI) runs, under a minute. One schedule
alone, replayed exactly: ``SEALFLOW_SIM_SEED=N``. Seeds are consecutive from ``$SEALFLOW_SIM_FIRST`` (default 1),
so that two runs of the suite explore the same schedules, and a longer run more of them.
"""

from __future__ import annotations

import pytest
from simsize import whole


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long = "simulation" in (config.getoption("markexpr") or "") or whole("SEALFLOW_SIM_SCHEDULES")
    for item in items:
        if item.get_closest_marker("simulation") is not None and long and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(0))  # the long form runs for hours; its size bounds it


@pytest.fixture
def pg_schema():
    """A fresh PostgreSQL schema in the session's test database (tests/interpreter/pg_helpers.py), dropped after."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interpreter"))
    import pg_helpers

    schema = pg_helpers.Schema()
    yield schema
    schema.drop()
    pg_helpers.drop_database()
