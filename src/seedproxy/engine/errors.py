"""Engine exceptions: ``EngineError`` a start-up failure (one line naming the path, for a
CLI to print before exiting with code 2), ``RequestError`` a client error (SGLang's 400
``ErrorResponse``), ``InternalError`` a failure serving a valid request (a 500 in the same
shape, the traceback logged where it arose).
"""

from __future__ import annotations

__all__ = ["EngineError", "InternalError", "RequestError"]


class EngineError(Exception):
    """The engine could not start."""


class RequestError(ValueError):
    """A request the engine refuses, answered with HTTP ``status``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


class InternalError(Exception):
    """The engine failed on a valid request, answered with HTTP ``status``."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message, self.status = message, status
