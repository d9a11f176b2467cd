"""Images in a token prompt, as the model's processor expands them (Qwen2-VL family:
Qwen2.5-VL, Qwen3-VL).

Invariants (SGLang 0.5.23 ``base_processor._expand_input_ids``; transformers'
``Qwen2VLImageProcessor``):
- The prompt sent upstream holds the template's own placeholder once per image: exactly
  one ``image_token`` id per image, in the order of ``image_data``. The server expands the
  i-th into that image's ``tokens``; the prompt ids as sent are what is recorded.
- ``tokens(width, height)`` is the processor's count (640x480 gives 391 with
  Qwen2.5-VL's configuration).
- A model whose folder holds no ``preprocessor_config.json`` with these fields takes no
  images in token-in-token-out mode.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadRequest, ConfigError
from ..media import CheckedImage

__all__ = ["IMAGE_TOKENS", "Vision", "image_records", "vision_of"]

IMAGE_TOKENS = ("<|image_pad|>",)  # the placeholders of the families served


@dataclass(frozen=True, slots=True)
class Vision:
    """A vision model's placeholder and its processor's resizing rule."""

    image_token: str
    image_id: int
    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    def tokens(self, width: int, height: int) -> int:
        """The ids one ``width`` x ``height`` image expands to, resized by transformers'
        ``smart_resize`` (its Pillow module: no torchvision needed)."""
        try:
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
        except ImportError:  # transformers < 5: the function lives in the processor's module
            from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
        try:
            resized: tuple[int, int] = smart_resize(
                height, width, factor=self.patch_size * self.merge_size,
                min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        except ValueError as exc:  # smart_resize's one refusal: an aspect ratio over 200
            raise BadRequest(f"an image of {width}x{height}: {exc}", param="messages") from None
        return (resized[0] // self.patch_size) * (resized[1] // self.patch_size) // (
            self.merge_size * self.merge_size)

    def positions(self, ids: Any, offset: int = 0) -> list[int]:
        """Where ``ids`` (a sequence of ints) hold the placeholder, plus ``offset``."""
        image_id = self.image_id
        return [offset + i for i, token in enumerate(ids) if token == image_id]


def image_records(vision: Vision, images: Sequence[CheckedImage],
                  positions: Sequence[int]) -> list[dict[str, Any]]:
    """What a record keeps of a prompt's images, in order (the image itself is stored
    once by its ``sha256``): with its placeholder's index in the prompt ids as sent and
    the ids it expands to, the expanded prompt follows without a processor."""
    return [{"sha256": image.sha256, "media_type": image.media_type, "width": image.width,
             "height": image.height, "position": position,
             "tokens": vision.tokens(image.width, image.height)}
            for image, position in zip(images, positions, strict=True)]


def vision_of(tokenizer: Any, template: str, folder: str | None) -> Vision | None:
    """The model's ``Vision`` when its template writes an image placeholder that is one
    token and ``folder`` holds its processor configuration; None for a text model."""
    token = next((t for t in IMAGE_TOKENS if t in template), None)
    if token is None or folder is None:
        return None
    config_path = Path(folder) / "preprocessor_config.json"
    if not config_path.is_file():
        return None
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"the image placeholder {token!r} is not a single token")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        size = config.get("size") or {}
        return Vision(token, int(ids[0]), int(config["patch_size"]), int(config["merge_size"]),
                      int(config.get("min_pixels") or size["shortest_edge"]),
                      int(config.get("max_pixels") or size["longest_edge"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{config_path}: not a Qwen2-VL image processor configuration "
                          f"(patch_size, merge_size, min/max pixels): {exc}") from None
