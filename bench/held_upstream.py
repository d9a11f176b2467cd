"""``fake_upstream.py``, except that a streamed answer for the model ``bench-hold``
sends its head and first chunk, then holds the rest until ``POST /release``; every
other request is answered as ``fake_upstream`` answers it. ``POST /reset`` holds
again. The open-file limit is raised to its hard limit (one socket per held answer).

    python bench/held_upstream.py --port P
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_upstream as fake  # noqa: E402

HOLD_MODEL = "bench-hold"


class Held:
    """The ASGI app; ``released`` is set by ``/release`` and replaced by ``/reset``."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await fake.app(scope, receive, send)
            return
        if scope["path"] in ("/release", "/reset"):
            if scope["path"] == "/release":
                self.released.set()
            else:
                self.released = asyncio.Event()
            await fake._send(send, 200, fake.JSON, b"{}")
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(parts)
        body = orjson.loads(raw) if raw else {}
        if body.get("model") != HOLD_MODEL or not body.get("stream"):
            replay = iter([{"type": "http.request", "body": raw, "more_body": False}])

            async def again() -> Any:
                return next(replay, None) or await receive()

            await fake.app(scope, again, send)
            return
        events = fake.STREAMS[(bool(body.get("logprobs")), False)]
        released = self.released
        await send({"type": "http.response.start", "status": 200, "headers": fake.SSE})
        await send({"type": "http.response.body", "body": events[0], "more_body": True})
        await released.wait()
        await send({"type": "http.response.body", "body": b"".join(events[1:]),
                    "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvicorn

    uvicorn.run(Held(), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False, loop="uvloop", http="httptools", lifespan="off",
                backlog=8192)


if __name__ == "__main__":
    main()
