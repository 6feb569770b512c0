"""OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, and
`GET /v1/responses/{id}/input_items`, as coding agents and the OpenAI Agents SDK call them.

A request runs on the same path as /v1/chat/completions (app/server/responses/request.py turns it into a chat
request: the same slots, limits, key, Host and body checks, schema and tool grammars); only its shape differs.
The answer comes back as output items: a `reasoning` item for a reasoning model's thinking, a `message` with
`output_text`, and a `function_call` per tool call. Streamed, it is the official event sequence
(response.created, .in_progress, .output_item.added, .content_part.added, .output_text.delta, ...,
.completed, or .incomplete / .failed with the reason), each event with its sequence_number.

With `store` (the default, as OpenAI's) a response and its input are kept (app/server/responses/store.py), and
`previous_response_id` continues from them: the conversation is read back and sent whole, so the engine's slot
reuses the prompt it still holds for it (usage.input_tokens_details.cached_tokens says how much).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.core.errors import HearthError
from app.core.chats.reasoning import ReasoningSplitter
from app.server.responses.store import (MAX_CONVERSATION_BYTES, BrokenChain, ResponseStore, ResponseStoreError,
                                     TooBigToStore)
from app.protocol import messages as P
from app.server.answers import event_stream, limit_cut, named_sse, open_answer, stream_parts, token_counts
from app.server.edge.errors import ApiError, from_engine, invalid
from app.server.responses.request import ResponsesRequest, new_id, reasoning_for, responses_request
from app.server.api_tools import ApiTools
from app.server.edge.limits import MemoryBudget
from app.server.media_parts import refuse_unless_takes
from app.server.edge.streams import close_with_request
from app.server.tools import CallReader, tool_grammar

MAX_ROUNDS = 4  # rounds of MCP calls in one answer before the model must answer in words (as the window's)
MAX_MCP_CALLS = 16  # without max_tool_calls
# The stored conversations that continuations read back (previous_response_id) hold this many bytes together at
# most (two of the biggest at once): thirty continuations of a 54 MB chain, each body 100 bytes, grew the server
# by 2 GB when each read its own. A conversation read costs about seven times its bytes while it is answered
# (the items, the messages, their JSON to the engine, the engine's own copy).
CONVERSATIONS_HELD_BYTES = 2 * MAX_CONVERSATION_BYTES
# Why an answer stopped short, as the Responses API says it.
INCOMPLETE = {"length": "max_output_tokens", "context_full": "max_output_tokens"}


class OutputItems:
    """An answer's pieces as Responses output items, and the stream events that build them. Fed the same way
    streamed or not, so a request gets the same items either way."""

    def __init__(self, thinking: bool | None, calls: CallReader | None, mcp: dict[str, str] | None = None,
                 namespaces: dict[str, str] | None = None):
        """mcp: the MCP tools' names and the server each belongs to; a call to one is an mcp_call item.
        namespaces: the functions a namespace tool gave, by name; a call to one says its namespace."""
        self.opened = thinking
        self.splitter = ReasoningSplitter(thinking) if thinking is not None else None
        self.calls = calls
        self.mcp = mcp or {}
        self.namespaces = namespaces or {}
        self.pending: list[dict] = []  # mcp_call items to run after this round
        self.said = ""  # this round's text: what the model wrote before its calls
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
        self.said += text
        self.events.append({"type": "response.output_text.delta", "item_id": self._message["id"],
                            "output_index": self.items.index(self._message), "content_index": 0, "delta": text,
                            "logprobs": []})

    def _call(self, name: str, arguments: str) -> None:
        self._close_reasoning()
        self._close_message()
        if name in self.mcp:
            item = {"id": new_id("mcp"), "type": "mcp_call", "server_label": self.mcp[name], "name": name,
                    "arguments": arguments, "output": None, "error": None, "status": "in_progress"}
            index = self._add(item)
            self.pending.append(item)
            self.events += [{"type": "response.mcp_call_arguments.delta", "item_id": item["id"],
                             "output_index": index, "delta": arguments},
                            {"type": "response.mcp_call_arguments.done", "item_id": item["id"],
                             "output_index": index, "arguments": arguments},
                            {"type": "response.mcp_call.in_progress", "item_id": item["id"], "output_index": index}]
            return
        item = {"id": new_id("fc"), "type": "function_call", "call_id": new_id("call"),
                **({"namespace": self.namespaces[name]} if name in self.namespaces else {}), "name": name,
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
        reasoning, parts = stream_parts(self.splitter, self.calls, piece)
        if reasoning:
            self._reason(reasoning)
        for text, calls in parts:
            if text:
                self._text(text)
            for call in calls:
                self._call(call.name, call.arguments)
        if end:
            if not any(i["type"] in ("message", "function_call") for i in self.items) and not self.pending:
                self._text("")  # an answer is never without a message or a call
            self._close_reasoning()
            self._close_message()

    def listed(self, label: str, tools: list, error: str | None = None) -> None:
        """The tools of an MCP server the request named, as the mcp_list_tools item that starts the output;
        error: why there are none (the server is not running now)."""
        item = {"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": label, "error": error,
                "tools": [{"name": t.name, "description": t.description, "input_schema": t.schema,
                           "annotations": None} for t in tools]}
        index = self._add(item)
        self.events += [{"type": "response.mcp_list_tools.in_progress", "item_id": item["id"], "output_index": index},
                        {"type": "response.mcp_list_tools.completed", "item_id": item["id"], "output_index": index},
                        {"type": "response.output_item.done", "output_index": index, "item": item}]

    def ran(self, item: dict, output: str | None, error: str | None) -> None:
        """An MCP call's result."""
        index = self.items.index(item)
        item.update(output=output, status="failed" if error else "completed",
                    error=None if error is None else {"type": "mcp_tool_execution_error",
                                                      "content": [{"type": "text", "text": error}]})
        self.events += [{"type": "response.mcp_call.failed" if error else "response.mcp_call.completed",
                         "item_id": item["id"], "output_index": index},
                        {"type": "response.output_item.done", "output_index": index, "item": item}]

    def next_round(self, read_calls: bool = True) -> None:
        """The model answers again after its MCP calls: its text is a new message (read_calls False: the last
        round, whose text is all words)."""
        self.splitter = ReasoningSplitter(self.opened) if self.opened is not None else None
        self.calls = CallReader(self.calls.names) if self.calls is not None and read_calls else None
        self.pending, self.said = [], ""

    def take_events(self) -> list[dict]:
        events, self.events = self.events, []
        return events


class AnswerRounds:
    """One answer, in rounds: the model answers; where it called MCP tools of this server (and no function of the
    client's), the server runs them and the model answers again with their results, up to max_tool_calls calls
    or MAX_ROUNDS rounds, after which it must answer in words."""

    def __init__(self, api: "ResponsesApi", request: Request, req: ResponsesRequest, backend, output: OutputItems):
        self.api, self.request, self.req, self.backend, self.output = api, request, req, backend, output
        self.messages = list(req.gen.messages)
        self.use = req.gen.tools
        self.sampling = req.gen.sampling
        self.events: AsyncIterator[P.Event] | None = None
        self.done: dict | None = None
        self.calls = 0
        self.limit = req.echo.get("max_tool_calls") or MAX_MCP_CALLS
        self._one_call_left()

    async def open(self) -> bool:
        """Starts a round; False when the client left before its first event. An engine error before then is the
        request's status (ApiError)."""
        tools = self.use.tools if self.use else None
        stream = self.api.api.chat_stream(self.backend, self.messages, self.sampling, tools, self.req.truncate)
        self.events = await open_answer(self.request, stream, self.req.gen.stream)
        return self.events is not None

    async def rounds(self) -> AsyncIterator[list[dict]]:
        """The stream events of each piece of the answer, every round's; self.done holds the usage of all rounds
        at the end (None: the client left)."""
        totals = {"prompt_tokens": 0, "completion_tokens": 0, "prompt_evaluated": 0}
        for round_ in range(MAX_ROUNDS + 1):
            done = None
            async for event in self.events:
                if isinstance(event, P.Token):
                    self.output.feed(event.text)
                    yield self.output.take_events()
                elif isinstance(event, P.Done):
                    done = event
                elif isinstance(event, P.Failed):
                    raise from_engine(event.kind, event.message)
            if done is None:
                return
            self.output.feed("")
            yield self.output.take_events()
            for key in totals:
                totals[key] += int(done.get(key) or 0)
            self.done = {**done, **totals}
            pending = self.output.pending
            client_calls = any(i["type"] == "function_call" for i in self.output.items)
            if not pending or client_calls or done.get("finish_reason") in ("cancelled", "length", "context_full"):
                return
            calls = []
            for item in pending:
                if self.calls < self.limit:
                    ran = await self._run(item)
                    if ran is None:  # the client left during the call, which was stopped
                        self.done = None
                        return
                    self.calls += 1
                else:  # a call past the limit is never run: said in its item, and to the model
                    ran = None, self._over_limit()
                self.output.ran(item, *ran)
                calls.append((item, *ran))
                yield self.output.take_events()
            self.messages.append({"role": "assistant", "content": self.output.said, "tool_calls": [
                {"id": item["id"], "type": "function", "function": {"name": item["name"],
                                                                    "arguments": item["arguments"]}}
                for item, _, _ in calls]})
            self.messages += [{"role": "tool", "tool_call_id": item["id"], "name": item["name"],
                               "content": output if error is None else f"Error: {error}"}
                              for item, output, error in calls]
            # The last round answers in words: no grammar offers a call, and none it writes is read as one.
            last = round_ + 1 >= MAX_ROUNDS or self.calls >= self.limit
            self.use = replace(self.use, choice="none" if last else "auto", forced=None)
            self._one_call_left()
            self.sampling = replace(self.sampling, grammar=tool_grammar(self.use) if self.use.active else "")
            self.output.next_round(read_calls=not last)
            if not await self.open():
                self.done = None
                return

    def _one_call_left(self) -> None:
        """With one call left, the grammar lets the model write only one (parallel calls past the limit would be
        written, then refused)."""
        if self.use is not None and self.use.parallel and self.limit - self.calls <= 1:
            self.use = replace(self.use, parallel=False)
            if self.use.active:
                self.sampling = replace(self.sampling, grammar=tool_grammar(self.use))

    def _over_limit(self) -> str:
        return (f"Not run: this answer may make at most {self.limit} tool call{'s' if self.limit > 1 else ''} "
                f"(max_tool_calls), and it has made them.")

    async def _run(self, item: dict) -> tuple[str | None, str | None] | None:
        """(output, error) of one MCP call, on the tools' own pool, its output cut to the share of the context a
        tool result may take; None when the client left meanwhile (the call is stopped then)."""
        try:
            parsed = json.loads(item["arguments"] or "{}")
        except ValueError:
            return None, f"The arguments of '{item['name']}' are not JSON."
        info = self.backend.info or {}
        # A streamed answer's client is watched by its response (which cancels this); a plain one's, here.
        gone = None if self.req.gen.stream else self.request.is_disconnected
        return await self.api.api_tools.call(item["server_label"], item["name"], parsed if isinstance(parsed, dict)
                                             else {}, int(info.get("n_ctx") or 2048), info.get("path"), gone)


class ResponsesApi:
    """The endpoints, on the OpenAI API's server (its model pool, key and guard, app/server/openai/endpoints.py)."""

    def __init__(self, api, store: ResponseStore | None = None, api_tools: ApiTools | None = None):
        """api_tools: the MCP servers offered to API clients (hearth serve --tools), None for none."""
        self.api = api
        self.api_tools = api_tools
        self._store = store
        self._store_lock = asyncio.Lock()
        self.conversations_held = MemoryBudget(CONVERSATIONS_HELD_BYTES)

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
            history = await self._conversation(request, previous)
            if history is None:  # the client left while it waited for the memory to read it
                return Response(status_code=499)
        mcp: dict[str, tuple[list, list[dict]]] = {}  # the MCP servers it names: their tools, as functions

        def mcp_functions(labels: dict[str, list[str] | None]) -> list[dict]:
            mcp.update(self.mcp_tools(labels))
            return [f for _, functions in mcp.values() for f in functions]

        await self.settle_tools(body)
        # Refused before any model loads.
        req = responses_request(body, self.api.defaults, history, mcp_functions)
        model, backend = await self.api.serving(req.gen.model)
        refuse_unless_takes(req.gen.messages, model, backend.info)
        info = backend.info or {}
        # A reasoning model: its template opens the thinking, or writes <think> blocks of its own.
        thinks = bool(info.get("opens_thinking")) or "<think>" in (info.get("chat_template") or "")
        req.echo["reasoning"] = reasoning_for(body, thinks) or req.echo["reasoning"]
        output = OutputItems(self.api.thinking(req.gen, backend), CallReader(req.gen.tools.names) if req.gen.tools else None,
                             {f["function"]["name"]: label for label, (_, functions) in mcp.items()
                              for f in functions}, req.namespaces)
        for label, (tools, _) in mcp.items():
            output.listed(label, tools, self.api_tools.problem(label))
        response = self._response_object(req, model)
        answer = AnswerRounds(self, request, req, backend, output)
        if not await answer.open():
            return Response(status_code=499)
        if req.gen.stream:
            return event_stream(self._events(req, response, answer))
        async for _ in answer.rounds():
            pass
        if answer.done is None:
            return Response(status_code=499)
        self._finish(response, output, answer.done)
        await self._keep(req, response)
        return JSONResponse(response)

    async def settle_tools(self, body) -> None:
        """Where the request names an offered MCP server that is starting again (it had stopped), a moment for it
        to come back, so that its tools are listed (app/server/api_tools.py)."""
        tools = body.get("tools") if isinstance(body, dict) else None
        labels = [t.get("server_label") for t in tools if isinstance(t, dict) and t.get("type") == "mcp"] \
            if isinstance(tools, list) else []
        if self.api_tools is not None and labels:
            await self.api_tools.settle([label for label in labels if isinstance(label, str)])

    def mcp_tools(self, labels: dict[str, list[str] | None]) -> dict[str, tuple[list, list[dict]]]:
        """{server label: (its tools, as function tools)} for the MCP servers a request names, each narrowed to the
        tools it lists; 400 for one this server does not offer."""
        offered = self.api_tools
        out = {}
        for label, only in labels.items():
            if offered is None or label not in offered.labels:
                names = ", ".join(offered.labels) if offered else "none: hearth serve --tools NAME offers one"
                raise invalid(f"tools: the MCP server '{label}' is not offered to API clients by this server "
                              f"(offered: {names}).", "tools", code="unknown_mcp_server")
            out[label] = (offered.tools(label, only), offered.functions(label, only))
        return out

    def _response_object(self, req: ResponsesRequest, model: str) -> dict:
        return {"id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "in_progress",
                "background": False, "error": None, "incomplete_details": None, "model": model, "output": [],
                "previous_response_id": req.previous_response_id, "usage": None, **req.echo}

    @staticmethod
    def _finish(response: dict, output: OutputItems, done: dict) -> None:
        prompt, completion, cached = token_counts(done)
        reason = INCOMPLETE.get(done.get("finish_reason")) if limit_cut(done, output.calls) else None
        response.update(status="incomplete" if reason else "completed", output=output.items,
                        incomplete_details={"reason": reason} if reason else None,
                        completed_at=None if reason else int(time.time()),
                        usage={"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                               "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                               "total_tokens": prompt + completion})

    async def _keep(self, req: ResponsesRequest, response: dict) -> None:
        if not req.store:
            return
        try:
            await self._in_store(lambda store: store.put(response, req.input_items, response["output"]))
        except (ApiError, TooBigToStore) as exc:  # the answer is given; only its continuation is lost: the log says
            print(f"hearth serve: response {response['id']} was not stored: {getattr(exc, 'message', exc)}",
                  flush=True)

    async def _events(self, req: ResponsesRequest, response: dict, answer: "AnswerRounds") -> AsyncIterator[bytes]:
        number = 0

        def sse(event: dict) -> bytes:
            nonlocal number
            event["sequence_number"] = number
            number += 1
            return named_sse(event)

        yield sse({"type": "response.created", "response": dict(response)})
        yield sse({"type": "response.in_progress", "response": dict(response)})
        try:
            async for events in answer.rounds():
                for event in events:
                    yield sse(event)
        except ApiError as error:  # after the first token: the status line is sent already
            response.update(status="failed", output=answer.output.items,
                            error={"code": error.code or "server_error", "message": error.message})
            yield sse({"type": "response.failed", "response": response})
            return
        if answer.done is None:  # the client left
            return
        self._finish(response, answer.output, answer.done)
        await self._keep(req, response)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        yield sse({"type": kind, "response": response})

    async def _conversation(self, request: Request, previous: str) -> list[dict] | None:
        """The stored conversation a request continues, read once the memory it takes is this request's (held
        until the request ends); None when the client left while it waited."""
        size = await self._chain(lambda store: store.conversation_size(previous), previous)
        held = await self.conversations_held.take(size, request.is_disconnected)
        if held is None:
            return None
        if not close_with_request(held):
            held.close()  # outside a request's scope (a test's direct call): nothing to hold it for
        return await self._chain(lambda store: store.conversation(previous), previous)

    async def _chain(self, work, previous: str):
        """work(store) on the chain that ends with `previous`: its errors as the API says them."""
        try:
            found = await self._in_store(work)
        except BrokenChain as exc:
            raise ApiError(404, str(exc), param="previous_response_id", code="previous_response_not_found") \
                from None
        except HearthError as exc:
            raise invalid(str(exc), "previous_response_id") from None
        if found is None:
            raise ApiError(404, f"Previous response with id '{previous}' not found.", param="previous_response_id",
                           code="previous_response_not_found")
        return found

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
        """A page of a response's input items, read from the store as a page (an index lookup, however many it
        has); the ids are unique in their response, so the page after `after` always moves on."""
        response_id = request.path_params["response_id"]
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
        after, before = query.get("after"), query.get("before")
        try:
            found = await self._in_store(lambda store: store.input_page(
                response_id, limit, descending=order == "desc", after=after, before=before))
        except KeyError as exc:
            name = exc.args[0]
            raise invalid(f"'{name}' must be the id of one of this response's input items.", name) from None
        if found is None:
            raise _not_found(response_id)
        page, more = found
        return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None, "has_more": more})


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", param="response_id", code="not_found")
