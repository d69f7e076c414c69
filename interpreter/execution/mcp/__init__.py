"""MCP (Model Context Protocol) servers as tool sources for agent steps: their configuration (``servers``), a
client of the official SDK that lists a server's tools and calls one (``client``), and the comparison of a live
tool with its locked digests (``pinning``). Sealflow's timeouts, retry classes and breakers are the one retry
layer: the client never retries (docs/agents.md, "MCP tools")."""
