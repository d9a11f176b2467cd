"""A sequence's tokens and logprobs are bitwise the same alone and in any batch.

Schedules are driven step by step through the ``Generator`` (no threads, no timing), as
the worker drives it: requests are admitted in order whenever the batch has room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")

from seedproxy.engine.generator import Generator, GenRequest, Update  # noqa: E402
from seedproxy.engine.params import parse_sampling_params  # noqa: E402
from seedproxy.engine.testing import tiny_model  # noqa: E402

Result = tuple[list[int], list[float], list[list[tuple[int, float]]], str, Any, int]


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    # One thread: the property holds at any fixed count, and a shared 2-core machine makes
    # OpenMP's two-thread barriers very slow.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_model()
    torch.set_num_threads(threads)


def requests(model: Any) -> list[GenRequest]:
    tok = model.tokenizer
    long = tok.encode("Once upon a time, in a land far away, there lived a dragon who "
                      "loved riddles more than gold, and every traveller had to answer "
                      "three of them before crossing the bridge.", add_special_tokens=False)
    specs: list[tuple[list[int], dict[str, Any]]] = [
        ([11, 22, 33], {"temperature": 0}),
        ([11, 22, 33], {"sampling_seed": 1}),
        ([11, 22, 33], {"sampling_seed": 2, "top_p": 0.9}),
        (long, {"sampling_seed": 3, "top_k": 20}),
        ([5] * 17, {"sampling_seed": 4, "min_p": 0.05, "temperature": 0.7}),
        (long[:9], {"sampling_seed": 5, "min_new_tokens": 4}),
        ([7, 8], {"sampling_seed": 6, "max_new_tokens": 3}),
        (long[3:30], {"sampling_seed": 7, "temperature": 1.3}),
        ([42] * 40, {"sampling_seed": 8}),
        ([9, 10, 11, 12], {"sampling_seed": 9, "stop": ["e"]}),
    ]
    out = []
    for i, (ids, sp) in enumerate(specs):
        params = parse_sampling_params({"max_new_tokens": 12, **sp}, model.vocab_size)
        out.append(GenRequest(f"r{i}", ids, params, return_logprob=True, top_logprobs_num=3,
                              return_input_logprob=(i == 3)))
    return out


def run_schedule(gen: Generator, reqs: list[GenRequest], arrivals: list[int]) -> list[Result]:
    """Admit request i no earlier than step ``arrivals[i]``, in order, when there is room."""
    finals: dict[int, Update] = {}

    def keeper(i: int) -> Callable[[Update], None]:
        def keep(upd: Update) -> None:
            if upd.finish is not None:
                finals[i] = upd
        return keep

    waiting = sorted(range(len(reqs)), key=lambda i: (arrivals[i], i))
    step = 0
    with torch.inference_mode():
        while len(finals) < len(reqs):
            while waiting and arrivals[waiting[0]] <= step and gen.has_room:
                i = waiting.pop(0)
                gen.add(reqs[i], keeper(i), lambda: False)
            if gen.running:
                gen.step()
            step += 1
    return [(u.output_ids, u.logprobs, u.top_logprobs, u.text, u.finish,
             len(u.input_logprobs)) for u in (finals[i] for i in range(len(reqs)))]


def alone(model: Any, reqs: list[GenRequest], **kw: Any) -> list[Result]:
    return [run_schedule(Generator(model, cache_mb=0, **kw), [r], [0])[0] for r in reqs]


@pytest.mark.parametrize("max_batch,arrivals", [
    (8, [0] * 10),                              # a full batch, two waiting
    (8, [0, 0, 1, 1, 2, 3, 5, 8, 13, 21]),      # staggered arrivals
    (3, [0, 4, 0, 9, 2, 2, 0, 1, 30, 6]),       # a small batch, a queue, out of order
    (8, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),        # reverse
])
def test_batched_equals_alone(model: Any, max_batch: int, arrivals: list[int]) -> None:
    reqs = requests(model)
    solo = alone(model, reqs, max_batch=max_batch)
    together = run_schedule(Generator(model, max_batch=max_batch), reqs, arrivals)
    for i, (a, b) in enumerate(zip(solo, together, strict=True)):
        assert a == b, f"request {i} changed in the batch"
    assert len({tuple(r[0]) for r in solo}) > 5  # the requests really differ


def test_batch_sizes_share_the_same_arithmetic(model: Any) -> None:
    """max_batch 1, 4 and 8 give the same bits (the kernel is row-count invariant here);
    forced padding gives its own, equally batch-independent, bits."""
    reqs = requests(model)[:6]
    base = alone(model, reqs, max_batch=1)
    for b in (4, 8):
        gen = Generator(model, max_batch=b)
        assert not gen.runner.pad
        assert run_schedule(gen, reqs, [0, 1, 0, 2, 0, 3]) == base
    padded_alone = alone(model, reqs, max_batch=8, pad=True)
    padded = run_schedule(Generator(model, max_batch=8, pad=True), reqs, [0, 1, 0, 2, 0, 3])
    assert padded == padded_alone


def test_processor_is_applied_per_sequence(model: Any) -> None:
    """GenRequest.processor sees its own row and history and hears each token drawn."""

    class Forbid:
        def __init__(self, token: int) -> None:
            self.token, self.seen, self.histories = token, [], []

        def process(self, logits: Any, output_ids: list[int]) -> Any:
            self.histories.append(list(output_ids))
            logits[self.token] = float("-inf")
            return logits

        def accept(self, token_id: int) -> None:
            self.seen.append(token_id)

    params = parse_sampling_params({"max_new_tokens": 6, "temperature": 0,
                                    "ignore_eos": True}, model.vocab_size)
    plain = GenRequest("a", [11, 22, 33], params)
    first = alone(model, [plain])[0][0]
    proc = Forbid(first[0])
    reqs = [GenRequest("b", [11, 22, 33], params, processor=proc), plain]
    out = run_schedule(Generator(model), reqs, [0, 0])
    assert out[1][0] == first
    assert out[0][0][0] != first[0] and proc.seen == out[0][0]
    assert proc.histories == [out[0][0][:k] for k in range(6)]


def test_http_concurrent_mixed_requests_match_alone(engine: Any) -> None:
    """Over HTTP: different prompts, lengths and parameters, served alone, then together."""
    import concurrent.futures as cf
    import threading

    import httpx

    bodies = [{"input_ids": ids, "return_logprob": True,
               "sampling_params": {"max_new_tokens": n, "sampling_seed": s, **extra}}
              for ids, n, s, extra in (
                  ([11, 22, 33], 12, 1, {}), ([5] * 30, 6, 2, {"top_p": 0.8}),
                  ([7, 8], 16, 3, {"temperature": 0}), (list(range(100, 140)), 9, 4, {}),
                  ([9, 10, 11], 12, 5, {"top_k": 5}), ([1234], 20, 6, {"min_p": 0.1}))]

    def post(body: dict[str, Any], barrier: threading.Barrier | None = None) -> Any:
        with httpx.Client(base_url=engine.url, timeout=120) as c:
            if barrier is not None:
                barrier.wait()
            r = c.post("/generate", json=body)
            assert r.status_code == 200, r.text
            res = r.json()
            return res["output_ids"], res["meta_info"]["output_token_logprobs"]

    assert httpx.get(engine.url + "/get_server_info").json()["max_batch"] == 8
    alone_out = [post(b) for b in bodies]
    barrier = threading.Barrier(len(bodies))
    with cf.ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: post(b, barrier), bodies))
    assert together == alone_out
