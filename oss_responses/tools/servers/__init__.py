"""Demo MCP servers shipped with the project (calculator, documents); each runs as its own process."""
