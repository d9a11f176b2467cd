"""Session state: physical sessions, their atomic request indices and interactions."""

from __future__ import annotations

from .interaction import ChoiceRecord, Interaction
from .manager import SessionManager
from .record import SessionRecord, Slot
from .session import Session
from .store import MemoryStore, SessionStore, open_store

__all__ = [
    "ChoiceRecord",
    "Interaction",
    "MemoryStore",
    "Session",
    "SessionManager",
    "SessionRecord",
    "SessionStore",
    "Slot",
    "open_store",
]
