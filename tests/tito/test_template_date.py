"""A chat template that writes today's date (Llama 3.2, gpt-oss and Mistral Small 3.2
call ``strftime_now``) renders the date ``template_date`` pins, whatever day it runs:
a rerun on another day sends the same prompt ids. Unpinned, it is the day of the
render, as transformers gives it."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from tests.conftest import Fake  # noqa: E402
from tests.tito.test_contract import TEMPLATE, TOKENIZER, generated  # noqa: E402

# As Llama 3.2's template reads it: the clock when the function is there, else a default.
DATED = ('{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}'
         '{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}'
         '{{- "Today Date: " ~ date_string ~ " (" ~ strftime_now("%A, %Y-%m-%d %%") ~ ")\\n" }}')


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("template") / "dated.jinja"
    path.write_text(DATED + Path(TEMPLATE).read_text())
    return str(path)


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def first_prompt(start_proxy: Callable[..., str], fake: Fake, tok: Any, template: str,
                 session: str, **settings: Any) -> str:
    base = start_proxy([fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                       chat_template=template, **settings)
    answer = httpx.post(f"{base}/sessions/{session}/v1/chat/completions", json={
        "model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200, answer.text
    return str(tok.decode(generated(fake)[-1]["input_ids"]))


def test_a_pinned_date_is_what_the_template_writes(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, template: str) -> None:
    text = first_prompt(start_proxy, fake, tok, template, "pinned",
                        template_date=datetime.date(2024, 2, 29))
    assert text.startswith("Today Date: 29 Feb 2024 (Thursday, 2024-02-29 %)\n")
    again = first_prompt(start_proxy, fake, tok, template, "pinned-again",
                         template_date="2031-11-03")  # as the flag or the environment gives it
    assert again.startswith("Today Date: 03 Nov 2031 (Monday, 2031-11-03 %)\n")


def test_unpinned_the_template_writes_the_day_of_the_render(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, template: str) -> None:
    before = datetime.datetime.now()
    text = first_prompt(start_proxy, fake, tok, template, "today")
    after = datetime.datetime.now()
    line = "Today Date: %d %b %Y (%A, %Y-%m-%d %%)\n"
    days = {moment.strftime(line) for moment in (before, after)}
    assert any(text.startswith(day) for day in days)
