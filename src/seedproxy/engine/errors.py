"""Engine exceptions.

``EngineError`` is a start-up failure (bad model path, unreadable weights): its message is
one line naming the path, fit for a CLI to print before exiting with code 2.
``RequestError`` is a client error: the server turns it into SGLang's 400 ``ErrorResponse``.
``InternalError`` is a failure inside the engine while serving a valid request: a 500 in
the same shape, with the traceback in the log where it arose.
"""

from __future__ import annotations

__all__ = ["EngineError", "InternalError", "RequestError"]


class EngineError(Exception):
    """The engine could not start (for example the model path is missing or invalid)."""


class RequestError(ValueError):
    """A request the engine refuses; always answered with HTTP ``status`` (400 by default)."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


class InternalError(Exception):
    """The engine failed on a valid request; answered with HTTP ``status`` (500)."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
