"""Tools in the chat: Hearth as an MCP host. The user's MCP servers (mcp.json, as LM Studio, Jan, Claude
Desktop and Cursor keep them), a connection to each through the official `mcp` SDK, and the loop that lets the
model call their tools, each call approved by the user. Used by the CLI (`hearth chat --tools`, `hearth tools`)
and the window alike; Qt-free."""
