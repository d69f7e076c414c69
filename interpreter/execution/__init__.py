"""Execution: the context and Services of a claimed attempt, calls, idempotency, timeouts, secrets, tempfiles,
sandbox, the action registry. Imports core and store.
"""
