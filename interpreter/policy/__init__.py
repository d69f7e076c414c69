"""Policy: access, authorisation, approval decisions (pure), budgets, the trust gate. Imports core, store and
execution.
"""
