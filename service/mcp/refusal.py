"""`ToolRefused`: a tool call the server will not run, answered to the agent as an MCP tool
error result (``isError``), never as a protocol error or an HTTP status."""
from __future__ import annotations


class ToolRefused(Exception):
    """Raised with the sentence the agent reads."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
