"""The API's tool calling: the engine's tool machinery (app/protocol/tool_calls.py, which the CLI and the window
use for MCP tools too), with its BadSchema as the API's 400 that names the field."""

from __future__ import annotations

from app.protocol import tool_calls
from app.protocol.tool_calls import CallReader, ToolCall, ToolUse, answer_piece
from app.server.structured import api_errors

__all__ = ["CallReader", "ToolCall", "ToolUse", "answer_piece", "tool_grammar", "tool_use"]


def tool_use(body: dict) -> ToolUse | None:
    with api_errors():
        return tool_calls.tool_use(body)


def tool_grammar(use: ToolUse) -> str:
    with api_errors():
        return tool_calls.tool_grammar(use)
