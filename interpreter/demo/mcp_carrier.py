"""The demo carrier's MCP server (stdio, the official SDK's FastMCP): what ``definitions/shipment-check.v1.yaml``
asks through ``mcp: {carrier: ...}``. Start it with ``python -m sealflow.demo.mcp_carrier``.

Tools:

- ``track_shipment(order_id) -> {order_id, carrier, status, events}``: where a demo order's parcel is (read);
- ``reroute_shipment(order_id, address) -> {order_id, rerouted_to}``: sends the parcel elsewhere (irreversible;
  the demo only answers, it changes nothing).

Its answers are fixed (no clock, no network), so a run is the same every time. ``track_shipment`` of an unknown
order answers with an error result (``isError``), as an MCP tool reports a failure.
"""

from __future__ import annotations

import sys
from typing import Any

#: the demo world's ``mcp:`` servers: what the embedded quick start configures when nothing names them
SERVERS: dict[str, dict[str, Any]] = {
    "carrier": {"command": sys.executable, "args": ["-m", "sealflow.demo.mcp_carrier"], "timeout": "30s"},
}

SHIPMENTS: dict[str, dict[str, Any]] = {
    "ord_5521": {"carrier": "DemoPost", "status": "held_at_depot",
                 "events": ["label created", "picked up", "held at depot: address incomplete"]},
    "ord_5600": {"carrier": "DemoPost", "status": "delivered", "events": ["label created", "picked up", "delivered"]},
}


def build() -> Any:
    """The FastMCP server (built on demand: importing this module starts nothing)."""
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("sealflow-demo-carrier")

    @server.tool()
    def track_shipment(order_id: str) -> dict[str, Any]:
        """Where the parcel of a demo order is: its carrier, status and tracking events."""
        found = SHIPMENTS.get(order_id)
        if found is None:
            raise ValueError(f"no shipment for order {order_id}")
        return {"order_id": order_id, **found}

    @server.tool()
    def reroute_shipment(order_id: str, address: str) -> dict[str, Any]:
        """Send the parcel of a demo order to another address (cannot be undone)."""
        return {"order_id": order_id, "rerouted_to": address}

    return server


if __name__ == "__main__":
    build().run("stdio")
