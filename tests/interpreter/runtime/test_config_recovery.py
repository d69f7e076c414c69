"""The runtime configuration's recovery settings: ``lost_attempts`` and ``outcome_unknown_timeout``."""

from __future__ import annotations

import pytest

from sealflow.core.errors import ConfigError
from sealflow.engine.poison import DEFAULT_LOST_ATTEMPTS, DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS
from sealflow.runtime.config import RuntimeConfig


def test_given_no_setting_then_the_defaults_hold():
    config = RuntimeConfig.from_dict({})
    assert (config.lost_attempts, config.outcome_unknown_timeout_ms) == \
        (DEFAULT_LOST_ATTEMPTS, DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS) == (3, 72 * 3600 * 1000)


def test_given_settings_then_they_are_read():
    config = RuntimeConfig.from_dict({"lost_attempts": 5, "outcome_unknown_timeout": "2d"})
    assert (config.lost_attempts, config.outcome_unknown_timeout_ms) == (5, 2 * 86_400_000)
    assert "lost_attempts" not in config.extra  # read, not left for another module


@pytest.mark.parametrize("value", [0, 21, -1, True, "3", 2.5, None])
def test_given_a_lost_attempts_out_of_range_then_it_is_refused_naming_it(value):
    with pytest.raises(ConfigError, match="lost_attempts must be a whole number from 1 to 20"):
        RuntimeConfig.from_dict({"lost_attempts": value}, source="runtime.yaml")


@pytest.mark.parametrize("value", ["forever", "0s", "31d", "500ms", 3600, True, "-1h"])
def test_given_an_outcome_unknown_timeout_that_is_not_a_duration_in_range_then_it_is_refused(value):
    with pytest.raises(ConfigError, match=r"outcome_unknown_timeout: .* is not a duration from 1s to 30d"):
        RuntimeConfig.from_dict({"outcome_unknown_timeout": value}, source="runtime.yaml")
