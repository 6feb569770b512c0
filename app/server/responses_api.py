"""OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, and
`GET /v1/responses/{id}/input_items`, as coding agents and the OpenAI Agents SDK call them.

A request runs on the same path as /v1/chat/completions (app/server/responses_request.py turns it into a chat
request: the same slots, limits, key, Host and body checks, schema and tool grammars); only its shape differs.
The answer comes back as output items: a `reasoning` item for a reasoning model's thinking, a `message` with
`output_text`, and a `function_call` per tool call. Streamed, it is the official event sequence
(response.created, .in_progress, .output_item.added, .content_part.added, .output_text.delta, ...,
.completed, or .incomplete / .failed with the reason), each event with its sequence_number.

With `store` (the default, as OpenAI's) a response and its input are kept (app/core/response_store.py), and
`previous_response_id` continues from them: the conversation is read back and sent whole, so the engine's slot
reuses the prompt it still holds for it (usage.input_tokens_details.cached_tokens says how much).
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.core.errors import HearthError
from app.core.reasoning import ReasoningSplitter
from app.core.response_store import BrokenChain, ResponseStore, ResponseStoreError
from app.protocol import messages as P
from app.server.answers import compact_json, event_stream, open_answer, token_counts
from app.server.errors import ApiError, from_engine, invalid
from app.server.responses_request import (ResponsesRequest, chat_messages, new_id, reasoning_for,
                                             responses_request)
from app.server.tools import CallReader, answer_piece

# Why an answer stopped short, as the Responses API says it.
INCOMPLETE = {"length": "max_output_tokens", "context_full": "max_output_tokens"}


class OutputItems:
    """An answer's pieces as Responses output items, and the stream events that build them. Fed the same way
    streamed or not, so a request gets the same items either way."""

    def __init__(self, thinking: bool | None, calls: CallReader | None):
        self.splitter = ReasoningSplitter(thinking) if thinking is not None else None
        self.calls = calls
        self.items: list[dict] = []
        self.events: list[dict] = []  # not yet sent (without their sequence numbers)
        self._reasoning: dict | None = None  # the open reasoning item
        self._message: dict | None = None  # the open message item

    # --- the items as they grow ---------------------------------------------
    def _add(self, item: dict) -> int:
        self.items.append(item)
        self.events.append({"type": "response.output_item.added", "output_index": len(self.items) - 1,
                            "item": {**item, "content": []} if "content" in item else dict(item)})
        return len(self.items) - 1

    def _close_reasoning(self) -> None:
        item, self._reasoning = self._reasoning, None
        if item is None:
            return
        index = self.items.index(item)
        text = item["content"][0]["text"]
        item["status"] = "completed"
        self.events += [{"type": "response.reasoning_text.done", "item_id": item["id"], "output_index": index,
                         "content_index": 0, "text": text},
                        {"type": "response.output_item.done", "output_index": index, "item": item}]

    def _close_message(self) -> None:
        item, self._message = self._message, None
        if item is None:
            return
        index = self.items.index(item)
        part = item["content"][0]
        item["status"] = "completed"
        self.events += [{"type": "response.output_text.done", "item_id": item["id"], "output_index": index,
                         "content_index": 0, "text": part["text"], "logprobs": []},
                        {"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
                         "content_index": 0, "part": part},
                        {"type": "response.output_item.done", "output_index": index, "item": item}]

    def _reason(self, text: str) -> None:
        if self._reasoning is None:
            self._reasoning = {"id": new_id("rs"), "type": "reasoning", "summary": [], "status": "in_progress",
                               "content": [{"type": "reasoning_text", "text": ""}]}
            self._add(self._reasoning)
        self._reasoning["content"][0]["text"] += text
        self.events.append({"type": "response.reasoning_text.delta", "item_id": self._reasoning["id"],
                            "output_index": self.items.index(self._reasoning), "content_index": 0, "delta": text})

    def _text(self, text: str) -> None:
        self._close_reasoning()
        if self._message is None:
            self._message = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                             "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]}
            index = self._add(self._message)
            self.events.append({"type": "response.content_part.added", "item_id": self._message["id"],
                                "output_index": index, "content_index": 0,
                                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})
        self._message["content"][0]["text"] += text
        self.events.append({"type": "response.output_text.delta", "item_id": self._message["id"],
                            "output_index": self.items.index(self._message), "content_index": 0, "delta": text,
                            "logprobs": []})

    def _call(self, name: str, arguments: str) -> None:
        self._close_reasoning()
        self._close_message()
        item = {"id": new_id("fc"), "type": "function_call", "call_id": new_id("call"), "name": name,
                "arguments": "", "status": "in_progress"}
        index = self._add(item)
        item["arguments"], item["status"] = arguments, "completed"
        self.events += [{"type": "response.function_call_arguments.delta", "item_id": item["id"],
                         "output_index": index, "delta": arguments},
                        {"type": "response.function_call_arguments.done", "item_id": item["id"],
                         "output_index": index, "name": name, "arguments": arguments},
                        {"type": "response.output_item.done", "output_index": index, "item": item}]

    # --- the answer's pieces ------------------------------------------------
    def feed(self, piece: str) -> None:
        """One piece of the answer; "" at its end."""
        end = not piece
        if self.splitter is not None:
            reasoning, piece = self.splitter.finish() if end else self.splitter.feed(piece)
            if reasoning:
                self._reason(reasoning)
        text, calls = answer_piece(self.calls, piece) if piece or end else ("", [])
        if text:
            self._text(text)
        for call in calls:
            self._call(call.name, call.arguments)
        if end and piece and self.calls is not None:  # text held back by the splitter, then the end
            text, calls = answer_piece(self.calls, "")
            if text:
                self._text(text)
            for call in calls:
                self._call(call.name, call.arguments)
        if end:
            if not any(i["type"] in ("message", "function_call") for i in self.items):
                self._text("")  # an answer is never without a message or a call
            self._close_reasoning()
            self._close_message()

    def take_events(self) -> list[dict]:
        events, self.events = self.events, []
        return events


class ResponsesApi:
    """The endpoints, on the OpenAI API's server (its model pool, key and guard, app/server/openai_api.py)."""

    def __init__(self, api, store: ResponseStore | None = None):
        self.api = api
        self._store = store
        self._store_lock = asyncio.Lock()

    async def store(self) -> ResponseStore:
        if self._store is None:
            async with self._store_lock:
                if self._store is None:  # opening runs a quick_check: off the event loop
                    self._store = await asyncio.get_running_loop().run_in_executor(None, ResponseStore)
                    if self._store.notice:
                        print(f"hearth serve: {self._store.notice}", flush=True)
        return self._store

    async def _in_store(self, work):
        store = await self.store()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, work, store)
        except ResponseStoreError as exc:
            raise ApiError(503, str(exc), "unavailable_error", code="store_busy",
                           headers={"Retry-After": "1"}) from None

    # --- POST /v1/responses -----------------------------------------------
    async def create(self, request: Request) -> Response:
        body = await self.api.body_of(request)
        history: list[dict] = []
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        if isinstance(previous, str):
            history = await self._conversation(previous)
        req = responses_request(body, self.api.default_max_tokens, history)  # refused before any model loads
        model, backend = await self.api.serving(req.gen.model)
        info = backend.info or {}
        # A reasoning model: its template opens the thinking, or writes <think> blocks of its own.
        thinks = bool(info.get("opens_thinking")) or "<think>" in (info.get("chat_template") or "")
        req.echo["reasoning"] = reasoning_for(body, thinks) or req.echo["reasoning"]
        if req.mcp_labels:
            raise invalid(f"tools: the MCP server '{req.mcp_labels[0]}' is not offered to API clients by this "
                          "server (hearth serve --tools NAME offers one).", "tools", code="unknown_mcp_server")
        gen = req.gen
        tools = gen.tools.tools if gen.tools else None
        stream = self.api.start(backend, lambda sink: backend.chat(gen.messages, gen.sampling, sink,
                                                                   truncate=req.truncate, tools=tools))
        thinking = None
        if (gen.reasoning_format or self.api.reasoning_format) != "none":
            thinking = bool(info.get("opens_thinking"))
        response = self._response_object(req, model)
        output = OutputItems(thinking, CallReader() if gen.tools else None)
        events = await open_answer(request, stream, gen.stream)
        if events is None:
            return Response(status_code=499)
        if gen.stream:
            return event_stream(self._events(req, response, output, events))
        done = None
        async for event in events:
            if isinstance(event, P.Token):
                output.feed(event.text)
            elif isinstance(event, P.Done):
                done = event
            elif isinstance(event, P.Failed):
                raise from_engine(event.kind, event.message)
        if done is None:
            return Response(status_code=499)
        output.feed("")
        self._finish(response, output, done)
        await self._keep(req, response)
        return JSONResponse(response)

    def _response_object(self, req: ResponsesRequest, model: str) -> dict:
        return {"id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "in_progress",
                "background": False, "error": None, "incomplete_details": None, "model": model, "output": [],
                "previous_response_id": req.previous_response_id, "usage": None, **req.echo}

    @staticmethod
    def _finish(response: dict, output: OutputItems, done: P.Done) -> None:
        prompt, completion, cached = token_counts(done)
        reasoning_tokens = 0
        reason = INCOMPLETE.get(done.get("finish_reason"))
        response.update(status="incomplete" if reason else "completed", output=output.items,
                        incomplete_details={"reason": reason} if reason else None,
                        completed_at=None if reason else int(time.time()),
                        usage={"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                               "output_tokens": completion,
                               "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                               "total_tokens": prompt + completion})

    async def _keep(self, req: ResponsesRequest, response: dict) -> None:
        if not req.store:
            return
        try:
            await self._in_store(lambda store: store.put(response, req.input_items, response["output"]))
        except ApiError as exc:  # the answer is given; only its continuation is lost, and the log says why
            print(f"hearth serve: response {response['id']} was not stored: {exc.message}", flush=True)

    async def _events(self, req: ResponsesRequest, response: dict, output: OutputItems,
                      events: AsyncIterator[P.Event]) -> AsyncIterator[bytes]:
        number = 0

        def sse(event: dict) -> bytes:
            nonlocal number
            event["sequence_number"] = number
            number += 1
            return b"event: " + event["type"].encode() + b"\ndata: " + compact_json(event) + b"\n\n"

        yield sse({"type": "response.created", "response": dict(response)})
        yield sse({"type": "response.in_progress", "response": dict(response)})
        async for event in events:
            if isinstance(event, P.Token):
                output.feed(event.text)
                for e in output.take_events():
                    yield sse(e)
            elif isinstance(event, P.Done):
                output.feed("")
                for e in output.take_events():
                    yield sse(e)
                self._finish(response, output, event)
                await self._keep(req, response)
                kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
                yield sse({"type": kind, "response": response})
            elif isinstance(event, P.Failed):  # after the first token: the status line is sent already
                error = from_engine(event.kind, event.message)
                response.update(status="failed", output=output.items,
                                error={"code": error.code or "server_error", "message": error.message})
                yield sse({"type": "response.failed", "response": response})

    async def _conversation(self, previous: str) -> list[dict]:
        try:
            items = await self._in_store(lambda store: store.conversation(previous))
        except BrokenChain as exc:
            raise ApiError(404, str(exc), param="previous_response_id", code="previous_response_not_found") \
                from None
        except HearthError as exc:
            raise invalid(str(exc), "previous_response_id") from None
        if items is None:
            raise ApiError(404, f"Previous response with id '{previous}' not found.", param="previous_response_id",
                           code="previous_response_not_found")
        chat_messages(items)  # stored items read back as a conversation (refused here, not mid-answer)
        return items

    # --- GET / DELETE /v1/responses/{id}, GET .../input_items ---------------
    async def retrieve(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        found = await self._in_store(lambda store: store.get(response_id))
        if found is None:
            raise _not_found(response_id)
        return JSONResponse(found)

    async def delete(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if not await self._in_store(lambda store: store.delete(response_id)):
            raise _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})

    async def input_items(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        items = await self._in_store(lambda store: store.input_items(response_id))
        if items is None:
            raise _not_found(response_id)
        query = request.query_params
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid("'order' must be 'asc' or 'desc'.", "order")
        try:
            limit = int(query.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise invalid("'limit' must be a whole number from 1 to 100.", "limit")
        if order == "desc":
            items = items[::-1]
        ids = [item["id"] for item in items]
        for name, offset in (("after", 1), ("before", 0)):
            mark = query.get(name)
            if mark is not None:
                if mark not in ids:
                    raise invalid(f"'{name}' must be the id of one of this response's input items.", name)
                at = ids.index(mark)
                items, ids = (items[at + 1:], ids[at + 1:]) if offset else (items[:at], ids[:at])
        page = items[:limit]
        return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", param="response_id", code="not_found")
