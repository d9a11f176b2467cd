"""Screenshots through token-in-token-out with Qwen2.5-VL's real template and tokenizer:
one placeholder id per image, every image of the prompt in ``image_data``, each turn
extending the last exactly, the same ids and images from chat, Messages and Responses,
and each image's expanded count as transformers' image processor gives it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import random
import sqlite3
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

from PIL import Image  # noqa: E402

from seedproxy.sessions import MemoryStore, SessionStore, open_store  # noqa: E402
from seedproxy.sessions.store.redis import RedisStore  # noqa: E402
from tests.conftest import Fake  # noqa: E402
from tests.helpers.images import data_url, png  # noqa: E402
from tests.helpers.real_tokenizers import family, tokenizer_dir  # noqa: E402

FAMILY = "qwen2.5-vl"
IMAGE_PAD, IM_END = 151655, 151645
SHOTS = [png(640, 480, (10, 20, 30)), png(1280, 720, (40, 50, 60)), png(333, 517, (70, 80, 90))]
EXPANDED = [391, 1196, 216]  # Qwen2VLImageProcessor(min 3136, max 12845056, patch 14, merge 2)
REPLIES = ["Click the button.", "Type hello.", "Done."]


@pytest.fixture(scope="module")
def tok() -> Any:
    return family(FAMILY)


def start(start_proxy: Callable[..., str], fake: Fake) -> str:
    fake.switches.script_stops = True
    fake.switches.image_token_id = IMAGE_PAD
    return start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir(FAMILY)))


def ask(k: int) -> str:
    return f"Turn {k}: what next?"


def script(fake: Fake, tok: Any) -> None:
    fake.switches.script = [list(tok.encode(r, add_special_tokens=False)) + [IM_END]
                            for r in REPLIES]


def chat_turns(base: str, session: str) -> list[str]:
    messages: list[dict[str, Any]] = []
    said = []
    for k, shot in enumerate(SHOTS):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": ask(k)},
            {"type": "image_url", "image_url": {"url": data_url(shot)}}]})
        answer = httpx.post(f"{base}/sessions/{session}/v1/chat/completions", timeout=60,
                            json={"model": "m", "messages": messages})
        assert answer.status_code == 200, answer.text
        text = answer.json()["choices"][0]["message"]["content"]
        messages.append({"role": "assistant", "content": text})
        said.append(text)
    return said


def messages_turns(base: str, session: str) -> list[str]:
    messages: list[dict[str, Any]] = []
    said = []
    for k, shot in enumerate(SHOTS):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": ask(k)},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(shot).decode()}}]})
        answer = httpx.post(f"{base}/sessions/{session}/v1/messages", timeout=60,
                            json={"model": "m", "max_tokens": 64, "messages": messages})
        assert answer.status_code == 200, answer.text
        text = answer.json()["content"][0]["text"]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        said.append(text)
    return said


def responses_turns(base: str, session: str) -> list[str]:
    items: list[dict[str, Any]] = []
    said = []
    for k, shot in enumerate(SHOTS):
        items.append({"role": "user", "content": [
            {"type": "input_text", "text": ask(k)},
            {"type": "input_image", "image_url": data_url(shot)}]})
        answer = httpx.post(f"{base}/sessions/{session}/v1/responses", timeout=60,
                            json={"model": "m", "input": items})
        assert answer.status_code == 200, answer.text
        output = answer.json()["output"]
        text = output[-1]["content"][0]["text"]
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]})
        said.append(text)
    return said


AGENTS = {"chat": chat_turns, "messages": messages_turns, "responses": responses_turns}


def generated(fake: Fake) -> list[dict[str, Any]]:
    return [r for r in fake.received if "input_ids" in r]


def test_three_screenshot_turns_through_each_route_give_the_same_exact_prompts(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start(start_proxy, fake)
    sent: dict[str, list[dict[str, Any]]] = {}
    for name, agent in AGENTS.items():
        script(fake, tok)
        before = len(generated(fake))
        assert agent(base, f"shots-{name}") == REPLIES
        sent[name] = generated(fake)[before:]
    urls = [data_url(shot) for shot in SHOTS]
    chat = sent["chat"]
    for k, request in enumerate(chat):
        assert request["image_data"] == urls[:k + 1]  # every image so far, in order
        assert request["input_ids"].count(IMAGE_PAD) == k + 1
    for k in range(2):  # turn k+1 is turn k's prompt + its sampled ids + the new message
        reply = list(tok.encode(REPLIES[k], add_special_tokens=False)) + [IM_END]
        prompt = chat[k]["input_ids"]
        assert chat[k + 1]["input_ids"][:len(prompt) + len(reply)] == prompt + reply
    history: list[dict[str, Any]] = []
    for k in range(3):
        history.append({"role": "user", "content": [{"type": "text", "text": ask(k)},
                                                     {"type": "image"}]})
        if k < 2:
            history.append({"role": "assistant", "content": REPLIES[k]})
    whole = tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert chat[2]["input_ids"] == list(tok.encode(whole, add_special_tokens=False))
    assert whole.count("<|vision_start|><|image_pad|><|vision_end|>") == 3
    for name in ("messages", "responses"):
        assert [(r["input_ids"], r["image_data"]) for r in sent[name]] == [
            (r["input_ids"], r["image_data"]) for r in chat], name


def test_the_record_gives_each_images_expanded_count_and_position(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start(start_proxy, fake)
    script(fake, tok)
    chat_turns(base, "record")
    record = httpx.get(f"{base}/sessions/record/trajectory", timeout=60).json()
    digests = [hashlib.sha256(shot).hexdigest() for shot in SHOTS]
    for k, interaction in enumerate(record["interactions"]):
        ids = interaction["prompt_token_ids"]
        images = interaction["images"]
        assert [i["tokens"] for i in images] == EXPANDED[:k + 1]
        assert [i["sha256"] for i in images] == digests[:k + 1]
        assert [(i["width"], i["height"]) for i in images] == [(640, 480), (1280, 720),
                                                                (333, 517)][:k + 1]
        assert [i["position"] for i in images] == [p for p, t in enumerate(ids)
                                                   if t == IMAGE_PAD]
        assert ids == generated(fake)[k]["input_ids"]


def test_a_second_session_of_the_identity_sends_identical_ids_images_and_seeds(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start(start_proxy, fake)
    script(fake, tok)
    chat_turns(base, "shot")
    first = generated(fake)
    made = httpx.post(f"{base}/sessions", json={"identity": "shot"}, timeout=60).json()
    again = made["sessions"][0]["session_id"]
    assert again != "shot"
    script(fake, tok)
    assert chat_turns(base, again) == REPLIES
    second = generated(fake)[len(first):]
    keys = ("input_ids", "image_data", "sampling_params")
    assert [{k: r[k] for k in keys} for r in second] == [{k: r[k] for k in keys} for r in first]
    assert len({r["sampling_params"]["sampling_seed"] for r in first}) == 3


def test_verify_resends_each_turn_with_its_recorded_images(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    base = start(start_proxy, fake)
    script(fake, tok)
    chat_turns(base, "checked")
    live = generated(fake)
    script(fake, tok)
    report = httpx.post(f"{base}/sessions/checked/verify", timeout=60).json()
    assert report["ok"] is True and report["checked"] == 3, report
    again = generated(fake)[len(live):]
    assert [(r["input_ids"], r["image_data"]) for r in again] == [
        (r["input_ids"], r["image_data"]) for r in live]


def test_converters_carry_the_images_in_their_free_slot_and_skyrl_refuses_them(
        fake: Fake, start_proxy: Callable[..., str], tok: Any) -> None:
    from seedproxy.client import Trajectory, to_skyrl, to_slime, to_tinker, to_trl, to_verl

    base = start(start_proxy, fake)
    script(fake, tok)
    chat_turns(base, "convert")
    rewarded = httpx.post(f"{base}/sessions/convert/reward", json={"reward": 1.0}, timeout=60)
    assert rewarded.status_code == 200, rewarded.text
    exported = httpx.get(f"{base}/sessions/convert/trajectory", timeout=60,
                         params={"style": "concat"}).json()
    batch = [Trajectory.from_json(exported)]
    slots = [to_verl(batch)[0]["extra_fields"], to_slime(batch)[0]["metadata"],
             to_trl(batch)["rollout"][0], to_tinker(batch)[1][0]]
    for slot in slots:
        images = slot["images"]
        assert [base64.b64decode(i["data"]) for i in images] == SHOTS
        assert [i["tokens"] for i in images] == EXPANDED
    tokens = to_verl(batch)[0]["prompt_ids"] + to_verl(batch)[0]["response_ids"]
    assert [i["position"] for i in slots[0]["images"]] == [
        p for p, t in enumerate(tokens) if t == IMAGE_PAD]
    with pytest.raises(ValueError, match="holds images"):
        to_skyrl(batch)


def test_add_vision_id_is_refused_before_any_index(
        fake: Fake, start_proxy: Callable[..., str]) -> None:
    base = start(start_proxy, fake)
    answer = httpx.post(f"{base}/sessions/numbered/v1/chat/completions", timeout=60, json={
        "model": "m", "chat_template_kwargs": {"add_vision_id": True},
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(SHOTS[0])}}]}]})
    assert answer.status_code == 400, answer.text
    assert "add_vision_id" in answer.json()["error"]["message"]
    assert "x-seedproxy-request-index" not in answer.headers
    assert generated(fake) == []


def test_the_start_up_check_covers_the_vision_template(tok: Any) -> None:
    from seedproxy.errors import ConfigError
    from seedproxy.tito.renderer import Renderer
    from seedproxy.tito.template_check import check
    from seedproxy.tito.vision import vision_of

    template = str(tok.chat_template)
    vision = vision_of(tok, template, str(tokenizer_dir(FAMILY)))
    assert vision is not None and vision.image_id == IMAGE_PAD
    assert [vision.tokens(*shot) for shot in [(640, 480), (1280, 720), (333, 517)]] == EXPANDED
    check(Renderer(tok, template, vision=vision))  # else ConfigError
    doubled = template.replace("<|image_pad|>", "<|image_pad|><|image_pad|>")
    with pytest.raises(ConfigError, match="one '<\\|image_pad\\|>' per image: 2 for one"):
        check(Renderer(tok, doubled, vision=vision))
    # a template numbering images by their place in the whole conversation
    numbered = template.replace("{% if add_vision_id %}", "{% if true %}")
    with pytest.raises(ConfigError, match="cannot render incrementally"):
        check(Renderer(tok, numbered, vision=vision))


def noise(k: int, side: int = 96) -> bytes:
    """A screenshot that does not compress: its PNG is about its raw size."""
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), random.Random(k).randbytes(side * side * 3)).save(
        out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_a_20_turn_screenshot_rollout_stores_and_exports_each_screenshot_once(
        fake: Fake, start_proxy: Callable[..., str], tok: Any, tmp_path: Any,
        kind: str, request: pytest.FixtureRequest) -> None:
    db = f"{tmp_path}/s.db"
    url = {"memory": "memory://", "sqlite": f"sqlite:///{db}",
           "redis": request.getfixturevalue("redis_url") if kind == "redis" else ""}[kind]
    store = open_store(url)
    fake.switches.script_stops = True
    fake.switches.image_token_id = IMAGE_PAD
    base = start_proxy([fake.url], token_in_token_out=True,
                       tokenizer=str(tokenizer_dir(FAMILY)), _app={"store": store})
    fake.switches.script = [list(tok.encode(f"Step {k}.", add_special_tokens=False)) + [IM_END]
                            for k in range(20)]
    shots = [noise(k) for k in range(20)]
    shot_size = len(base64.b64encode(shots[0]))
    messages: list[dict[str, Any]] = []
    exported, stored = [], []
    for k, shot in enumerate(shots):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": ask(k)},
            {"type": "image_url", "image_url": {"url": data_url(shot)}}]})
        answer = httpx.post(f"{base}/sessions/long/v1/chat/completions", timeout=60,
                            json={"model": "m", "messages": messages})
        assert answer.status_code == 200, answer.text
        messages.append(answer.json()["choices"][0]["message"])
        if k % 5 == 4:
            concat = httpx.get(f"{base}/sessions/long/trajectory", timeout=60,
                               params={"style": "concat"})
            exported.append(len(concat.content))
            stored.append(asyncio.run(stored_bytes(store, db, url)))
    final = concat.json()["branches"][0]  # a sample: one branch, its images once each
    assert "images" not in concat.json()  # the top level repeats the ids, not the images
    assert [i["sha256"] for i in final["images"]] == [hashlib.sha256(s).hexdigest()
                                                      for s in shots]
    assert [base64.b64decode(i["data"]) for i in final["images"]] == shots
    positions = [p for p, t in enumerate(final["token_ids"]) if t == IMAGE_PAD]
    assert [i["position"] for i in final["images"]] == positions
    # five turns add five screenshots (and a few hundred bytes of ids and text each),
    # not the 5 x 20 that resending every screenshot every turn would
    for sizes in (exported, stored):
        steps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
        assert all(5 * shot_size <= step <= 5 * shot_size * 1.25 for step in steps), (
            sizes, shot_size)


async def stored_bytes(store: SessionStore, db: str, url: str) -> int:
    """The bytes of every interaction record the store holds."""
    if isinstance(store, MemoryStore):
        return await store.stored_bytes()
    if isinstance(store, RedisStore):  # the session's hash of records
        import redis

        client = redis.Redis.from_url(url.split("?")[0])
        blobs = client.hvals(store.key_prefix + "i:long")
        client.close()
        return sum(len(blob) for blob in blobs)
    with sqlite3.connect(db) as connection:
        row = connection.execute("SELECT SUM(LENGTH(data)) FROM interactions").fetchone()
    return int(row[0])
