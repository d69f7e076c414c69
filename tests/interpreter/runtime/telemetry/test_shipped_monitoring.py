"""The shipped dashboard and alert rules (tools/deploy/grafana, tools/deploy/prometheus) name only metrics the code
registers, and each alert has its runbook in docs/operations.md. (promtool's checks: tests/deploy.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[4]
DEPLOY = ROOT / "tools" / "deploy"
#: metrics Prometheus records itself for every scrape target
PROMETHEUS_OWN = {"up"}
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",)}


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every alert rule and every dashboard panel's target."""
    out = []
    for group in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())["groups"]:
        out += [(f"alert {rule['alert']}", rule["expr"]) for rule in group["rules"]]
    dashboard = json.loads((DEPLOY / "grafana" / "sealflow.json").read_text())
    out += [(f"panel {p['title']!r}", t["expr"]) for p in dashboard["panels"] for t in p.get("targets", ())]
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: every ``sealflow_...`` word, and any other name followed by a label
    matcher ``{`` or a range ``[`` (``up{job=...}``)."""
    names = set(re.findall(r"\b(sealflow_[a-z0-9_]+)", expr))
    names |= set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{[]", expr))
    return names


def unknown(expr: str, registered: set[str]) -> set[str]:
    return {n for n in metric_names(expr) if n not in registered and n not in PROMETHEUS_OWN}


@pytest.fixture
def registered(pg_schema) -> set[str]:
    """Every sample name a runtime on PostgreSQL exposes (the store's gauges too: PostgreSQL has them all)."""
    rt = Runtime(open_store(pg_schema.url(migrate="1", pool_max="2")))
    try:
        return {f.name + suffix for f in rt.telemetry.metrics.registry.collect() for suffix in _SUFFIXES[f.type]}
    finally:
        rt.close()


def test_every_dashboard_and_alert_expression_names_only_registered_metrics(registered):
    # Given the names a runtime registers (counters with _total, histograms with _bucket/_sum/_count)
    assert "sealflow_store_errors_total" in registered and "sealflow_workers_alive" in registered
    # When every expression of the dashboard and the alert rules is read
    found = expressions()
    assert len(found) > 20
    # Then each names only those (or Prometheus's own `up`)
    bad = {where: sorted(unknown(expr, registered)) for where, expr in found if unknown(expr, registered)}
    assert bad == {}


def test_the_name_check_refuses_a_metric_the_code_does_not_register(registered):
    # Given expressions naming a misspelt metric and an unknown foreign one
    # When they are checked, Then both are reported (the check above can fail)
    assert unknown('max(sealflow_dead_letter{status="dead"}) > 0', registered) == {"sealflow_dead_letter"}
    assert unknown("rate(node_cpu_seconds_total[5m]) > 0", registered) == {"node_cpu_seconds_total"}
    assert unknown("rate(sealflow_step_attempts_total[5m])", registered) == set()


def test_every_alert_has_its_runbook_heading_in_operations_md():
    # Given the operations guide's headings, as GitHub anchors
    doc = (ROOT / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", doc, flags=re.M)}
    # When each alert's runbook annotation is read
    rules = [r for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())["groups"]
             for r in g["rules"]]
    # Then it points at a heading of operations.md named after the alert
    for rule in rules:
        path, anchor = rule["annotations"]["runbook"].split("#")
        assert path == "docs/operations.md" and anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no heading '{rule['alert']}' in docs/operations.md"
