"""The client side of the seam: what runs in the window's, the CLI's or the server's process.

The `Backend` protocol (backend.py) is what every client talks to. Behind it, the local engine is a child
process that the Supervisor (supervisor.py) starts, restarts after a crash and falls back for, over the
pipe of transport.py; a RemoteEndpoint (remote.py) is any OpenAI-compatible server instead. client.py is the
blocking convenience the CLI and tests use. The engine process itself lives in app/engine and shares only
app/protocol/messages.py with this side.
"""
