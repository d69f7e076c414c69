"""The shipped Prometheus alert rules pass `promtool check rules` and their unit tests (`promtool test rules`):
each alert fires on the series it is for and stays silent otherwise. promtool comes with Debian's `prometheus`
package (.ci/run installs it); without it these tests skip, a failure under SEALFLOW_REQUIRE_SERVICES=1."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "tools" / "deploy" / "prometheus"


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_alert_rules_pass_promtool_check_rules():
    # Given the shipped rules, When promtool checks them, Then they parse and every expression is valid PromQL
    done = promtool("check", "rules", "alerts.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout


def test_the_alert_rules_pass_their_unit_tests():
    # Given the rules' unit tests (alerts.test.yaml: each alert on series that fire it and series that do not)
    # When promtool runs them, Then every one passes
    done = promtool("test", "rules", "alerts.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_rule_fails_its_unit_tests(tmp_path):
    # Given the unit tests run against rules whose store-error threshold was raised past what they feed it
    broken = (RULES / "alerts.yaml").read_text().replace(
        "sum(increase(sealflow_store_errors_total[5m])) > 0", "sum(increase(sealflow_store_errors_total[5m])) > 100")
    (tmp_path / "alerts.yaml").write_text(broken)
    shutil.copy(RULES / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    # When promtool runs them, Then they fail, naming the alert (the tests can catch a wrong rule)
    done = promtool("test", "rules", "alerts.test.yaml", cwd=tmp_path)
    assert done.returncode != 0 and "SealflowStoreErrors" in done.stdout + done.stderr


def test_the_compose_scrape_configuration_passes_promtool_check_config():
    # Given prometheus.yml (the compose deployment's scrape jobs, loading alerts.yaml)
    # When promtool checks it, Then it is valid and finds the rule file
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout
