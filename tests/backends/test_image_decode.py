"""Whatever bytes a client sends as an image, the check answers a 400 (``BadRequest``)
or accepts a whole image: never another exception (a 500)."""

from __future__ import annotations

import base64
import io
import random

from PIL import Image

from seedproxy.errors import BadRequest
from seedproxy.media import ImagePolicy, decode_image

POLICY = ImagePolicy(max_bytes=10**7, max_pixels=10**7, max_images=10)


def mutated(r: random.Random, data: bytes) -> bytes:
    """``data`` with a few bytes changed, cut short or spliced, as a broken upload."""
    d = bytearray(data)
    for _ in range(r.randint(1, 8)):
        if len(d) < 2:
            break
        op = r.random()
        if op < 0.5:
            d[r.randrange(len(d))] = r.randrange(256)
        elif op < 0.8:
            del d[r.randrange(1, len(d)):]
        else:
            at = r.randrange(len(d))
            d[at:at + r.randint(0, 5)] = r.randbytes(r.randint(0, 20))
    return bytes(d)


def test_broken_images_of_every_accepted_type_are_400s() -> None:
    r = random.Random(1)  # this seed's cases once raised Pillow's OSError from open
    originals = []
    for fmt in ("PNG", "JPEG", "GIF", "WEBP"):
        out = io.BytesIO()
        Image.frombytes("RGB", (32, 32), r.randbytes(32 * 32 * 3)).save(out, fmt)
        originals.append(out.getvalue())
    outcomes = {"accepted": 0, "refused": 0}
    for _ in range(3000):
        payload = base64.b64encode(mutated(r, r.choice(originals))).decode()
        try:
            decode_image(payload, None, POLICY, "messages")
            outcomes["accepted"] += 1
        except BadRequest:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 1000 and outcomes["accepted"] > 0, outcomes
