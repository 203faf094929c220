"""MCP tools: the session pool, the request allow-list and approvals policy, the tool executor, and
the demo servers (``tools.servers``)."""
