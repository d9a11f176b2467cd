"""Who may do what: admin key, session keys, and which session a request is in.

With no admin key (loopback only) everything is open. With one, admin routes need it,
and OpenAI routes need it or a session key, which reaches only its own session. A key
is read from ``Authorization: Bearer`` or ``x-api-key``, compared in constant time and
never logged.
"""

from __future__ import annotations

import hmac
from typing import TypeVar

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request

from ..errors import AuthError, Forbidden
from ..pipeline.headers import client_key
from ..pipeline.request import read_model
from ..sessions import NewSession, SessionManager, SessionRecord
from ..sessions.ids import check_id, decode_header_id

__all__ = ["Access", "AdminBody", "named_session"]


class AdminBody(BaseModel):
    """An admin route's body (OpenAI-route bodies are not modelled: ``request.py``)."""

    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=BaseModel)


class Access:
    def __init__(self, sessions: SessionManager, admin_key: str | None,
                 max_body_bytes: int) -> None:
        self.sessions = sessions
        self.admin_key = admin_key
        self.max_body_bytes = max_body_bytes

    def may_export(self, request: Request) -> bool:
        """The admin key, or none set: what admin acts (such as taking exports) need."""
        token = client_key(request.headers)
        return self.admin_key is None or bool(token and _same(token, self.admin_key))

    async def require_admin(self, request: Request) -> None:
        """401 for no key or an unknown one; 403 for a session's key, which is valid
        but does not reach admin routes."""
        if self.may_export(request):
            return
        token = client_key(request.headers)
        if token is None:
            raise AuthError("this route needs the admin key as a bearer token")
        owner = await self.sessions.store.find_by_key(token)
        if owner is None or not _same(owner.api_key, token):
            raise AuthError("unknown key: this route needs the admin key")
        raise Forbidden("a session key does not reach this route: it needs the admin key")

    async def admin_body(self, request: Request, model: type[M]) -> M:
        """The admin key checked, and only then the body read (413 past
        ``max_body_bytes``) and validated as ``model``."""
        await self.require_admin(request)
        return await read_model(request, model, self.max_body_bytes)

    async def require_session_reader(self, request: Request, session_id: str) -> SessionRecord:
        """For admin reads of one session: the admin key, or that session's own key."""
        if self.may_export(request):
            return await self.sessions.require(session_id)
        return await self._own_session(request, session_id)

    async def session_for(
        self, request: Request, path_session: str | None, *, cached: bool = False
    ) -> SessionRecord | NewSession | None:
        """The session an OpenAI-route request belongs to: by path, then session key,
        then ``X-Session-Id``; None when it names none, ``NewSession`` for one that does
        not exist yet (nothing is created here). A bad id is a 400 before anything else.
        ``cached``: a session this process knows is taken as it knows it
        (``SessionManager.find``)."""
        named = named_session(request, path_session)
        token = client_key(request.headers)
        if path_session is None and token is not None:
            owner = await self.sessions.find_by_key(token, cached=cached)
            if owner is not None and _same(owner.api_key, token):
                return owner
        if self.may_export(request):
            if named is None:
                return None
            return await self.sessions.find(named, cached=cached) or NewSession(named)
        if token is None:
            raise AuthError("a session key or the admin key is required")
        if named is None:
            raise AuthError("unknown key")
        return await self._own_session(request, named, cached=cached)

    async def _own_session(self, request: Request, session_id: str, *,
                           cached: bool = False) -> SessionRecord:
        token = client_key(request.headers)
        if token is None:
            raise AuthError("a session key or the admin key is required")
        owner = await self.sessions.find_by_key(token, cached=cached)
        if owner is None or not _same(owner.api_key, token):
            raise AuthError("unknown key")
        if owner.session_id != session_id:
            raise Forbidden("this key does not reach that session")
        return owner


def named_session(request: Request, path_session: str | None) -> str | None:
    """The session id a request names by path or ``X-Session-Id``, checked (400)."""
    if path_session is not None:
        return check_id(path_session, param="session_id")
    raw = request.headers.get("x-session-id")
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes sent.
    return decode_header_id(raw.encode("latin-1")) if raw else None


def _same(given: str, expected: str) -> bool:
    """Constant-time equality; bytes, since ``compare_digest`` refuses non-ASCII str."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )
