"""How long and how far the tool loop goes, the same on every surface that offers tools (the CLI's flags and
defaults, the window, the API's MCP tools): light at import, so that the command line reads them without the MCP
SDK or asyncio."""

CONNECT_TIMEOUT_S = 30.0  # a server's start, up to its list of tools
CALL_TIMEOUT_S = 60.0  # one call
MAX_ROUNDS = 4  # rounds of calls in one answer before the model must answer in words
