"""``/metrics``: the Prometheus exposition of the runtime this server works on
(:mod:`sealflow.runtime.telemetry.metrics`). Served without a credential, like ``/healthz``: the
metrics carry counts by state, kind and error class, never run ids, inputs or tenants' data; keep the port on
the scrape network (docs/operations.md "Metrics")."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from sealflow.runtime.telemetry.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(request.app.state.runtime.telemetry.metrics.exposition(), media_type=CONTENT_TYPE)
