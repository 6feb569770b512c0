"""API errors in the envelope of the dialect a path speaks: OpenAI's {"error": {"message", "type", "param",
"code"}}, Anthropic's {"type": "error", "error": {"type", "message"}} on /v1/messages, Ollama's {"error": sentence}
on /api/; the status is the same in all three. The edge (guard, limits) and every endpoint answer through
ApiError.response(path), so an error said before a request reaches its dialect has that dialect's shape too.

Official clients read `message` and the status; the type and code tell a program what went wrong
(invalid_api_key, model_not_found, context_length_exceeded) as OpenAI's own API does.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from app.protocol.messages import ErrorKind
from app.protocol.step_clock import WATCHDOG_SAYS


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers  # e.g. Retry-After on a 503

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def anthropic_body(self) -> dict:
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(self.status, "api_error"),
                                           "message": self.message}}

    def response(self, path: str = "") -> JSONResponse:
        """The error in the envelope of the dialect `path` speaks (dialect_of)."""
        body = {"anthropic": self.anthropic_body, "ollama": self.ollama_body}.get(dialect_of(path), self.body)()
        return JSONResponse(body, status_code=self.status, headers=self.headers)

    def ollama_body(self) -> dict:
        return {"error": self.message}


ANTHROPIC_PATH = "/v1/messages"


def dialect_of(path: str) -> str:
    """"anthropic" (/v1/messages and below), "ollama" (/ and /api/), else "openai"."""
    if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
        return "anthropic"
    if path == "/" or path.startswith("/api/"):
        return "ollama"
    return "openai"


# Anthropic names an error by its status alone.
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
                   413: "request_too_large", 422: "invalid_request_error",
                   429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


# An engine error (app.protocol.messages.ErrorKind) as the API reports it: status, type, code.
_FROM_ENGINE = {
    ErrorKind.CONTEXT_LENGTH: (400, "invalid_request_error", "context_length_exceeded"),
    ErrorKind.BUSY: (503, "unavailable_error", "model_loading"),
    ErrorKind.INVALID_REQUEST: (400, "invalid_request_error", None),
    ErrorKind.ENGINE_CRASHED: (503, "unavailable_error", "engine_restarting"),
    ErrorKind.GENERATION: (500, "server_error", None),
    ErrorKind.MODEL_FILE: (500, "server_error", None),
    ErrorKind.MODEL_LOAD: (500, "server_error", None),
    ErrorKind.MODEL_TOO_BIG: (500, "server_error", None),
}


def stalled(kind: ErrorKind, message: str) -> bool:
    """Whether an engine error is the watchdog's: a step past its budget ended the engine."""
    return kind == ErrorKind.ENGINE_CRASHED and message.startswith(WATCHDOG_SAYS)


def from_engine(kind: ErrorKind, message: str) -> ApiError:
    if stalled(kind, message):
        # Most often the request's own grammar: asked again, it stalls the engine again, every slot with it. A 503
        # (or any 5xx) is what the official SDKs retry; a 422, and their header that says not to, is not.
        return ApiError(422, message, "invalid_request_error", code="engine_step_timeout",
                        headers={"x-should-retry": "false"})
    status, type_, code = _FROM_ENGINE.get(kind, (500, "server_error", None))
    return ApiError(status, message, type_, code=code)
