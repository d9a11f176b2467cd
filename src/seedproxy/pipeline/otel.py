"""The OpenTelemetry tracer (``--otel``; the ``otel`` extra): one SERVER span per
request, its steps as children, exported by OTLP over HTTP/protobuf (another
``OTEL_EXPORTER_OTLP_*PROTOCOL`` is a ``ConfigError``), configured by the standard
``OTEL_*`` environment. Context travels as W3C trace context whatever
``OTEL_PROPAGATORS`` says: it is what SGLang reads. Nothing is global: the provider is
this tracer's, and ``close`` shuts it down, exporting what is queued.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import TracebackType

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace import Tracer as OtelApiTracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..errors import ConfigError
from .tracing import Attributes, Span, Trace, Tracer

__all__ = ["OtelTracer", "otel_tracer"]

_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def otel_tracer(environ: Mapping[str, str] | None = None) -> OtelTracer:
    """A tracer exporting by OTLP/HTTP to where the ``OTEL_*`` environment says."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    env = os.environ if environ is None else environ
    for name in _PROTOCOLS:
        protocol = env.get(name)
        if protocol is not None and protocol != "http/protobuf":
            raise ConfigError(f"{name}={protocol}: seedproxy exports traces by OTLP "
                              "http/protobuf only")
    service = env.get("OTEL_SERVICE_NAME") or "seedproxy"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracer(provider)


class OtelTracer(Tracer):
    __slots__ = ("_propagator", "_provider", "_tracer")

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("seedproxy")
        self._propagator = TraceContextTextMapPropagator()

    def start(self, route: str, headers: Mapping[str, str]) -> Trace:
        parent = self._propagator.extract(headers)
        span = self._tracer.start_span(f"POST {route}", context=parent, kind=SpanKind.SERVER,
                                       attributes={"http.route": route})
        return _OtelTrace(self._tracer, self._propagator, span)

    def close(self) -> None:
        self._provider.shutdown()


class _OtelSpan(Span):
    __slots__ = ("_ended", "_propagator", "_span")

    def __init__(self, span: OtelSpan, propagator: TraceContextTextMapPropagator) -> None:
        self._span = span
        self._propagator = propagator
        self._ended = False

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None and not self._ended:
            self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self.end()

    def set(self, key: str, value: str | int | float | bool) -> None:
        self._span.set_attribute(key, value)

    def inject(self, headers: dict[str, str]) -> None:
        self._propagator.inject(headers, context=set_span_in_context(self._span))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()


class _OtelTrace(Trace):
    __slots__ = ("_context", "_root", "_tracer")

    def __init__(self, tracer: OtelApiTracer, propagator: TraceContextTextMapPropagator,
                 span: OtelSpan) -> None:
        self._tracer = tracer
        self._root = _OtelSpan(span, propagator)
        self._context: Context = set_span_in_context(span)

    def child(self, name: str) -> Span:
        kind = SpanKind.CLIENT if name == "upstream" else SpanKind.INTERNAL
        span = self._tracer.start_span(name, context=self._context, kind=kind)
        return _OtelSpan(span, self._root._propagator)

    def end(self, status: int, attributes: Callable[[], Attributes] | None = None) -> None:
        root, span = self._root, self._root._span
        if root._ended:
            return
        root._ended = True
        if attributes is not None:
            span.set_attributes(attributes())
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
