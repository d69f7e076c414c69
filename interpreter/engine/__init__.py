"""The engine: decide (pure), the commit-retry loop, compensation, recovery, and the Engine that executes step
messages. Imports every layer below the service.
"""
