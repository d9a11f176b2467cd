"""Token in, token out: seedproxy renders the chat template itself, sends token ids
upstream and keeps every turn's prompt = previous prompt + completion as sampled +
the new messages' ids. One concept per module: ``renderer`` (templates), ``lineage``
and ``facets`` (which turn a request continues), ``reasoning`` and ``tool_parsers``,
``assistant`` (ids back to a message), ``dialect`` (upstream shapes)."""

from __future__ import annotations

from .assistant import AssistantStream, Delta, Reply
from .dialect import Sample
from .lineage import Prompt, tito_record
from .mode import TitoMode, open_tito
from .renderer import Renderer

__all__ = ["AssistantStream", "Delta", "Prompt", "Renderer", "Reply", "Sample", "TitoMode",
           "open_tito", "tito_record"]
