"""Session state: physical sessions, their atomic request indices and interactions."""

from __future__ import annotations

from .interaction import ChoiceRecord, Interaction
from .manager import NewSession, SessionManager
from .record import SessionRecord, Slot
from .session import Session
from .store import MemoryStore, SessionStore, open_store

__all__ = [
    "ChoiceRecord",
    "Interaction",
    "MemoryStore",
    "NewSession",
    "Session",
    "SessionManager",
    "SessionRecord",
    "SessionStore",
    "Slot",
    "open_store",
]
