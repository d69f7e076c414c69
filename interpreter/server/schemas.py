"""Request and response bodies of the API (pydantic models; the OpenAPI document is generated from them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sealflow.core.jsonc import MAX_REASON_CHARS

NAME = r"^[a-z][a-z0-9_-]{0,127}$"
#: run ids as the runtime makes them (``run_`` + hex), and other ids a store may hold
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
STEP_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,255}$"
HASH = r"^sha256:[0-9a-f]{64}$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    model_config = ConfigDict(extra="allow")


class SubmitRequest(Strict):
    """A run of a registered definition (``workflow``, ``version``: the active version when left out), or
    of signed bytes (``definition`` and its ``signature``; only when the server has a trust policy)."""

    workflow: str | None = Field(None, pattern=NAME, description="A registered definition's name.")
    version: int | None = Field(None, ge=1, le=1_000_000)
    definition: str | None = Field(None, max_length=512_000, description="The definition's YAML text.")
    signature: str | None = Field(None, max_length=256_000,
                                  description="Its DSSE envelope or Sigstore bundle (JSON text).")
    input: Any = Field(default_factory=dict, description="The run's input (JSON).")
    tags: dict[str, str | int | float] | None = Field(
        None, description="Labels to find the run by (name -> value; at most 16, names as workflow names, values "
                          "1 to 200 characters): `GET /v1/runs?tag=name=value`.")


class Submitted(BaseModel):
    run_id: str
    state: str
    workflow: str
    version: int
    plan_digest: str


class RunSummary(BaseModel):
    run_id: str
    workflow: str
    version: int
    state: str
    tenant: str
    initiator: str
    created_at: float
    updated_at: float
    error_class: str | None = None


class RunPage(BaseModel):
    runs: list[RunSummary]
    #: pass as ``cursor`` for the next page; null on the last one
    next_cursor: str | None = None


class CancelRequest(Strict):
    reason: str = Field("", max_length=MAX_REASON_CHARS)


class ResolveRequest(Strict):
    """A person's call on a lost attempt whose outcome is unknown (``runs:resolve``)."""

    decision: Literal["retry", "succeeded", "failed"]
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS, description="What you checked (audited).")
    output: Any = Field(None, description="With succeeded: the step's output, checked as the step's output is.")


class Decision(Strict):
    """Approve or reject a waiting gate, bound to the payload the approver saw (``payload_hash``: the
    gate's ``show_hash`` from ``GET /v1/approvals``)."""

    decision: Literal["approve", "reject"]
    reason: str = Field("", max_length=MAX_REASON_CHARS, description="Required to reject; a comment when approving.")
    payload_hash: str = Field(pattern=HASH, description="The show_hash of the payload you reviewed.")
    edit: Any = Field(None, description="With approve, at an editable gate: the payload as you changed it (checked "
                                        "by the gate's editable schema); the approval binds to it.")


class Health(BaseModel):
    status: str
