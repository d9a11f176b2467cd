"""``GET /v1/models/{model}``: the card SGLang serves, so ``client.models.retrieve()``
works at the root and in a session; an unknown model is OpenAI's 404."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import Fake


@pytest.mark.parametrize("base", ["/v1", "/sessions/ep-m/v1"])
def test_models_retrieve_gives_the_upstreams_card(proxy: str, fake: Fake, base: str) -> None:
    client = openai.OpenAI(base_url=proxy + base, api_key="x", max_retries=0)
    listed = client.models.list().data
    card = client.models.retrieve(fake.switches.name)
    assert card.id == fake.switches.name and card.object == "model"
    assert card.model_dump(exclude={"created"}) == listed[0].model_dump(exclude={"created"})
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.status_code == 404
    assert missing.value.body == {
        "message": "The model 'no-such-model' does not exist",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found",
    }


def test_a_model_id_with_a_slash_is_one_model(http: httpx.Client, fake: Fake) -> None:
    fake.switches.name = "Qwen/Qwen3-8B"
    answer = http.get("/v1/models/Qwen/Qwen3-8B")
    assert answer.status_code == 200 and answer.json()["id"] == "Qwen/Qwen3-8B"


def test_default_names_the_served_model(http: httpx.Client, fake: Fake) -> None:
    """Every example sends ``model: "default"``: retrieving it gives the served card."""
    fake.switches.name = "Qwen/Qwen3-8B"
    answer = http.get("/v1/models/default")
    assert answer.status_code == 200 and answer.json()["id"] == "Qwen/Qwen3-8B"
