"""The example project's one action (docs/runtime.md): replace this module with your own."""

from sealflow import action


@action("hello.greet", effect="read")
def greet(ctx, name: str) -> dict[str, str]:
    """Greet ``name`` from the deployment (a read: no effect outside the run)."""
    return {"greeting": f"hello, {name}"}
