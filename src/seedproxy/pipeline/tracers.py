"""Which tracer a proxy runs: the no-op, or OpenTelemetry's (``--otel``), whose
packages (the ``otel`` extra) are imported only then."""

from __future__ import annotations

from ..errors import ConfigError
from .tracing import NO_TRACER, Tracer

__all__ = ["open_tracer"]


def open_tracer(enabled: bool) -> Tracer:
    """The OpenTelemetry tracer configured by the ``OTEL_*`` environment when
    ``enabled``, else the no-op. ``ConfigError`` when the ``otel`` extra is missing
    or the environment asks for something it cannot do."""
    if not enabled:
        return NO_TRACER
    try:
        from .otel import otel_tracer
    except ImportError as exc:
        if not (exc.name or "").startswith("opentelemetry"):
            raise
        raise ConfigError(
            "--otel needs OpenTelemetry: pip install -e '.[otel]' "
            f"({exc.name} is missing)") from None
    return otel_tracer()
