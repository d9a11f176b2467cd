"""Asserting what failed below the upstream seam: the seam raises the ``UpstreamError``
family, with the transport's own failure chained as its cause."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest

from seedproxy.errors import UpstreamError
from seedproxy.transport.failure import cause


@contextlib.contextmanager
def fails_with(kind: type[BaseException], match: str = "") -> Iterator[None]:
    """The block raises an ``UpstreamError`` caused by a ``kind`` matching ``match``."""
    with pytest.raises(UpstreamError) as caught:
        yield
    inner = cause(caught.value)
    assert isinstance(inner, kind), repr(inner)
    assert re.search(match, str(inner)), str(inner)
