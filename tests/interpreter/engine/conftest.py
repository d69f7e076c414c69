"""Fixtures the engine's fan-out and call tests share: ``world`` (a recording world with a runtime on each store)
and ``gated`` (the same with a trust-gated worker), from fanout_helpers.py. A module that defines its own
fixture of either name uses its own."""

from fanout_helpers import fanout_world, gated_world  # noqa: F401 - the fixtures world and gated
