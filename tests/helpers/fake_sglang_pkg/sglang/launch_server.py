"""Fake ``python -m sglang.launch_server``: records its argv, CUDA_VISIBLE_DEVICES,
pid and process group to ``$FAKE_SGLANG_RECORD_DIR/<pid>.json``, then serves the fake
SGLang app on ``--host``/``--port`` until SIGTERM or SIGINT.

``FAKE_SGLANG_FAIL_ON_GPUS=0,1`` makes the server given exactly those GPUs exit with
code 3 instead of serving (a server that dies while loading). It dies only once
``FAKE_SGLANG_FAIL_AFTER`` servers (default 1: itself) have written their records, so
a test that reads every server's record never races the launcher, which stops the
others as soon as one dies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import uvicorn

from tests.helpers.fake_sglang import create_fake_sglang


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    known, _ = parser.parse_known_args()
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    record = {
        "argv": sys.argv[1:],
        "cuda_visible_devices": gpus,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
    }
    folder = Path(os.environ["FAKE_SGLANG_RECORD_DIR"])
    partial = folder / f"{os.getpid()}.tmp"  # renamed: a reader never sees half a record
    partial.write_text(json.dumps(record))
    partial.replace(folder / f"{os.getpid()}.json")
    if gpus is not None and gpus == os.environ.get("FAKE_SGLANG_FAIL_ON_GPUS"):
        siblings = int(os.environ.get("FAKE_SGLANG_FAIL_AFTER", "1"))
        deadline = time.monotonic() + 60
        while len(list(folder.glob("*.json"))) < siblings and time.monotonic() < deadline:
            time.sleep(0.01)
        return 3
    uvicorn.run(create_fake_sglang(), host=known.host, port=known.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
