"""What every model turn of an agent takes before it is made: the tenant's reservation and the model's rate limit.

Before each turn the conversation's usage not yet charged plus the turn's worst case (an upper bound of
everything sent: goal, system, schema, tools and transcript, plus ``max_tokens``, else the model's
configured ``max_tokens``, else the ``ai`` default cap) is reserved against the step's budget and the
tenant's daily quota (:func:`sealflow.policy.budgets.reserve`, as for ``ai`` steps); then the
model's rate limit is taken (:mod:`sealflow.policy.limits`) and settled with the real tokens
after the turn.

A turn over the rate limit is not made: the attempt ends **waiting** on a timer in the store with the
conversation so far in its data (:data:`PARKED`), and what the turns so far used is charged with the wait.
When the timer fires the same attempt continues the conversation where it stopped (:func:`resume`):
tool calls already made are not made again, and only what is used after the wait is charged then.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sealflow.core.outcomes import Failed, Waiting
from sealflow.policy import budgets, limits
from sealflow.steps.agent.conversation import Conversation
from sealflow.steps.ai import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from sealflow.dsl.plan import AgentPlan
    from sealflow.providers.base import ModelRequest

#: the attempt-data key holding a conversation that waits for its model's rate limit
PARKED = "agent_parked"
_STATE = ("transcript", "calls", "tokens", "cost", "tool_calls", "turns", "refusals", "in_a_row", "seen",
          "base_key", "model")  # and "billed"


def max_tokens(agent: AgentPlan, provider: object) -> int:
    """The most output tokens one turn may use (sent with the request, and reserved)."""
    if agent.max_tokens is not None:
        return int(agent.max_tokens)
    configured = getattr(getattr(provider, "config", None), "max_tokens", None)
    return configured if isinstance(configured, int) and configured > 0 else DEFAULT_MAX_TOKENS


def worst_case(provider: object, request: ModelRequest) -> tuple[int, float]:
    """The most tokens and USD one turn may cost: every byte sent counts as a token (an upper bound), plus
    per-message overhead, plus ``max_tokens``."""
    sent = json.dumps([request.system, request.prompt, request.output_schema,
                       [(t.name, t.description, dict(t.parameters)) for t in request.tools],
                       list(request.transcript)], default=repr, ensure_ascii=False)
    tokens_in = len(sent.encode("utf-8")) + 32 * (1 + len(request.transcript))
    tokens_out = request.max_tokens or DEFAULT_MAX_TOKENS
    price = getattr(provider, "price", None)
    cost = float(price.cost(tokens_in, tokens_out)) if price is not None else 0.0
    return tokens_in + tokens_out, cost


def before_turn(loop: Conversation, provider: object, request: ModelRequest) -> limits.Grant | Failed | Waiting | None:
    """Reserve and take the rate limit for one turn: a grant (or None: no limit) lets it be made; a failure
    ends the attempt (budget, quota, a turn that can never fit); a :class:`Waiting` parks the conversation."""
    x = loop.x
    tokens, cost, _ = loop.unbilled()
    worst_t, worst_c = worst_case(provider, request)
    refused = budgets.reserve(x, tokens + worst_t, cost + worst_c)
    if refused is not None:
        failed = loop.fail(refused.error_class, refused.message, refused.retry_after)
        failed.ends_run = refused.ends_run
        return failed
    taken = limits.take(x, loop.agent.model, provider, worst_t)
    if isinstance(taken, Failed):
        return loop.fail(taken.error_class, taken.message)
    if isinstance(taken, limits.Parked):
        loop.turns -= 1  # the turn was not made
        state = {k: getattr(loop, k) for k in _STATE}
        state["billed"] = [loop.tokens, loop.cost, loop.tool_calls]  # charged with this wait
        return limits.waiting(x, [taken], {PARKED: state}, tokens=tokens, cost_usd=cost,
                              tool_calls=loop.unbilled()[2])
    return taken


def resume(loop: Conversation) -> None:
    """Continue a conversation that waited for its model's rate limit (what it used so far is charged)."""
    state = loop.x.attempt.data.get(PARKED) or {}
    for k in _STATE:
        if k in state:
            setattr(loop, k, state[k])
    billed = state.get("billed") or [0, 0.0, 0]
    loop.billed = (int(billed[0]), float(billed[1]), int(billed[2]))
