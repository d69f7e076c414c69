"""What a run looks like to a caller: the run record, its attempts, and what it waits for."""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.interpreter.core import states
from sealflow.interpreter.core.ids import split_step_id
from sealflow.interpreter.store.base import AttemptRecord, RunRecord, Store


@dataclasses.dataclass
class RunStatus:
    """A run as the store has it now, with its attempts and what it waits for."""

    run: RunRecord
    attempts: list[AttemptRecord]
    waiting: dict | None = None

    @property
    def state(self) -> str:
        return self.run.state

    @property
    def output(self) -> Any:
        return self.run.output

    @property
    def error(self) -> tuple[str | None, str | None]:
        return self.run.error_class, self.run.error_message

    def step_states(self) -> dict[str, str]:
        """Step id -> state of its latest attempt."""
        return {a.step_id: a.state for a in self.attempts}

    def to_dict(self) -> dict:
        return {"run": dataclasses.asdict(self.run), "attempts": [dataclasses.asdict(a) for a in self.attempts],
                "waiting": self.waiting}


def run_status(store: Store, run_id: str) -> RunStatus:
    """The run as the store has it now; ``waiting`` says what holds it (an approval, a wait, a retry)."""
    run = store.get_run(run_id)
    attempts = store.attempts(run_id)
    waiting = None
    active = next((a for a in attempts if a.state in states.STEP_ACTIVE), None)
    if active is not None and active.state in ("waiting", "retry_wait"):
        _, gate = split_step_id(active.step_id)
        kind = "approval" if gate or "opened_at" in active.data else ("retry" if active.state == "retry_wait"
                                                                     else "wait")
        waiting = {"step": active.step_id, "kind": kind, "due_at": active.due_at}
        if kind == "approval":
            waiting.update({k: active.data.get(k) for k in ("approvers", "quorum", "approvals", "show", "show_hash",
                                                             "plan_digest")})
    return RunStatus(run, attempts, waiting)
