"""`hearth chat --endpoint URL` as a user runs it, against real servers on 127.0.0.1 started here:
llama-cpp-python's own OpenAI server and `hearth serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.commands.test_cli import hearth
from tests.backends.test_remote import hearth_server, llama_server  # noqa: F401 (fixtures)
from tests.server.openai.test_openai_api import KEY, free_port

JSON_FIELDS = ("model", "model_path", "text", "finish_reason", "prompt_tokens", "completion_tokens", "ttft_s",
               "prompt_tok_s", "gen_tok_s", "peak_rss_mb", "prompt_evaluated", "n_ctx", "spec", "window")


@pytest.mark.slow
def test_json_answer_from_llama_cpp_server(llama_server, third_party_model):  # noqa: F811
    prompt = "Name three colors."
    # The settings given (--temp 0, --max-tokens), as the server's own non-streamed request: the rest is the
    # server's (its defaults, its model's recommendation), for the CLI as for any client.
    whole = httpx.post(llama_server + "/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 16}).json()
    proc = hearth("chat", "--endpoint", llama_server, "--json", "--prompt", prompt, "--temp", "0",
                  "--max-tokens", "16", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(JSON_FIELDS) <= set(out)
    assert out["model"].endswith(third_party_model.name) and out["model_path"] == llama_server
    assert out["text"] == whole["choices"][0]["message"]["content"]
    assert out["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert out["ttft_s"] > 0 and out["gen_tok_s"] > 0
    # What this server does not say is null, never made up.
    assert out["completion_tokens"] is None and out["prompt_tokens"] is None and out["peak_rss_mb"] is None


@pytest.mark.slow
def test_interactive_chat_with_an_endpoint(llama_server, third_party_model):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--endpoint", llama_server, "--temp", "0",
                           "--max-tokens", "8"], input="Hello!\n/reset\nAnd again?\n/exit\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"Hearth chat with {third_party_model.stem} at {llama_server}." in proc.stdout
    assert proc.stdout.count("assistant>") == 2 and "(new conversation)" in proc.stdout
    assert proc.stdout.count(" chunks, ") == 2 and proc.stdout.count("tok/s]") == 2  # it sends no token counts


@pytest.mark.slow
def test_key_from_the_environment_and_a_wrong_key(hearth_server):  # noqa: F811
    proc = hearth("chat", "--endpoint", hearth_server, "--model", "SmolLM2-135M-Instruct.Q4_1", "--prompt", "Hi",
                  "--temp", "0", "--max-tokens", "4", "--ctx", "512", "--json", env_extra={"HEARTH_API_KEY": KEY},
                  timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"] == "SmolLM2-135M-Instruct.Q4_1" and 0 < out["completion_tokens"] <= 4
    assert out["n_ctx"] == 1024  # the server's context, not --ctx
    assert proc.stderr.strip() == f"hearth: --ctx set up a local model; the server at {hearth_server} decides its own."
    wrong = hearth("chat", "--endpoint", hearth_server, "--api-key", "sk-wrong", "--prompt", "Hi", timeout=60)
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.startswith(f"hearth: The server at {hearth_server} refused the API key (HTTP 401: ")
    assert wrong.stderr.count("\n") == 1


def test_server_down_is_one_sentence():
    base = f"http://127.0.0.1:{free_port()}/v1"
    t = time.monotonic()
    proc = hearth("chat", "--endpoint", base, "--prompt", "Hi", timeout=60)
    assert proc.returncode == 1 and proc.stderr == f"hearth: Cannot reach {base}: connection refused.\n"
    assert time.monotonic() - t < 10  # the interpreter's start is most of it


def test_bench_measures_an_endpoint(hearth_server):  # noqa: F811
    proc = hearth("bench", "--endpoint", hearth_server, "--api-key", KEY, "--repeats", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["model"] == "SmolLM2-135M-Instruct.Q4_1" and report["repeats"] == 2
    assert report["ttft_ms_median"] > 0 and report["gen_tok_s_median"] > 0
    assert all(0 < n <= 128 for n in report["completion_tokens"])
