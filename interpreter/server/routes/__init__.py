"""One module per resource of the API; each exposes ``router``."""
