"""The language's hard caps (docs/decisions.md item 14) and the error classes no retry may list."""

from __future__ import annotations

from sealflow.dsl.durations import DAY, HOUR

NEVER_RETRYABLE = {"invalid_request", "unauthorized", "policy_denied", "budget_exceeded", "configuration", "cancelled"}

# hard caps (docs/decisions.md item 14)
MAX_ATTEMPTS = 20
STEP_TIMEOUT_MS = (1, 6 * HOUR)
APPROVAL_TIMEOUT_MAX = 30 * DAY
WAIT_FOR_MAX = 365 * DAY
BACKOFF_MAX_MS = 24 * HOUR
BACKOFF_FACTOR = (1.0, 10.0)
RUNTIME_MAX = 30 * DAY
CAPS = {"max_steps": 10_000, "max_tokens": 10_000_000, "max_cost_usd": 10_000, "max_tool_calls": 10_000}
AGENT_MAX_STEPS = 100
QUORUM_MAX = 10
#: fan-out (``map``, ``parallel``): items in flight at once, items in one list, branches of a ``parallel``
MAP_CONCURRENCY_MAX = 100
MAP_ITEMS_MAX = 10_000
PARALLEL_BRANCHES_MAX = 20
#: how deep calls nest: a workflow that calls one that calls one ... (the caller is depth 0)
CALL_DEPTH_MAX = 4
