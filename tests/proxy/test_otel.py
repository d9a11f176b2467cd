"""``serve --otel``: each request's span tree, exported by OTLP/HTTP to a receiver on
loopback, joins the client's W3C trace and hands it on to the upstream."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from seedproxy.errors import ConfigError
from seedproxy.pipeline.otel import otel_tracer
from seedproxy.seeds import derive_seed
from tests.conftest import Fake
from tests.helpers.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.helpers.procs import seedproxy_env
from tests.helpers.serving import Serving

IDENTITY = "task-17:3"
STEPS = {"admission", "store.view", "store.allocate", "upstream", "record"}
SERVER, CLIENT = 2, 3  # OTLP's SpanKind numbers
BODY = {"model": "default", "messages": [{"role": "user", "content": "trace me"}],
        "max_tokens": 4}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def proxy(fake: Fake, receiver: OtlpReceiver, tmp_path: Path) -> Iterator[Serving]:
    env = seedproxy_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                        OTEL_SERVICE_NAME="proxy-under-test", OTEL_BSP_SCHEDULE_DELAY="20")
    served = Serving("--upstream", fake.url, "--otel", env=env, log=tmp_path / "serve.log")
    yield served.wait()
    assert served.stop() in (0, -signal.SIGTERM)
    assert "Traceback" not in served.text()


def _traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-01", trace_id, parent


def _send(url: str, session: str, *, stream: bool, headers: dict[str, str]) -> httpx.Headers:
    path = f"{url}/sessions/{session}/v1/chat/completions"
    with httpx.Client(timeout=60) as client:
        if not stream:
            answer = client.post(path, json=BODY, headers=headers)
            assert answer.status_code == 200, answer.text
            return answer.headers
        with client.stream("POST", path, json={**BODY, "stream": True},
                           headers=headers) as streamed:
            assert streamed.status_code == 200
            assert b"data: [DONE]" in b"".join(streamed.iter_bytes())
            return streamed.headers


def _check_tree(spans: list[ReceivedSpan], *, session: str, index: int,
                upstream: str) -> ReceivedSpan:
    """The request's span (returned) and its steps, each its child; the attributes."""
    (root,) = [s for s in spans if s.kind == SERVER]
    assert root.name == "POST /v1/chat/completions"
    assert root.service == "proxy-under-test"
    assert {s.name for s in spans if s is not root} == STEPS
    assert len(spans) == len(STEPS) + 1
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    assert root.attributes["seedproxy.session"] == session
    assert root.attributes["seedproxy.identity"] == IDENTITY
    assert root.attributes["seedproxy.index"] == index
    assert root.attributes["seedproxy.seed"] == [derive_seed(IDENTITY, index)]
    assert root.attributes["seedproxy.upstream"] == upstream
    assert root.attributes["http.response.status_code"] == 200
    (call,) = [s for s in spans if s.name == "upstream"]
    assert call.kind == CLIENT and call.attributes["seedproxy.upstream"] == upstream
    return root


def test_a_request_span_tree_joins_the_clients_trace_and_reaches_the_upstream(
    fake: Fake, receiver: OtlpReceiver, proxy: Serving
) -> None:
    created = httpx.post(f"{proxy.url}/sessions", json={"identity": IDENTITY}, timeout=60)
    session = created.json()["sessions"][0]["session_id"]
    for index, stream in enumerate((False, True)):
        traceparent, trace_id, parent = _traceparent()
        headers = _send(proxy.url, session, stream=stream, headers={"traceparent": traceparent})
        assert headers["x-seedproxy-seed"] == str(derive_seed(IDENTITY, index))
        spans = receiver.trace(trace_id, count=len(STEPS) + 1)
        root = _check_tree(spans, session=session, index=index, upstream=fake.url)
        assert root.parent_span_id == parent  # the client's span is the parent
        (call,) = [s for s in spans if s.name == "upstream"]
        sent = fake.switches.headers[-1]["traceparent"]
        assert sent == f"00-{trace_id}-{call.span_id}-01"  # SGLang's spans: the call's children


def test_a_request_without_traceparent_starts_a_trace_the_upstream_joins(
    fake: Fake, receiver: OtlpReceiver, proxy: Serving
) -> None:
    created = httpx.post(f"{proxy.url}/sessions", json={"identity": IDENTITY}, timeout=60)
    session = created.json()["sessions"][0]["session_id"]
    _send(proxy.url, session, stream=True, headers={})
    _, trace_id, parent_id, _ = fake.switches.headers[-1]["traceparent"].split("-")
    spans = receiver.trace(trace_id, count=len(STEPS) + 1)
    root = _check_tree(spans, session=session, index=0, upstream=fake.url)
    assert root.parent_span_id == ""
    assert [s.span_id for s in spans if s.name == "upstream"] == [parent_id]


def test_only_http_protobuf_is_exported() -> None:
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL=grpc"):
        otel_tracer({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
