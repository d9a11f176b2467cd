"""One headless chromium per test module (``browser.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ui.browser import chromium_driver


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    browser = chromium_driver(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.quit()
