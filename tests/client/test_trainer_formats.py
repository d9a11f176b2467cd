"""Converting exported trajectories into trainers' formats, on real rollouts: a group
of two tool-using agents through the token-in-token-out proxy (the fake SGLang's
scripted ids, SmolLM2's tokenizer), each compacting its history once, exported with
``style="concat"``. Every row's mask is 1 exactly on the recorded completion ids
(with their recorded logprobs), 0 on prompt, tool and user tokens; rewards ride
along; one row per branch, linked to the branch it was compacted from.

verl, slime and SkyRL do not install on this CPU-only Python (Ray/Megatron, or
Python 3.12 only): their shapes are pinned here field by field. TRL and Tinker do:
their rows are checked against the real packages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from seedproxy.client import (  # noqa: E402
    Sample,
    SeedProxyClient,
    Trajectory,
    segments,
    to_skyrl,
    to_slime,
    to_tinker,
    to_tinker_objects,
    to_trl,
    to_verl,
)
from seedproxy.engine.model import default_gguf_path, gguf_tokenizer_dir  # noqa: E402
from seedproxy.proxy import create_app  # noqa: E402
from seedproxy.settings import Settings  # noqa: E402
from tests.helpers.fake_sglang import Switches, create_fake_sglang  # noqa: E402
from tests.helpers.servers import ServerThread  # noqa: E402

TEMPLATE = str(Path(__file__).parents[1] / "helpers" / "qwen3_style.jinja")
TOKENIZER = str(gguf_tokenizer_dir(default_gguf_path()))
EOT = 2  # <|im_end|> in SmolLM2's vocabulary
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}]
FACTS = {"sea": "a large body of salt water", "tide": "the sea rising and falling"}
REWARDS = [1.0, 0.25]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def call(word: str) -> str:
    return f'<tool_call>\n{{"name": "lookup", "arguments": {{"word": "{word}"}}}}\n</tool_call>'


def script(tokenizer: Any) -> list[list[int]]:
    """Five turns per sample: two tool calls, an answer, then two turns after a
    compaction; the two samples say different things."""
    turns = []
    for k in range(len(REWARDS)):
        for text in (call("sea"), call("tide"), f"Answer {k}: salty.", f"Summary ok {k}.",
                     f"Still here {k}."):
            turns.append(list(tokenizer.encode(text, add_special_tokens=False)) + [EOT])
    return turns


async def agent(sample: Sample) -> int:
    """Tool turns, then a summary replaces the history (marked with the header)."""
    client = sample.async_openai(max_retries=0)
    system = {"role": "system", "content": "You are an agent. Use tools."}
    messages: list[Any] = [system, {"role": "user", "content": "What is the sea?"}]
    last = None
    for turn in range(5):
        headers = {}
        if turn == 3:
            messages = [system, {"role": "user", "content": "Summary: the sea is salty."}]
            headers = {"x-seedproxy-compacted-from": str(last)}
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=messages, tools=TOOLS, max_tokens=64, extra_headers=headers)
        last = int(raw.headers["x-seedproxy-request-index"])
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        for tool_call in message.get("tool_calls") or []:
            word = tool_call["function"]["arguments"].split('"')[3]
            messages.append({"role": "tool", "tool_call_id": tool_call["id"],
                             "content": FACTS[word]})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": f"Go on ({turn})."})
    await client.close()
    return last


@pytest.fixture(scope="module")
def rollouts(tokenizer: Any) -> Iterator[tuple[list[Trajectory], list[dict[str, Any]]]]:
    """(the group's concat export, each session's individual interactions); run once
    for the module, the tests only read it."""
    switches = Switches(script=script(tokenizer))
    with ServerThread(create_fake_sglang(switches)) as fake:
        settings = Settings(upstream=[fake.url], token_in_token_out=True, tokenizer=TOKENIZER,
                            chat_template=TEMPLATE, tool_parser="hermes")
        with ServerThread(create_app(settings)) as proxy_server:

            async def run() -> tuple[list[Trajectory], list[dict[str, Any]]]:
                async with SeedProxyClient(proxy_server.url) as proxy:
                    group = await proxy.create_group("task", k=len(REWARDS))
                    await group.run(agent, concurrency=1)  # one at a time: a shared script
                    await group.set_rewards(REWARDS)
                    await group.end()
                    exported = await group.export(style="concat")
                    records = [(await proxy.trajectory(s.session_id)).raw
                               for s in group.samples]
                return list(exported), records

            yield asyncio.run(run())


def recorded_turns(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["interaction_id"]: i for i in record["interactions"]}


def test_every_row_masks_exactly_the_sampled_tokens(
        rollouts: tuple[list[Trajectory], list[dict[str, Any]]], tokenizer: Any) -> None:
    exported, records = rollouts
    rows = segments(exported)
    assert [(r.identity, r.branch_id, r.compacted_from, r.branch_index, r.last)
            for r in rows] == [("task:0", "i0", None, 0, False), ("task:0", "i3", "i0", 1, True),
                               ("task:1", "i0", None, 0, False), ("task:1", "i3", "i0", 1, True)]
    assert [r.interaction_ids for r in rows] == [["i0", "i1", "i2"], ["i3", "i4"]] * 2
    assert [r.reward for r in rows] == [1.0, 1.0, 0.25, 0.25]
    for row in rows:
        turns = recorded_turns(records[REWARDS.index(row.reward)])
        members = [turns[i] for i in row.interaction_ids]
        sampled = [t for i, t in enumerate(row.token_ids) if row.loss_mask[i]]
        assert sampled == [t for m in members for t in m["completion_token_ids"]]
        assert [lp for i, lp in enumerate(row.logprobs or []) if row.loss_mask[i]] == [
            lp for m in members for lp in m["logprobs"]]
        assert all(lp == 0.0 for i, lp in enumerate(row.logprobs or []) if not row.loss_mask[i])
        final = members[-1]
        assert row.token_ids == final["prompt_token_ids"] + final["completion_token_ids"]
        unsampled = tokenizer.decode([t for i, t in enumerate(row.token_ids)
                                      if not row.loss_mask[i]])
        if row.branch_id == "i0":  # both tool results sit under mask 0
            assert FACTS["sea"] in unsampled and FACTS["tide"] in unsampled
            assert "salt water" not in tokenizer.decode(sampled)
        else:  # the summary and the user's nudge too
            assert "Summary: the sea is salty." in unsampled and "Go on (3)." in unsampled
            assert "Go on" not in tokenizer.decode(sampled)


def test_verl_rows(rollouts: tuple[list[Trajectory], list[dict[str, Any]]]) -> None:
    exported, _ = rollouts
    rows, segs = to_verl(exported), segments(exported)
    assert len(rows) == 4
    for row, seg in zip(rows, segs, strict=True):
        assert set(row) == {"prompt_ids", "response_ids", "response_mask", "response_logprobs",
                            "reward_score", "metrics", "extra_fields"}
        p = seg.prompt_length
        assert row["prompt_ids"] + row["response_ids"] == seg.token_ids
        assert row["response_mask"][0] == 1 and 1 not in seg.loss_mask[:p]
        assert row["response_mask"] == seg.loss_mask[p:]
        assert row["response_logprobs"] == (seg.logprobs or [])[p:]
        assert len(row["response_ids"]) == len(row["response_mask"]) == len(
            row["response_logprobs"])
        assert 0 in row["response_mask"]  # tool results inside the response
        assert row["reward_score"] == seg.reward
        assert row["extra_fields"] == seg.link()
    assert rows[1]["extra_fields"]["compacted_from"] == "i0"
    assert rows[1]["extra_fields"]["session_id"] == rows[0]["extra_fields"]["session_id"]


def test_slime_samples(rollouts: tuple[list[Trajectory], list[dict[str, Any]]]) -> None:
    exported, _ = rollouts
    rows, segs = to_slime(exported), segments(exported)
    assert [(r["group_index"], r["index"]) for r in rows] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    for row, seg in zip(rows, segs, strict=True):
        p = seg.prompt_length
        assert row["tokens"] == seg.token_ids
        assert row["response_length"] == len(seg.token_ids) - p
        assert len(row["loss_mask"]) == len(row["rollout_log_probs"]) == row["response_length"]
        assert [0] * p + row["loss_mask"] == seg.loss_mask
        assert row["rollout_log_probs"] == (seg.logprobs or [])[p:]
        assert row["reward"] == seg.reward and row["status"] == "completed"
        assert row["session_id"] == seg.session_id and row["metadata"] == seg.link()


def test_skyrl_generator_output(rollouts: tuple[list[Trajectory], list[dict[str, Any]]]) -> None:
    exported, _ = rollouts
    out, segs = to_skyrl(exported), segments(exported)
    assert set(out) == {"prompt_token_ids", "response_ids", "rewards", "loss_masks",
                        "stop_reasons", "rollout_metrics", "rollout_logprobs",
                        "trajectory_ids", "is_last_step", "sampling_masks"}
    group = exported[0].group_id
    assert out["trajectory_ids"] == [{"instance_id": group, "repetition_id": r}
                                     for r in (0, 0, 1, 1)]
    assert out["is_last_step"] == [False, True, False, True]
    assert out["rewards"] == [1.0, 1.0, 0.25, 0.25]
    for i, seg in enumerate(segs):
        assert out["prompt_token_ids"][i] + out["response_ids"][i] == seg.token_ids
        p = len(out["prompt_token_ids"][i])
        assert out["loss_masks"][i] == seg.loss_mask[p:]
        assert out["rollout_logprobs"][i] == (seg.logprobs or [])[p:]


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_trl_grpo_trains_a_step_on_the_rows(
        rollouts: tuple[list[Trajectory], list[dict[str, Any]]], tokenizer: Any,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's own GRPOTrainer takes ``to_trl`` from a ``rollout_func`` and trains a step
    (a one-layer Llama on CPU); its completion lengths count sampled tokens only, so
    ``env_mask`` reached its loss mask, and the forwarded rewards reached its reward
    function."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    exported, _ = rollouts
    out, segs = to_trl(exported), segments(exported)
    for i, seg in enumerate(segs):
        assert out["prompt_ids"][i] + out["completion_ids"][i] == seg.token_ids
        p = len(out["prompt_ids"][i])
        assert out["env_mask"][i] == seg.loss_mask[p:]
        assert out["logprobs"][i] == (seg.logprobs or [])[p:]
    assert out["reward"] == [1.0, 1.0, 0.25, 0.25]
    assert [r["branch_id"] for r in out["rollout"]] == ["i0", "i3", "i0", "i3"]

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2))
    seen: list[list[float]] = []

    def reward(prompts: Any, completions: Any, reward: list[float], **_: Any) -> list[float]:
        seen.append(list(reward))
        return reward

    longest = max(len(c) for c in out["completion_ids"])
    config = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                        num_generations=4, max_steps=1, report_to=[], use_cpu=True,
                        logging_steps=1, save_strategy="no", max_completion_length=longest)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config,
                          train_dataset=Dataset.from_list([{"prompt": "x"}] * 4),
                          processing_class=tokenizer, rollout_func=lambda prompts, _: out)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1 and seen == [out["reward"]]
    sampled = [sum(m) for m in out["env_mask"]]
    assert sampled != [len(c) for c in out["completion_ids"]]  # tool tokens were in there
    assert logged["completions/mean_length"] == pytest.approx(sum(sampled) / 4)
    assert logged["reward"] == pytest.approx(0.625)


def test_tinker_datums(rollouts: tuple[list[Trajectory], list[dict[str, Any]]]) -> None:
    pytest.importorskip("tinker")
    exported, _ = rollouts
    datums, metadata = to_tinker(exported, advantages=[0.5, -0.5])
    objects, _ = to_tinker_objects(exported, advantages=[0.5, -0.5])
    segs = segments(exported)
    for datum, obj, meta, seg in zip(datums, objects, metadata, segs, strict=True):
        assert datum["model_input"] == seg.token_ids[:-1] == obj.model_input.to_ints()
        inputs = {k: v.tolist() for k, v in obj.loss_fn_inputs.items()}
        assert inputs["target_tokens"] == seg.token_ids[1:]
        assert obj.loss_fn_inputs["target_tokens"].dtype == "int64"
        advantage = 0.5 if seg.reward == 1.0 else -0.5
        assert inputs["advantages"] == [advantage if m else 0.0 for m in seg.loss_mask[1:]]
        assert datum["loss_fn_inputs"]["logprobs"] == (seg.logprobs or [])[1:]
        assert inputs["logprobs"] == pytest.approx(datum["loss_fn_inputs"]["logprobs"])
        assert meta["mask"] == seg.loss_mask[1:] and meta["branch_id"] == seg.branch_id
    by_reward, _ = to_tinker(exported)
    assert {a for d in by_reward for a in d["loss_fn_inputs"]["advantages"]} == {0.0, 1.0, 0.25}


def test_what_cannot_be_one_sequence_is_refused() -> None:
    individual = Trajectory.from_json({"session_id": "s", "identity": "s", "interactions": []})
    with pytest.raises(ValueError, match="style='concat'"):
        to_verl([individual])
    drift = Trajectory.from_json({"session_id": "d", "identity": "d", "style": "concat",
                                  "concat_error": {"turn": 1, "interaction_id": "i1",
                                                   "request_index": 1, "position": 4,
                                                   "reason": "prompt does not extend"}})
    with pytest.raises(ValueError, match="prompt does not extend"):
        to_slime([drift])
    broken = Trajectory.from_json({"session_id": "b", "identity": "b", "style": "concat",
                                   "branches": [{"branch_id": "i0", "token_ids": [1, 2],
                                                 "loss_mask": [0, 1], "logprobs": None,
                                                 "error": {"reason": "logprobs missing"}}]})
    with pytest.raises(ValueError, match="'i0'.*logprobs missing"):
        to_skyrl([broken])
    unrewarded = Trajectory.from_json({"session_id": "u", "identity": "u", "style": "concat",
                                       "token_ids": [5, 6, 7], "loss_mask": [0, 1, 1],
                                       "logprobs": [0.0, -0.5, -0.25],
                                       "interaction_ids": ["i0"]})
    assert to_verl([unrewarded])[0]["reward_score"] is None
    with pytest.raises(ValueError, match="no reward"):
        to_skyrl([unrewarded])
    assert to_trl([unrewarded])["completion_ids"] == [[6, 7]]


def test_a_token_in_token_out_concat_error_is_read() -> None:
    # A token-in-token-out branch's error names no turn, index or position.
    broken = Trajectory.from_json({"session_id": "t", "identity": "t", "style": "concat",
                                   "token_ids": None, "concat_error": {
                                       "interaction_id": "i1", "reason": "logprobs missing"}})
    assert broken.concat_error is not None
    assert (broken.concat_error.interaction_id, broken.concat_error.turn) == ("i1", None)
    with pytest.raises(ValueError, match="logprobs missing"):
        to_verl([broken])
    empty = Trajectory.from_json({"session_id": "e", "identity": "e", "style": "concat",
                                  "concat_error": {"reason": "no turns"}})
    assert empty.concat_error is not None and empty.concat_error.reason == "no turns"
