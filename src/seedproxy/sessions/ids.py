"""The one rule for session ids and identities, wherever they arrive or leave.

An id is 1 to ``MAX_ID_BYTES`` bytes of UTF-8 text with no control or format
characters (Unicode categories Cc, Cf, Cs, Zl, Zp: NUL, CR, LF, ...), no ``/``, no
U+FFFD (the mark of undecodable bytes), not ``.`` or ``..``, and no leading or
trailing whitespace. The same id names the same session whichever way it arrives:
in the path (percent-decoded UTF-8), in ``X-Session-Id`` (raw UTF-8 bytes, or
percent-encoded exactly as in a path), in ``POST /sessions``. On the way out (response
headers, ``base_url``) an id is percent-encoded as a path segment (``encode_id``), so
``☃`` travels as ``%E2%98%83`` and ``17:3`` as itself.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote, unquote

from ..errors import BadRequest

__all__ = [
    "MAX_ID_BYTES",
    "MAX_IDENTITY_BYTES",
    "check_id",
    "decode_header_id",
    "encode_id",
]

MAX_ID_BYTES = 128
"""The longest session id, in UTF-8 bytes."""
MAX_IDENTITY_BYTES = 96
"""The longest identity given to ``POST /sessions``: room is left for the ``:{i}``
and ``-{n}`` suffixes of the session ids made from it."""

_BANNED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_PATH_SEGMENT_SAFE = "!$&'()*+,;=:@"
"""RFC 3986 ``pchar`` minus unreserved and ``%``: kept as is, like the unreserved."""
_PLAIN_ASCII = re.compile(r"[!-.0-~](?:[ -.0-~]*[!-.0-~])?")
"""Printable ASCII, no ``/``, no space at either end: the usual id, checked at once."""
_NEEDS_NO_QUOTING = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@]*")


def check_id(value: str, *, param: str, max_bytes: int = MAX_ID_BYTES) -> str:
    """Return ``value`` if it is a valid id; else ``BadRequest`` (400) naming ``param``."""
    if len(value) <= max_bytes and _PLAIN_ASCII.fullmatch(value) and value not in (".", ".."):
        return value
    if not value:
        raise BadRequest(f"{param} must not be empty", param=param)
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BadRequest(f"{param} is longer than {max_bytes} UTF-8 bytes", param=param)
    if not value.isprintable() or value.strip() != value:
        # isprintable() is a fast pass for the common case; the loop names the culprit
        for char in value:
            if unicodedata.category(char) in _BANNED_CATEGORIES:
                raise BadRequest(
                    f"{param} contains a control character (U+{ord(char):04X})", param=param
                )
        if value.strip() != value:
            raise BadRequest(f"{param} has leading or trailing whitespace", param=param)
    if "/" in value or "\ufffd" in value or value in (".", ".."):
        raise BadRequest(
            f"{param} must not contain '/' or undecodable bytes, nor be '.' or '..'", param=param
        )
    return value


def decode_header_id(raw: bytes, *, param: str = "X-Session-Id") -> str:
    """An id from a header's bytes: UTF-8, then percent-decoded; then checked."""
    try:
        text = raw.decode("utf-8").strip(" \t")
        if "%" in text:
            text = unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise BadRequest(f"{param} is not UTF-8", param=param) from None
    return check_id(text, param=param)


def encode_id(session_id: str) -> str:
    """``session_id`` as a path segment and an ASCII header value."""
    if _NEEDS_NO_QUOTING.fullmatch(session_id):  # the usual id: 3x cheaper than quote()
        return session_id
    return quote(session_id, safe=_PATH_SEGMENT_SAFE)
