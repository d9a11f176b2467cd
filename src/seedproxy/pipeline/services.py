"""What every request uses, built once by the app and passed in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..dialects import Backend
from ..fleet.pool import UpstreamPool
from ..media import ImageGate
from ..sessions import SessionManager
from ..settings import Settings
from .inflight import InFlight
from .metrics import Metrics
from .offload import Parser
from .replaying import ReplayBook
from .resume import ResumingSender
from .tracing import NO_TRACER, Tracer

if TYPE_CHECKING:
    from ..tito import TitoMode

__all__ = ["Services"]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    sessions: SessionManager
    backend: Backend
    pool: UpstreamPool
    sender: ResumingSender
    metrics: Metrics
    inflight: InFlight
    replays: ReplayBook
    parser: Parser
    images: ImageGate
    tito: TitoMode | None = None
    """Token-in-token-out mode: chat, Responses and Messages render prompts here."""
    tracer: Tracer = field(default=NO_TRACER)
