"""Refused requests: an error the proxy answers on a model route before the request
reached an upstream (a bad body, a tool it cannot carry, a missing session or key, a
full queue). Each is counted in ``/metrics`` (``seedproxy_refusals_total`` by route,
status and reason) and, unless request logging is off, logged as one JSON line
(``event: refused``) on the request log, with the error's message.

The reason is a bounded label, never the client's text: the error's ``code`` when it
has one, else the first field of its ``param`` (``tools``, ``input``, ``messages``;
at most ``_REASON_CHARS`` of ``[a-z0-9_]``), else its ``type``. A param outside that
shape counts as ``other``.
"""

from __future__ import annotations

import logging
import re

from ..errors import SeedProxyError
from .metrics import Metrics

__all__ = ["note_refusal", "reason_of"]

log = logging.getLogger("seedproxy.request")

_REASON_CHARS = 40
_FIELD = re.compile(r"[a-z][a-z0-9_]*")
_DETAIL_CHARS = 500


def reason_of(exc: SeedProxyError) -> str:
    """The refusal's label (see the module docstring)."""
    for value in (exc.code, exc.param):
        if isinstance(value, str) and value:
            head = re.split(r"[.\[]", value, maxsplit=1)[0]
            return head if len(head) <= _REASON_CHARS and _FIELD.fullmatch(head) else "other"
    return exc.error_type


def note_refusal(metrics: Metrics, route: str, exc: SeedProxyError, *, session: str | None,
                 index: int | None = None, logged: bool = True) -> None:
    """Count ``exc``, refused on ``route`` (one of the proxy's own paths), and log it
    when ``logged``; ``index`` when the request had taken one already."""
    reason = reason_of(exc)
    metrics.refused(route, exc.status_code, reason)
    if logged and log.isEnabledFor(logging.INFO):
        log.handle(log.makeRecord(
            log.name, logging.INFO, __file__, 0, "refused", (), None, "note_refusal",
            extra={"session": session, "index": index, "status": exc.status_code,
                   "route": route, "reason": reason, "detail": exc.message[:_DETAIL_CHARS]},
        ))
