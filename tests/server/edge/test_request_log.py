"""OpenAIApi's request-log hook (the window's Server page shows it): one record per finished request,
with its status and, for a generation, its token counts; streamed or not. In process, over ASGI, with
the real engine and the bundled model."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.backends.client import EngineClient
from app.protocol.messages import LoadOptions
from app.backends.supervisor import Supervisor
from app.server.openai.endpoints import OpenAIApi

KEY = "sk-log"


@pytest.fixture(scope="module")
def backend(bundled_model):
    supervisor = Supervisor()
    EngineClient(supervisor).load(LoadOptions(model_path=str(bundled_model), n_ctx=512, n_threads=1))
    yield supervisor
    supervisor.close()


def test_each_finished_request_is_logged_once(backend):
    records = []
    api = OpenAIApi(backend, KEY, on_request=records.append)
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}

    async def calls():
        transport = httpx.ASGITransport(app=api)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://hearth", timeout=60) as client:
            whole = await client.post("/v1/chat/completions", json=body, headers=headers)
            streamed = await client.post("/v1/chat/completions", headers=headers,
                                         json={**body, "stream": True, "stream_options": {"include_usage": True}})
            refused = await client.get("/v1/models")
            missing = await client.get("/v1/nothing", headers=headers)
        return whole, streamed, refused, missing

    whole, streamed, refused, missing = asyncio.run(calls())
    assert (whole.status_code, streamed.status_code, refused.status_code, missing.status_code) == (200, 200, 401, 404)
    usage = whole.json()["usage"]
    assert [(r.method, r.path, r.status) for r in records] == [
        ("POST", "/v1/chat/completions", 200), ("POST", "/v1/chat/completions", 200),
        ("GET", "/v1/models", 401), ("GET", "/v1/nothing", 404)]
    assert (records[0].prompt_tokens, records[0].completion_tokens) == (usage["prompt_tokens"],
                                                                        usage["completion_tokens"])
    assert records[1].completion_tokens == 4 and records[1].prompt_tokens == usage["prompt_tokens"]
    assert records[2].prompt_tokens is None and all(r.duration_s >= 0 and r.started > 0 for r in records)
