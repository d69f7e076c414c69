"""The SQLite store (the embedded default): store (the Store implementation), schema, rows, admission, steps,
sweep.
"""
