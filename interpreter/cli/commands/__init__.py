"""One module per command group, named after it; each has ``register(group)`` (see ``sealflow.cli.COMMANDS``)."""
