"""A headless Debian chromium driven by selenium through Debian's chromedriver.

Nothing is downloaded: selenium is pointed at /usr/bin/chromedriver explicitly (no
selenium-manager). Without the packages the tests skip, and fail under CI=true.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["chromium_driver", "screenshot", "wait"]

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
)


def _binaries() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        reason = "needs Debian's chromium: apt-get install chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return browser, driver


def chromium_driver(profile: Path):  # type: ignore[no-untyped-def]
    """A fresh headless chromium with its own ``--user-data-dir``."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    browser, driver = _binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def screenshot(driver, name: str, fallback: Path) -> None:  # type: ignore[no-untyped-def]
    """Save a PNG under ``$SEEDPROXY_UI_SCREENSHOTS`` (e.g. ``docs``) when set, so the
    README's pictures are regenerated on purpose only; else under ``fallback``."""
    folder = Path(os.environ.get("SEEDPROXY_UI_SCREENSHOTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / name))


def wait(driver: Any, condition: Callable[[Any], Any]) -> Any:
    """Wait for ``condition``; on timeout, fail with what the page shows instead."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(
            driver, 30, ignored_exceptions=(StaleElementReferenceException,)
        ).until(condition)
    except TimeoutException:
        shown = driver.find_element(By.TAG_NAME, "body").text
        logs = driver.get_log("browser")
        raise AssertionError(f"page shows: {shown[:2000]!r}; console: {logs}") from None
