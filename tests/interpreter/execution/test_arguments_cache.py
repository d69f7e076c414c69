"""The compiled argument and output schemas of an action are its own, even when another action of the same name
was registered before and freed (its function's id may be reused): the cache compares the function itself."""

from __future__ import annotations

import gc
from typing import TypedDict

from sealflow.execution import arguments
from sealflow.execution.actions import Registry, action


class Sent(TypedDict):
    sent: bool


def test_an_action_re_registered_under_a_name_gets_its_own_output_check_even_if_its_id_is_reused():
    # Given an action "t.sms" without a declared output, checked once (its validators cached), then freed
    first = Registry()

    @action("t.sms", registry=first)
    def plain(ctx):
        return None

    assert arguments.check_output(first.get("t.sms"), {"anything": 1}) is None
    stale_id = id(first.get("t.sms").fn)
    del plain, first
    gc.collect()
    # When another "t.sms" declaring its output is registered, with its function at the freed one's id
    second = Registry()

    def sms(ctx) -> Sent:
        return {"sent": True}

    action("t.sms", registry=second)(sms)
    act = second.get("t.sms")
    arguments._cache[("t.sms", id(act.fn))] = arguments._cache.get(("t.sms", stale_id)) or \
        (object(), None, None, {})  # (as if the id were reused: the cached entry of the freed function)
    # Then its output is checked against its own declaration
    assert "breaks its declared output schema" in (arguments.check_output(act, {"sent": "yes"}) or "")
