"""What an outside client of the API relies on: the OpenAPI document declares its bearer scheme and, per
operation, the problems it may answer; ``OPTIONS`` and a 405 name every method served on a path; a 404 never
shows the store's path and points at ``sealflow runs list``."""

from __future__ import annotations

from test_server_api import problem_of


def test_the_document_declares_the_bearer_scheme_and_each_operations_problems(client):
    # Given the API's OpenAPI document
    doc = client.get("/openapi.json").json()
    # Then it declares the bearer scheme, required everywhere but on what takes no token
    assert doc["components"]["securitySchemes"]["bearer"] == {**doc["components"]["securitySchemes"]["bearer"],
                                                              "type": "http", "scheme": "bearer"}
    assert doc["security"] == [{"bearer": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    assert doc["paths"]["/v1/callbacks/{token}"]["post"]["security"] == []
    assert "security" not in doc["paths"]["/v1/runs"]["get"]
    # And each operation lists the problems it may give, not every one the API knows
    show = doc["paths"]["/v1/runs/{run_id}"]["get"]["responses"]
    submit = doc["paths"]["/v1/runs"]["post"]["responses"]
    assert {"200", "401", "403", "404"} <= set(show) and "409" not in show and "413" not in show
    assert {"201", "401", "404", "409", "413", "415", "422"} <= set(submit)
    assert "404" not in doc["paths"]["/v1/runs"]["get"]["responses"]
    assert set(doc["paths"]["/healthz"]["get"]["responses"]) == {"200", "500"}
    ref = show["404"]["content"]["application/problem+json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/Problem" and "Problem" in doc["components"]["schemas"]


def test_options_and_a_405_name_every_method_served_on_the_path(client, mint):
    # When OPTIONS is asked of the runs collection, of a run and of no path at all, and DELETE of the collection
    collection, one = client.options("/v1/runs"), client.options("/v1/runs/run_abc")
    nothing = client.options("/v1/nothing")
    wrong = client.delete("/v1/runs", headers=mint())
    # Then OPTIONS answers 204 with every method, a 405 lists the same, and no path is a 404
    assert collection.status_code == 204 and collection.headers["allow"] == "GET, OPTIONS, POST"
    assert one.status_code == 204 and one.headers["allow"] == "GET, OPTIONS"
    assert problem_of(wrong, "method-not-allowed", 405) and wrong.headers["allow"] == "GET, OPTIONS, POST"
    assert nothing.status_code == 404


def test_a_404_never_shows_the_stores_path_and_points_at_runs_list(client, mint, rt):
    # When a run that does not exist is asked for
    problem = problem_of(client.get("/v1/runs/run_nosuch", headers=mint()), "not-found", 404)
    # Then the answer names the run and where to find runs, never the store's URL or file
    assert "run_nosuch" in problem["detail"] and "`sealflow runs list`" in problem["detail"]
    assert rt.store.url not in problem["detail"] and "sqlite" not in problem["detail"]
