"""``stop_regex``: stop when the output text matches a regex (SGLang's
``FINISHED_MATCHED_REGEX``; ``finish_reason.matched`` is the pattern, the text is kept)."""

from __future__ import annotations

import re

__all__ = ["match_stop_regex"]


def match_stop_regex(patterns: tuple[str, ...], text: str) -> str | None:
    """The first of ``patterns`` found anywhere in ``text``, or None."""
    for pat in patterns:
        if re.search(pat, text):
            return pat
    return None
