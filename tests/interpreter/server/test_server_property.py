"""A property-based run of the OpenAPI document (schemathesis): requests generated from every operation's
schemas, valid and invalid, with a valid token, never get a 500 nor a response the document does not
describe (status code, content type, body schema)."""

from __future__ import annotations

from collections import Counter

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import checks  # noqa: E402

from sealflow.server import tokens  # noqa: E402
from sealflow.server.app import create_app  # noqa: E402
from sealflow.server.settings import ServerSettings  # noqa: E402

CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance]


@pytest.fixture
def served(rt, known):
    text, _ = tokens.create(rt.store, "user:alice", "acme", rt.clock.now(), actor="user:root")
    app = create_app(ServerSettings(rate=0, max_body=64 * 1024), rt)
    return app, {"Authorization": f"Bearer {text}"}


def test_no_request_gets_a_500_or_an_undocumented_response(served):
    # Given the API's own OpenAPI document, and a valid token of acme
    app, headers = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 11

    # When requests are generated from every operation's schemas, valid and invalid (sent with the token)
    # Then each answer is documented (status, content type, schema) and none is a 500
    seen: Counter[int] = Counter()
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    for operation, mode in [(op, mode) for op in operations for mode in modes]:
        @given(case=operation.as_strategy(mode))
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            seen[case.call_and_validate(headers=headers, checks=CHECKS).status_code] += 1

        try:
            check()
        except Unsatisfiable:  # an operation without parameters or body has no invalid request to make
            assert mode is schemathesis.GenerationMode.NEGATIVE

    # And the run reached both accepted and refused requests
    assert any(200 <= s < 300 for s in seen) and any(400 <= s < 500 for s in seen), seen
