"""`sealflow run` and `status` on a run that fans out: items as a count by state, failures listed with the
child run to look at, and `--json` paging the child runs."""

from __future__ import annotations

import json

from sealflow.cli import main

FAN_ACTIONS = '''
from sealflow import action

@action("fancli.work", permissions=[], effect="read")
def work(ctx, n: int):
    if n == 2:
        raise ValueError("item two breaks")
    return {"n": n}
'''

FAN_WORKFLOW = """\
sealflow: 1
name: fancli
version: 1
owner: team:test
steps:
  - id: each
    map:
      items: "input.items"
      concurrency: 2
      max_items: 200
      tolerate_failures: 1
      steps:
        - {id: work, action: fancli.work, with: {n: "${{ item }}"}, retry: {max_attempts: 1}}
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_given_a_map_with_a_tolerated_failure_when_run_and_shown_then_items_are_counted_and_paged(capsys, tmp_path):
    # Given a map of 150 items of which item 2 fails (one failure tolerated)
    (tmp_path / "fan_actions.py").write_text(FAN_ACTIONS)
    (tmp_path / "fancli.v1.yaml").write_text(FAN_WORKFLOW)
    actions = ("--actions", str(tmp_path / "fan_actions.py"))
    # When it is run, then it completes and prints the items by state with the failure and its child run
    code, out, _ = run(capsys, "run", str(tmp_path / "fancli.v1.yaml"), *actions, "--input",
                       json.dumps({"items": list(range(150))}), "--as", "user:ana")
    assert code == 0 and "state: completed" in out
    assert "items of each: 150 (149 completed, 1 failed)" in out
    failure = next(line for line in out.splitlines() if line.startswith("  item 2 failed"))
    assert "ValueError: item two breaks" in failure
    child = failure.split("sealflow status ")[1].rstrip(")")
    # When its status is read as JSON, then the child runs come 100 at a time, the next page by offset
    run_id = child.split(".")[0]
    code, out, _ = run(capsys, "status", run_id, *actions, "--json")
    shown = json.loads(out)
    assert code == 0 and len(shown["children"]["runs"]) == 100 and shown["children"]["next_offset"] == 100
    code, out, _ = run(capsys, "status", run_id, *actions, "--json", "--children-offset", "100")
    page = json.loads(out)["children"]
    assert [c["index"] for c in page["runs"]] == list(range(100, 150)) and page["next_offset"] is None
    # and the failed item's own status names its parent and item
    code, out, _ = run(capsys, "status", child, *actions, "--json")
    mine = json.loads(out)
    assert mine["state"] == "failed" and mine["parent"]["index"] == 2 and mine["item"] == 2
    # and the run list shows the run, not its 150 children
    code, out, _ = run(capsys, "runs", "list", "--json")
    assert [r["run_id"] for r in json.loads(out)] == [run_id]
