"""The runtime configuration's ``pools:`` section, and what submit says about a pool it does not list."""

from __future__ import annotations

import logging

import pytest
from interp_helpers import S, make_plan

from sealflow.core.errors import ConfigError
from sealflow.policy import coordination
from sealflow.runtime.config import RuntimeConfig


def test_pools_are_read_as_limits_by_name():
    # Given a pools section with both spellings and a default / Then each is a limit
    got = RuntimeConfig.from_dict({"pools": {"email": 2, "llm": {"limit": 8}, "*": 4}}).pools
    assert got == {"email": 2, "llm": 8, "*": 4}
    assert coordination.pool_limit(got, "email") == 2 and coordination.pool_limit(got, "other") == 4
    # and without a "*" entry an unlisted pool gets 1, never unlimited
    assert coordination.pool_limit({}, "other") == coordination.DEFAULT_POOL_LIMIT == 1


@pytest.mark.parametrize(("pools", "says"), [
    ({"email": 0}, "pools.email: the limit must be an integer >= 1, not 0"),
    ({"email": True}, "pools.email: the limit must be an integer >= 1"),
    ({"Email": 1}, "pool name 'Email' must match"),
    ({"email": {"max": 1}}, "pools.email: unknown key 'max'; known keys: limit"),
    ([1, 2], "pools must be a map of pool name to limit"),
])
def test_a_bad_pools_section_is_refused_naming_where(pools, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        RuntimeConfig.from_dict({"pools": pools}, source="rt.yaml")


def test_submit_warns_about_a_pool_the_configuration_does_not_list(caplog):
    # Given a plan whose step runs in pool "faxes", not configured
    plan = make_plan(S("send", "action", action="t.fax", concurrency="faxes"), name="faxer")
    # When it is checked at submit / Then a warning names the pool and the limit it gets
    with caplog.at_level(logging.WARNING, logger="sealflow.coordination"):
        coordination.check_plan(plan, {})
    assert "runs in pool 'faxes', which the runtime configuration does not list: at most 1" in caplog.text
