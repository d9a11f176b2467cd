"""The tracing seam: a ``Tracer`` starts one ``Trace`` per request, whose ``Span``\\ s
time its steps. The classes here are the no-op (``--otel`` not given); ``otel.py`` is
the OpenTelemetry implementation, imported only when tracing is on (``tracers.py``).

Invariants (every implementation):
- A span's ``end`` and a trace's ``end`` may be called more than once: the first
  call ends it, the others do nothing.
- A span is a context manager that ends it on exit (an exception marks it failed).
- ``Trace.child`` spans are children of the request's span; ``Span.inject`` adds the
  W3C ``traceparent`` (and ``tracestate``) that makes a server's spans its children.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

__all__ = ["NO_SPAN", "NO_TRACE", "NO_TRACER", "Attributes", "Span", "Trace", "Tracer"]

Attributes = Mapping[str, str | int | float | bool | Sequence[int]]
"""Span attributes: OpenTelemetry's value types (``seedproxy.seed`` is a list of ints)."""


class Span:
    """One timed step of a request; this one records nothing."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end()

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Attach an attribute."""

    def inject(self, headers: dict[str, str]) -> None:
        """Add the headers that make an upstream's spans this span's children."""

    def end(self) -> None:
        """End the span (once; see the module)."""


class Trace:
    """One request's trace: its span and the children; this one records nothing."""

    __slots__ = ()

    def child(self, name: str) -> Span:
        """A span for one step of the request, started now."""
        return NO_SPAN

    def end(self, status: int, attributes: Callable[[], Attributes] | None = None) -> None:
        """End the request's span with the HTTP ``status`` the client was given and
        ``attributes()`` (called only by a tracer that records)."""


class Tracer:
    """Starts each request's trace; this one traces nothing."""

    __slots__ = ()

    def start(self, route: str, headers: Mapping[str, str]) -> Trace:
        """The trace of a POST to ``route`` that arrived with ``headers`` (a W3C
        ``traceparent`` among them makes its span that span's child)."""
        return NO_TRACE

    def close(self) -> None:
        """Export what is left (blocking); nothing is traced afterwards."""


NO_SPAN = Span()
NO_TRACE = Trace()
NO_TRACER = Tracer()

