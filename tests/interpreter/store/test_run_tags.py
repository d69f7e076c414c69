"""Run tags, on every store: a run submitted with tags carries them (status, GET /v1/runs/{id}); runs are found
by them (every tag given must match, in the caller's tenant only); bad tags are refused before anything is
written; pruning a run drops its tags."""

from __future__ import annotations

import pytest
from interp_helpers import S, make_plan

from sealflow.core.errors import StepError
from sealflow.runtime.facade import Runtime
from sealflow.runtime.status import status_json
from sealflow.store.records import RunQuery
from sealflow.store.tags import MAX_TAGS, parse_tag


@pytest.fixture
def rt(store, registry):
    runtime = Runtime(store, registry, {}, worker_timeout_ms=20)
    yield runtime
    runtime.close()


PLAN = make_plan(S("a", "set", assign={"x": "1"}), name="tagged")


def test_runs_are_found_by_every_tag_given_and_carry_them(rt):
    # Given three runs with different tags, and one in another tenant with the same tag
    a = rt.submit(PLAN, {}, initiator="user:a", tags={"customer": "c-42", "batch": 7})
    b = rt.submit(PLAN, {}, initiator="user:a", tags={"customer": "c-42"})
    rt.submit(PLAN, {}, initiator="user:a", tags={"customer": "c-7"})
    rt.submit(PLAN, {}, initiator="user:a", tenant="other", tags={"customer": "c-42"})
    # When the runs are listed by tag
    one = rt.store.query_runs(RunQuery(tenant="default", tags=(("customer", "c-42"),)))
    both = rt.store.query_runs(RunQuery(tenant="default", tags=(("customer", "c-42"), ("batch", "7"))))
    # Then the ones carrying every tag given, of this tenant only, are found (a number kept as its text)
    assert sorted(r.id for r in one) == sorted([a, b]) and [r.id for r in both] == [a]
    assert rt.store.count_runs(RunQuery(tenant="default", tags=(("customer", "c-42"),))) == {"queued": 2}
    # and a run's status carries its tags
    assert status_json(rt.status(a))["tags"] == {"batch": "7", "customer": "c-42"}
    assert "tags" not in status_json(rt.status(rt.submit(PLAN, {}, initiator="user:a")))


@pytest.mark.parametrize("tags, why", [
    ({"Customer": "x"}, "is not a name"),
    ({"customer": ""}, "1 to 200 printable"),
    ({"customer": "x" * 201}, "1 to 200 printable"),
    ({"customer": "a\nb"}, "1 to 200 printable"),
    ({"customer": {"nested": 1}}, "not dict"),
    ({"customer": True}, "not bool"),
    ({f"t{n}": "x" for n in range(MAX_TAGS + 1)}, f"at most {MAX_TAGS}"),
])
def test_bad_tags_are_refused_before_any_run_is_written(rt, tags, why):
    with pytest.raises(StepError, match=why) as info:
        rt.submit(PLAN, {}, initiator="user:a", tags=tags)
    assert info.value.error_class == "invalid_request"
    assert rt.store.list_runs() == []


def test_a_tag_option_must_be_name_equals_value():
    assert parse_tag("customer=c=42") == ("customer", "c=42")
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_tag("customer")


def test_pruning_a_run_drops_its_tags(rt, clock):
    # Given a finished run with tags
    run_id = rt.submit(PLAN, {}, initiator="user:a", tags={"customer": "c-1"})
    assert rt.drive(run_id).state == "completed"
    # When runs finished before now are pruned
    clock.advance(3600)
    rt.store.prune_runs(clock.now(), clock.now())
    # Then its tags went with it
    assert rt.store.run_tags(run_id) == {}
    assert rt.store.query_runs(RunQuery(tenant="default", tags=(("customer", "c-1"),))) == []
