"""Install hints name what a user can run: seedproxy is installed from its checkout,
not from PyPI, so a missing extra is named as ``pip install -e '.[extra]'``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from seedproxy.client import write_parquet
from seedproxy.errors import ConfigError
from seedproxy.sessions.store.redis import RedisStore
from seedproxy.tito.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def test_no_hint_names_an_unpublished_package() -> None:
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "src").rglob("*.py")]
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts
            for m in re.finditer(r"pip install \S*seedproxy\[", p.read_text())]
    assert hits == []


def test_a_missing_extra_names_the_checkout_install(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    for module in ("pyarrow", "pyarrow.parquet", "redis", "redis.asyncio", "transformers"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[parquet]'")):
        write_parquet([], tmp_path / "x.parquet")
    with pytest.raises(ConfigError, match=re.escape("pip install -e '.[redis]'")):
        RedisStore("redis://127.0.0.1:9")
    with pytest.raises(ConfigError, match=re.escape("pip install -e '.[tito]'")):
        load_tokenizer(str(tmp_path))
