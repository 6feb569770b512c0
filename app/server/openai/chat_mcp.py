"""Hearth's MCP tools in /v1/chat/completions, where the user asked for it (`hearth serve --tools NAME
--tools-in-chat`, the Server page's "Also in chat completions"; off by default, and /v1/responses needs only
--tools).

A chat request names a server as in the Responses API: `{"type": "mcp", "server_label": NAME}` among its `tools`,
beside its own function tools. The answer runs in the Responses API's rounds (app/server/responses/endpoints.py's
AnswerRounds): the server runs the model's calls to that server's tools, under the user's allow-list
(app/server/api_tools.py), and the model answers again with their results (up to `max_tool_calls` calls, as
in the Responses API). What comes back is a chat completion: the text, the client's own function calls as
`tool_calls`, and the calls the server ran under `mcp_calls` (each with its server, tool, arguments, and output
or error), a field of Hearth's own, since chat completions has no item for them. Streamed, each ran call is a
chunk whose delta holds `mcp_calls`.
"""

from __future__ import annotations

import secrets
import time
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.server.answers import chat_usage, event_stream, finish_reason, limit_cut, sse_data
from app.server.edge.errors import ApiError, invalid
from app.server.media_parts import refuse_unless_takes
from app.server.openai.chat_request import chat_request
from app.server.responses.endpoints import AnswerRounds, OutputItems
from app.server.responses.request import ResponsesRequest, max_tool_calls, mcp_entry
from app.server.tools import CallReader


def names_mcp(body) -> bool:
    """Whether a chat request names an MCP server among its tools."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools)


def mcp_call(item: dict) -> dict:
    """A ran mcp_call item as the chat completion reports it."""
    error = item.get("error")
    return {"server_label": item["server_label"], "name": item["name"], "arguments": item["arguments"],
            "output": item.get("output"), "error": error["content"][0]["text"] if error else None}


def tool_call(item: dict, index: int | None = None) -> dict:
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}
    return call if index is None else {"index": index, **call}


class ChatWithMcp:
    """POST /v1/chat/completions for a request that names an MCP server (the OpenAI API sends it here)."""

    def __init__(self, responses):
        """responses: the server's ResponsesApi, whose offered servers and rounds these requests share."""
        self.responses = responses

    async def __call__(self, request: Request, body: dict) -> Response:
        offered = self.responses.api_tools
        if offered is None or not offered.in_chat:
            raise invalid("tools: this server offers its MCP servers through chat completions only where its user "
                          "asked for it (hearth serve --tools NAME --tools-in-chat); /v1/responses takes them "
                          "with --tools alone.", "tools", code="unsupported_tool")
        await self.responses.settle_tools(body)
        labels: dict[str, list[str] | None] = {}
        own = []
        for i, tool in enumerate(body["tools"]):
            if isinstance(tool, dict) and tool.get("type") == "mcp":
                mcp_entry(tool, f"tools[{i}]", labels)
            else:
                own.append(tool)
        limit = max_tool_calls(body)  # as in /v1/responses: the calls the server runs for this answer
        mcp = self.responses.mcp_tools(labels)
        api = self.responses.api
        chat = {k: v for k, v in body.items() if k != "max_tool_calls"}
        gen = chat_request({**chat, "tools": own + [f for _, functions in mcp.values() for f in functions]},
                           api.defaults)
        model, backend = await api.serving(gen.model)
        refuse_unless_takes(gen.messages, model, backend.info)
        output = OutputItems(api.thinking(gen, backend), CallReader(gen.tools.names if gen.tools else ()),
                             {f["function"]["name"]: label for label, (_, functions) in mcp.items() for f in functions})
        req = ResponsesRequest(gen=gen, input_items=[], previous_response_id=None, store=False,
                               echo={"max_tool_calls": limit})
        answer = AnswerRounds(self.responses, request, req, backend, output)
        if not await answer.open():
            return Response(status_code=499)
        head = {"id": "chatcmpl-" + secrets.token_hex(12), "created": int(time.time()), "model": model,
                "system_fingerprint": None}
        if gen.stream:
            return event_stream(self._chunks(head, answer, gen.include_usage))
        async for _ in answer.rounds():
            pass
        if answer.done is None:
            return Response(status_code=499)
        items = output.items
        reasoning = "".join(i["content"][0]["text"] for i in items if i["type"] == "reasoning")
        calls = [tool_call(i) for i in items if i["type"] == "function_call"]
        text = "\n\n".join(t for t in (i["content"][0]["text"] for i in items if i["type"] == "message") if t)
        message = {"role": "assistant", "content": text or (None if calls else ""), "refusal": None,
                   "mcp_calls": [mcp_call(i) for i in items if i["type"] == "mcp_call"]}
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "logprobs": None,
                  "finish_reason": finish_reason(answer.done, bool(calls), limit_cut(answer.done, output.calls))}
        return JSONResponse({**head, "object": "chat.completion", "choices": [choice],
                             "usage": chat_usage(answer.done)})

    @staticmethod
    async def _chunks(head: dict, answer: AnswerRounds, include_usage: bool) -> AsyncIterator[bytes]:
        def chunk(delta: dict, reason: str | None = None) -> bytes:
            return sse_data({**head, "object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]})

        yield chunk({"role": "assistant", "content": ""})
        calls = 0
        wrote = apart = False  # words came already; a round's new message starts after them (a blank line, as whole)
        try:
            async for events in answer.rounds():
                for event in events:
                    kind = event["type"]
                    if kind == "response.output_item.added" and event["item"]["type"] == "message":
                        apart = wrote
                    elif kind == "response.output_text.delta" and event["delta"]:
                        yield chunk({"content": ("\n\n" if apart else "") + event["delta"]})
                        wrote, apart = True, False
                    elif kind == "response.reasoning_text.delta" and event["delta"]:
                        yield chunk({"reasoning_content": event["delta"]})
                    elif kind == "response.output_item.done" and event["item"]["type"] == "function_call":
                        yield chunk({"tool_calls": [tool_call(event["item"], calls)]})
                        calls += 1
                    elif kind == "response.output_item.done" and event["item"]["type"] == "mcp_call":
                        yield chunk({"mcp_calls": [mcp_call(event["item"])]})
        except ApiError as error:  # after the first chunk: the status line is sent already
            yield sse_data(error.body())
            yield b"data: [DONE]\n\n"
            return
        if answer.done is None:  # the client left
            return
        yield chunk({}, finish_reason(answer.done, bool(calls), limit_cut(answer.done, answer.output.calls)))
        if include_usage:
            yield sse_data({**head, "object": "chat.completion.chunk", "choices": [], "usage": chat_usage(answer.done)})
        yield b"data: [DONE]\n\n"
