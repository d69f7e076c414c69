"""The service layer: the Runtime (submit, approve, cancel, redrive), approvals applied, actors, dispatcher,
sweeper, status, dead letters, configuration.
"""
