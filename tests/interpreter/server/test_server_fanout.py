"""The HTTP API on a run that fans out: its child runs paged, hidden from the run list, and no such run to
another tenant."""

from __future__ import annotations

from sealflow.dsl.api import compile_bytes


def test_a_map_run_pages_its_children_hides_them_from_lists_and_another_tenant_sees_none(rt, client, mint):
    # Given alice's map run of 120 items (in acme), each set to its double
    plan = compile_bytes(b"""sealflow: 1
name: fan-http
version: 1
owner: team:t
steps:
  - id: each
    map:
      items: "input.items"
      concurrency: 10
      max_items: 200
      steps:
        - {id: double, set: {v: "item * 2"}}
""", "fan-http.yaml")
    status = rt.run(plan, {"items": list(range(120))}, initiator="user:alice", tenant="acme", until="final")
    assert status.state == "completed"
    alice = mint("user:alice", "acme")
    # When alice reads it, then its items are counted and the first 100 child runs listed, then the rest
    shown = client.get(f"/v1/runs/{status.run.id}", headers=alice).json()
    each = next(s for s in shown["steps"] if s["id"] == "each")
    assert each["items"]["counts"] == {"completed": 120}
    assert len(shown["children"]["runs"]) == 100 and shown["children"]["next_offset"] == 100
    page = client.get(f"/v1/runs/{status.run.id}", params={"children_offset": 100}, headers=alice).json()
    assert [c["index"] for c in page["children"]["runs"]] == list(range(100, 120))
    # and the run list holds the run only, not its 120 children
    listed = client.get("/v1/runs", headers=alice).json()
    assert [r["run_id"] for r in listed["runs"]] == [status.run.id]
    # When eve of globex names a child run, then there is no such run
    child = shown["children"]["runs"][0]["run_id"]
    assert client.get(f"/v1/runs/{child}", headers=mint("user:eve", "globex")).status_code == 404
    assert client.get(f"/v1/runs/{child}", headers=alice).json()["parent"]["index"] == 0
