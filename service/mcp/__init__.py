"""The pool as MCP tools (`/mcp`, routes/mcp.py): what each tool does with the checked,
leased engine calls of inference/, and the SDK server that lists and calls them. Nothing
here reads a Sanic request: the route hands each call a `tools.ToolContext`."""
