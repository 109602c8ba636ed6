"""The MCP server of work-ledger: the agent's tools over the SDK (never the server side)."""

from work_ledger.mcp.server import build_server

__all__ = ["build_server"]
