"""A chat request's prompt token count as the engine renders it (``count_tokens``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from .chat import render_messages
from .model import EngineModel
from .state import EngineState
from .worker import Worker

__all__ = ["prompt_counter"]


def prompt_counter(model: EngineModel) -> Callable[[dict[str, Any]], int]:
    """A function of a chat body -> its prompt's token count under ``model``'s chat
    template; ``RequestError`` (a ``ValueError``) when the template refuses it."""
    state = EngineState(model, cast(Worker, None))  # rendering needs no worker

    def count(chat: dict[str, Any]) -> int:
        return len(render_messages(state, chat))

    return count
