"""Fake ``python -m sglang.launch_server``: records its argv, CUDA_VISIBLE_DEVICES,
pid and process group to ``$FAKE_SGLANG_RECORD_DIR/<pid>.json``, then serves the fake
SGLang app on ``--host``/``--port`` until SIGTERM or SIGINT.

``FAKE_SGLANG_FAIL_ON_GPUS=0,1`` makes the server given exactly those GPUs exit with
code 3 instead of serving (a server that dies while loading).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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
    (folder / f"{os.getpid()}.json").write_text(json.dumps(record))
    if gpus is not None and gpus == os.environ.get("FAKE_SGLANG_FAIL_ON_GPUS"):
        return 3
    uvicorn.run(create_fake_sglang(), host=known.host, port=known.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
