"""Test-wide settings.

With ``SEALFLOW_REQUIRE_SERVICES=1`` (set by ``.ci/run``) every skip becomes a
failure: CI never passes by skipping a test whose service or fixture is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

STRICT = os.environ.get("SEALFLOW_REQUIRE_SERVICES") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under SEALFLOW_REQUIRE_SERVICES=1 (CI must not skip): {reason}"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """No test touches the developer's .sealflow/ folder."""
    monkeypatch.setenv("SEALFLOW_STORE", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("SEALFLOW_DEMO_DB", str(tmp_path / "demo.db"))
