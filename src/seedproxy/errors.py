"""seedproxy's exceptions: the one error table, applied at the edge by
``error_presenters`` (one presenter per client protocol).

Each class's attributes are its row: ``status_code``, ``error_type`` (OpenAI's
``type``), ``retry_after_s`` (a ``Retry-After`` header, where waiting helps) and
``logged`` (a 5xx that is seedproxy's own fault is logged where it is answered);
Anthropic's ``type`` follows the status (``anthropic_type``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AuthError", "BadRequest", "BatchNotFound", "BodyTimeout", "ClientClosed",
           "ConfigError", "Conflict", "Forbidden", "ModelNotFound", "OverCapacity", "ParserBusy",
           "ParserUnavailable", "PayloadTooLarge", "SeedProxyError", "SessionNotFound",
           "StoreError", "UpstreamBodyTooLarge", "UpstreamError", "UpstreamLoop",
           "UpstreamNotFound", "UpstreamTimeout", "UpstreamUnavailable", "WaitTimeout",
           "anthropic_type", "error_body"]


class SeedProxyError(Exception):
    """The root: a 500, never raised for a client's mistake."""

    status_code, error_type = 500, "internal_error"
    retry_after_s: int | None = None
    logged = True

    def __init__(self, message: str, *, param: str | None = None, code: str | int | None = None,
                 status_code: int | None = None, retry_after_s: int | None = None):
        """``status_code`` and ``retry_after_s``, where given, replace the row's."""
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        if status_code is not None:
            self.status_code = status_code
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, param=self.param, code=self.code)


class ConfigError(SeedProxyError):
    """Invalid settings, flags or config file (CLI exit 2)."""


class BadRequest(SeedProxyError):
    status_code, error_type = 400, "invalid_request_error"


class PayloadTooLarge(BadRequest):
    status_code = 413


class BodyTimeout(BadRequest):
    status_code = 408


class ModelNotFound(BadRequest):
    """``GET /v1/models/{model}`` names a model the upstream does not list."""

    status_code = 404


class AuthError(SeedProxyError):
    status_code, error_type = 401, "authentication_error"


class Forbidden(AuthError):
    """A key that does not reach this session."""

    status_code, error_type = 403, "permission_error"


class SessionNotFound(SeedProxyError):
    status_code, error_type = 404, "not_found_error"


class BatchNotFound(SeedProxyError):
    """An ack names no export batch this proxy knows (or one long forgotten)."""

    status_code, error_type = 404, "not_found_error"


class UpstreamNotFound(SeedProxyError):
    """A fleet route names a server that is not (or no longer) in the fleet."""

    status_code, error_type = 404, "not_found_error"


class Conflict(SeedProxyError):
    """The fleet's state refuses the change; ``code`` says why."""

    status_code, error_type = 409, "conflict_error"


class ClientClosed(SeedProxyError):
    """The client left before its answer was complete (nginx's 499; the record says it)."""

    status_code, error_type = 499, "client_closed"


class OverCapacity(SeedProxyError):
    status_code, error_type = 429, "rate_limit_error"
    retry_after_s = 1


class ParserBusy(OverCapacity):
    """The parse workers' queue is full."""


class WaitTimeout(SeedProxyError):
    """A long poll ended before what it waited for happened; nothing was taken."""

    status_code, error_type = 504, "timeout_error"


class StoreError(SeedProxyError):
    """The session store failed; the request is not acknowledged."""

    status_code, error_type = 503, "store_error"
    logged = False


class ParserUnavailable(SeedProxyError):
    """The worker parsing a large body died; its pool is started again."""

    status_code, error_type = 503, "server_error"
    retry_after_s = 1


class UpstreamError(SeedProxyError):
    """The upstream failed before answering; ``status_code`` is 502 unless given."""

    status_code, error_type = 502, "upstream_error"
    logged = False


class UpstreamLoop(SeedProxyError):
    """A request came back to the proxy that sent it upstream (RFC 5842)."""

    status_code, error_type = 508, "loop_detected"
    logged = False


class UpstreamUnavailable(UpstreamError):
    """No upstream could be reached (or every one failed)."""

    status_code = 503


class UpstreamTimeout(UpstreamError):
    status_code = 504


class UpstreamBodyTooLarge(UpstreamError):
    """502: an upstream answer (or one event of it) over ``--max-upstream-body-bytes``."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (--max-upstream-body-bytes)")


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    """Return OpenAI's error object: ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP ``status``."""
    return _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
