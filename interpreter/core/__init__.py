"""The lowest layer: step references, states and error classes, outcomes, retry arithmetic, leases, compact JSON,
clock, fingerprints, redaction, errors. Imports nothing of the runtime (docs/runtime.md, "Layers").
"""
