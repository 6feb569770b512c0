"""#54.5: tools cost the prompt what they must, no more. opencode's first request (10 tools) counted 7,617 prompt
tokens where the same request without tools took 2,230: each tool's whole JSON Schema went into the system
message. A template that knows tools renders them itself; for one that does not, each tool is a compact
signature with its descriptions. Measured per tool on three templates (the bundled model's own, built-in ChatML,
Gemma's on another family's vocabulary) against the JSON form it replaced."""

from __future__ import annotations

import json

import pytest

from app.engine.decoding.runtime import Runtime
from app.engine.prompt.template import ChatTemplate, template_for
from app.protocol.messages import LoadOptions
from app.protocol.tool_format import CALL_CLOSE, CALL_OPEN, RESPONSE_CLOSE, RESPONSE_OPEN
from tests.helpers.templates import CHATML


def tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#"}}}


def text(description: str) -> dict:
    return {"type": "string", "description": description}


# The shape of a coding agent's tools (opencode, Claude Code): names, parameters and descriptions of that kind.
AGENT_TOOLS = [
    tool("bash", "Executes a bash command in a persistent shell session with an optional timeout.",
         {"command": text("The command to execute"), "timeout": {"type": "number", "description": "Timeout in ms"},
          "description": text("Clear, concise description of what this command does in 5-10 words")}, ["command"]),
    tool("read", "Reads a file from the local filesystem.",
         {"filePath": text("The absolute path to the file to read"),
          "offset": {"type": "number", "description": "The line number to start reading from"},
          "limit": {"type": "number", "description": "The number of lines to read"}}, ["filePath"]),
    tool("write", "Writes a file to the local filesystem, overwriting an existing file.",
         {"filePath": text("The absolute path to the file to write"), "content": text("The content to write")},
         ["filePath", "content"]),
    tool("edit", "Performs exact string replacements in files.",
         {"filePath": text("The absolute path to the file to modify"), "oldString": text("The text to replace"),
          "newString": text("The text to replace it with"),
          "replaceAll": {"type": "boolean", "description": "Replace all occurrences of oldString"}},
         ["filePath", "oldString", "newString"]),
    tool("glob", "Fast file pattern matching tool that works with any codebase size.",
         {"pattern": text("The glob pattern to match files against"), "path": text("The directory to search in")},
         ["pattern"]),
    tool("grep", "Fast content search tool that searches file contents using regular expressions.",
         {"pattern": text("The regex pattern to search for"), "path": text("The directory to search in"),
          "include": text('File pattern to include in the search (e.g. "*.js")')}, ["pattern"]),
    tool("list", "Lists files and directories in a given path.",
         {"path": text("The absolute path to the directory to list"),
          "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns to ignore"}}, []),
    tool("webfetch", "Fetches content from a specified URL.",
         {"url": text("The URL to fetch content from"),
          "format": {"type": "string", "enum": ["text", "markdown", "html"], "description": "The format to return"}},
         ["url", "format"]),
    tool("todowrite", "Use this tool to create and manage a structured task list for your current coding session.",
         {"todos": {"type": "array", "description": "The updated todo list", "items": {"type": "object", "properties": {
             "content": text("Brief description of the task"),
             "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
             "id": text("Unique identifier for the todo item")}, "required": ["content", "status", "id"]}}},
         ["todos"]),
    tool("task", "Launch a new agent to handle complex, multi-step tasks autonomously.",
         {"description": text("A short (3-5 words) description of the task"),
          "prompt": text("The task for the agent to perform"),
          "subagent_type": text("The type of specialized agent to use for this task")},
         ["description", "prompt", "subagent_type"]),
]
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]


def json_form(tools: list[dict]) -> str:
    """The system-message text tools took before (each tool's whole schema as JSON), to measure against."""
    listed = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return ("You may call one or more functions to help with the user's request. The functions are described "
            f"in JSON Schema inside <tools></tools>:\n<tools>\n{listed}\n</tools>\n"
            f"To call a function, answer with {CALL_OPEN}{{\"name\": <function-name>, \"arguments\": "
            f"<arguments-object>}}{CALL_CLOSE}. The result comes back in {RESPONSE_OPEN}{RESPONSE_CLOSE}.")


@pytest.fixture(scope="module", params=["bundled's own", "chatml", "gemma"])
def rendering(request, bundled_model, gemma3_model):
    model = gemma3_model if request.param == "gemma" else bundled_model
    runtime = Runtime(LoadOptions(model_path=str(model), n_ctx=512), extra_bufts=False)
    try:
        template = ChatTemplate(CHATML) if request.param == "chatml" else template_for(runtime)[1]
        yield request.param, template, runtime
    finally:
        runtime.close()


def test_each_tool_costs_a_compact_signature_not_its_whole_schema(rendering):
    name, template, runtime = rendering
    assert not getattr(template, "knows_tools", False)  # these templates take no tools: Hearth writes them

    def tokens(prompt: str) -> int:
        return len(runtime.tokenize(prompt))

    plain = tokens(template.render(MESSAGES, add_generation_prompt=True))
    with_tools = tokens(template.render(MESSAGES, add_generation_prompt=True, tools=AGENT_TOOLS))
    before = plain + len(runtime.tokenize(json_form(AGENT_TOOLS), add_special=False))
    per_tool, per_tool_before = (with_tools - plain) / len(AGENT_TOOLS), (before - plain) / len(AGENT_TOOLS)
    print(f"{name}: {plain} tokens without tools; {per_tool:.0f} a tool (the JSON form: {per_tool_before:.0f})")
    assert per_tool <= 0.6 * per_tool_before
    prompt = template.render(MESSAGES, add_generation_prompt=True, tools=AGENT_TOOLS)
    # Still everything a model needs to choose and fill a call: every name, parameter, type and enum value.
    assert 'edit(filePath: string, oldString: string, newString: string, replaceAll?: boolean)' in prompt
    assert '"pending"|"in_progress"|"completed"|"cancelled"' in prompt and "webfetch(" in prompt
