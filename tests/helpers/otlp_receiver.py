"""An OTLP/HTTP trace receiver on loopback: what an OpenTelemetry collector's
``/v1/traces`` does, decoding each ``ExportTraceServiceRequest`` (protobuf, gzip or
not) into ``Span`` rows a test can wait on."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    service: str
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


class OtlpReceiver:
    """``with OtlpReceiver() as receiver``: listens on 127.0.0.1, port 0."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(self.path, ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The collector's base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, path: str, request: ExportTraceServiceRequest) -> None:
        assert path == "/v1/traces", path
        rows = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    rows.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind, service=str(resource.get("service.name")),
                        attributes={a.key: _value(a.value) for a in span.attributes}))
        with self._changed:
            self.spans.extend(rows)
            self._changed.notify_all()

    def trace(self, trace_id: str, *, count: int, timeout_s: float = 60.0) -> list[ReceivedSpan]:
        """The spans of ``trace_id`` once ``count`` of them have arrived."""
        def found() -> list[ReceivedSpan]:
            return [s for s in self.spans if s.trace_id == trace_id]

        with self._changed:
            if not self._changed.wait_for(lambda: len(found()) >= count, timeout=timeout_s):
                raise AssertionError(f"{len(found())} spans of {trace_id} arrived, not {count}: "
                                     f"{[s.name for s in found()]}")
            return found()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
