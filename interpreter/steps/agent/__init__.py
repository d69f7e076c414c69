"""The agent step kind: the step (step), its bounded tool loop (loop) and tool specs from action signatures
(tools).
"""
