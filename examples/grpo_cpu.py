"""A reproducible GRPO run on a laptop: rollouts through seedproxy, a plain-torch update,
the weights synced back with ``POST /fleet/update_weights``, step after step.

    python examples/grpo_cpu.py --steps 3 --out runs/a
    python examples/grpo_cpu.py --steps 3 --out runs/b --async

- The model: a tiny random-weight Llama (2 layers, hidden 64, SmolLM2's tokenizer) made
  from a config under a fixed torch seed, saved as a Hugging Face folder (``DIR/step-0``).
- The task: "a+b=" prompts, the answer checked against the sum: 1.0 when the completion
  (leading spaces stripped) starts with it. A random model never gets there, so the
  reward gives partial credit that varies between samples: per character of the sum,
  ``max(0, 1 - |code point got - code point wanted| / 64)`` (a missing one scores 0),
  averaged. It pulls the model's characters toward digits.
- The rollouts: one group of ``--group`` sessions per prompt through ``seedproxy.client``
  (identity ``s{step}p{prompt}``, samples ``:0 .. :k-1``), exported ``concat`` with token
  ids, loss mask, behaviour logprobs and per-token weight versions
  (``DIR/rollouts/step-N.jsonl``).
- The update: GRPO (group-normalised advantages, a clipped ratio against the recorded
  logprobs), deterministic (seeded, deterministic algorithms, one thread); the weights go
  to ``DIR/step-N`` (safetensors) and the fleet loads them as version ``step-N``.
- ``--async``: the rollouts of step t+1 run in a thread while step t trains, on the
  weights served when step t began (one version stale when they are trained on). The
  sync waits for them to finish, so the overlap is fixed by order, not timing. The
  trainer reads each token's version from the export and drops tokens staler than
  ``--max-staleness``; the clipped ratio against their behaviour logprobs is the
  importance weight of the rest.

Each step prints its reward, sampled tokens, seconds (its rollouts included), the
largest difference between the recorded behaviour logprobs and the trainer's own forward
pass on the weights that sampled them, and which version sampled its batch; the probe
sampled after each sync with the same seed goes to ``DIR/probes.jsonl``. The last line
is ``weights sha256 <hex>``: the hash of the final state dict (names sorted, each
name, dtype, shape and bytes).

Without ``--url`` it starts its own proxy and embedded engine (``seedproxy serve --port 0
--model DIR/step-0``). With ``--url`` the fleet must serve this architecture (e.g. a proxy
started with ``--model`` on a ``step-0`` folder this script wrote): step 0 is loaded
there first.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import random
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from seedproxy.client import SeedProxyClient, Trajectory, write_jsonl
from seedproxy.engine.testing import tiny_hf_model, tiny_tokenizer

PROBE = "7+5="
"""Sampled after every sync with the same identity, so the same seeds: only the weights
differ between probes."""


@dataclass(frozen=True)
class Options:
    steps: int
    out: Path
    group: int
    prompts: int
    max_tokens: int
    seed: int
    lr: float
    clip: float
    epochs: int
    max_staleness: int
    async_: bool


def tasks(step: int, prompts: int, seed: int) -> list[tuple[str, str]]:
    """The step's prompts and answers (the same for the same arguments)."""
    pick = random.Random(f"{seed}:{step}")
    out = []
    for _ in range(prompts):
        a, b = pick.randrange(50), pick.randrange(50)
        out.append((f"{a}+{b}=", str(a + b)))
    return out


def reward(text: str, answer: str) -> float:
    """Partial credit (see the module docstring); 1.0 for the exact sum."""
    got = text.lstrip()[: len(answer)]
    if got == answer:
        return 1.0
    close = sum(max(0.0, 1 - abs(ord(a) - ord(b)) / 64)
                for a, b in zip(got, answer, strict=False))
    return round(close / len(answer), 6)


def weights_sha256(model: torch.nn.Module) -> str:
    """The hash of the state dict: names sorted, then name, dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def version_number(version: str | None) -> int:
    """``step-N`` -> N (a token with no version counts as infinitely stale)."""
    match = re.fullmatch(r"step-(\d+)", version or "")
    return int(match.group(1)) if match else -(10**9)


# --- the proxy ---------------------------------------------------------------------

@contextmanager
def own_proxy(model_dir: Path, log_path: Path) -> Any:
    """``seedproxy serve`` on a free port with the embedded engine on ``model_dir``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "seedproxy", "serve", "--host", "127.0.0.1", "--port", "0",
         "--model", str(model_dir)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    url = None
    log = open(log_path, "wb")  # noqa: SIM115  (closed below, after the drain thread)
    for line in proc.stderr:
        log.write(line)
        found = re.search(rb"seedproxy listening on (http://\S+)", line)
        if found:
            url = found.group(1).decode()
            break
    if url is None:
        log.close()
        raise SystemExit(f"seedproxy serve exited ({proc.wait()}); see {log_path}")
    drain = threading.Thread(target=lambda: [log.write(x) for x in proc.stderr or ()],
                             daemon=True)
    drain.start()
    try:
        # readiness: the engine answers through the proxy (a bound for a hang, generous
        # for a loaded machine)
        deadline = time.monotonic() + 900
        while httpx.get(f"{url}/readyz", timeout=60).status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} was not ready within 900 s; see {log_path}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        drain.join(timeout=10)
        log.close()


# --- rollouts ------------------------------------------------------------------------

async def rollout(url: str, step: int, opts: Options) -> list[Trajectory]:
    """One group per prompt, all at once; trajectories in creation order."""
    async with SeedProxyClient(url) as proxy:

        async def one_group(index: int, prompt: str, answer: str) -> list[Trajectory]:
            group = await proxy.create_group(f"s{step}p{index}", k=opts.group,
                                             metadata={"prompt": prompt, "answer": answer})

            async def agent(sample: Any) -> str:
                async with sample.async_openai(max_retries=0) as client:
                    done = await client.completions.create(
                        model="default", prompt=prompt, max_tokens=opts.max_tokens,
                        temperature=1.0)
                return str(done.choices[0].text)

            await group.run(agent, concurrency=opts.group,
                            reward=lambda text: reward(text, answer), end=True)
            return list(await group.export(style="concat"))

        groups = await asyncio.gather(*(one_group(i, p, a) for i, (p, a) in
                                        enumerate(tasks(step, opts.prompts, opts.seed))))
    return [t for g in groups for t in g]


async def probe(url: str, max_tokens: int) -> dict[str, Any]:
    async with SeedProxyClient(url) as proxy:
        group = await proxy.create_group("probe")
        sample = group.samples[0]
        async with sample.async_openai(max_retries=0) as client:
            await client.completions.create(model="default", prompt=PROBE,
                                            max_tokens=max_tokens, temperature=1.0)
        await group.end()
        (trajectory,) = await group.export(style="concat")
        (asked,) = (await proxy.trajectory(sample.session_id)).interactions
    ids, mask = trajectory.token_ids or [], trajectory.loss_mask or []
    return {"session_id": trajectory.session_id, "seed": asked.seed,
            "tokens": [t for t, m in zip(ids, mask, strict=True) if m],
            "versions": sorted({v for v in trajectory.token_versions() if v is not None})}


async def sync(url: str, folder: Path, version: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:
        done = await http.post("/fleet/update_weights",
                               json={"model_path": str(folder.resolve()), "version": version})
    if done.status_code != 200:
        raise SystemExit(f"weight sync to {version} failed: {done.status_code} {done.text}")


# --- training ------------------------------------------------------------------------

def token_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """``out[j]``: log p(ids[j] | ids[:j]) for j >= 1 (``out[0]`` is 0)."""
    logits = model(torch.tensor([ids])).logits[0].float()
    picked = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])
    return torch.cat([torch.zeros(1), picked[:, 0]])


def advantages(batch: list[Trajectory], k: int) -> list[float]:
    """Rewards normalised within each group of k (mean 0; all equal: 0)."""
    out: list[float] = []
    for start in range(0, len(batch), k):
        r = torch.tensor([t.reward or 0.0 for t in batch[start:start + k]], dtype=torch.float64)
        std = r.std(unbiased=False)
        out += ((r - r.mean()) / (std + 1e-6) if std > 0 else r * 0).tolist()
    return out


def logprob_gap(model: torch.nn.Module, batch: list[Trajectory]) -> float:
    """The largest |recorded - recomputed| behaviour logprob over sampled tokens, with
    ``model`` holding the weights that sampled them."""
    gap = 0.0
    with torch.no_grad():
        for t in batch:
            mine = token_logprobs(model, t.token_ids or [])
            for j, m in enumerate(t.loss_mask or []):
                if m:
                    gap = max(gap, abs(float(mine[j]) - float((t.logprobs or [])[j])))
    return gap


def grpo_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              batch: list[Trajectory], trainer_version: int, opts: Options) -> int:
    """``opts.epochs`` clipped-ratio updates on ``batch``; returns the tokens dropped as
    staler than ``opts.max_staleness`` versions."""
    adv = advantages(batch, opts.group)
    keep: list[list[int]] = []
    dropped = 0
    for t in batch:
        versions = t.token_versions()
        sampled = [j for j, m in enumerate(t.loss_mask or []) if m]
        fresh = [j for j in sampled
                 if trainer_version - version_number(versions[j]) <= opts.max_staleness]
        dropped += len(sampled) - len(fresh)
        keep.append(fresh)
    total = sum(len(k) for k in keep)
    if total == 0:
        return dropped
    for _ in range(opts.epochs):
        optimizer.zero_grad()
        loss = torch.zeros(())
        for t, a, positions in zip(batch, adv, keep, strict=True):
            if not positions:
                continue
            index = torch.tensor(positions)
            new = token_logprobs(model, t.token_ids or [])[index]
            old = torch.tensor(t.logprobs or [])[index]
            ratio = torch.exp(new - old)
            clipped = torch.clamp(ratio, 1 - opts.clip, 1 + opts.clip)
            loss = loss - torch.minimum(ratio * a, clipped * a).sum() / total
        loss.backward()
        optimizer.step()
    return dropped


def save(model: Any, tokenizer: Any, folder: Path) -> None:
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


# --- the loop ------------------------------------------------------------------------

def run(opts: Options, url: str | None) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(opts.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "rollouts").mkdir(exist_ok=True)
    tok = tiny_tokenizer()
    model = tiny_hf_model("llama", opts.seed, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    model.train()
    sampler = copy.deepcopy(model).eval()
    """Loaded with the weights that sampled a batch, to check its recorded logprobs."""
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    save(model, tok, opts.out / "step-0")
    served = {0: {k: v.clone() for k, v in model.state_dict().items()}}
    if url is None:
        with own_proxy(opts.out / "step-0", opts.out / "proxy.log") as own:
            loop(opts, own, model, sampler, optimizer, tok, served)
    else:
        loop(opts, url, model, sampler, optimizer, tok, served)
    print(f"weights sha256 {weights_sha256(model)}", flush=True)


def roll_into(into: list[list[Trajectory]], url: str, step: int, opts: Options) -> None:
    into.append(asyncio.run(rollout(url, step, opts)))


def loop(opts: Options, url: str, model: Any, sampler: Any, optimizer: torch.optim.Optimizer,
         tok: Any, served: dict[int, dict[str, torch.Tensor]]) -> None:
    asyncio.run(sync(url, opts.out / "step-0", "step-0"))
    probes = opts.out / "probes.jsonl"
    with open(probes, "w") as handle:
        handle.write(json.dumps({"after_step": 0, **asyncio.run(probe(url, opts.max_tokens))})
                     + "\n")
    mark = time.perf_counter()  # a step's seconds: from the last line to its own
    batch = asyncio.run(rollout(url, 0, opts))
    batch_version = 0
    for step in range(opts.steps):
        write_jsonl(batch, opts.out / "rollouts" / f"step-{step}.jsonl")
        ahead: list[list[Trajectory]] = []
        worker = None
        if opts.async_ and step + 1 < opts.steps:  # step t+1's rollouts, on today's weights
            worker = threading.Thread(target=roll_into, args=(ahead, url, step + 1, opts))
            worker.start()
        sampler.load_state_dict(served[batch_version])
        gap = logprob_gap(sampler, batch)
        dropped = grpo_step(model, optimizer, batch, step, opts)
        folder = opts.out / f"step-{step + 1}"
        save(model, tok, folder)
        if worker is not None:
            worker.join()  # the sync waits for the rollouts on the old weights
        served[step + 1] = {k: v.clone() for k, v in model.state_dict().items()}
        served.pop(step - 1, None)
        asyncio.run(sync(url, folder, f"step-{step + 1}"))
        seen = asyncio.run(probe(url, opts.max_tokens))
        with open(probes, "a") as handle:
            handle.write(json.dumps({"after_step": step + 1, **seen}) + "\n")
        rewards = [t.reward or 0.0 for t in batch]
        tokens = sum(sum(t.loss_mask or []) for t in batch)
        line = (f"step {step} reward {sum(rewards) / len(rewards):.4f} tokens {tokens} "
                f"seconds {time.perf_counter() - mark:.2f} "
                f"logprob_max_abs_diff {gap:.3g} sampled_on step-{batch_version} "
                f"dropped {dropped}")
        print(line, flush=True)
        mark = time.perf_counter()
        if step + 1 < opts.steps:
            if worker is not None:
                batch, batch_version = ahead[0], step
            else:
                batch, batch_version = asyncio.run(rollout(url, step + 1, opts)), step + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="the run's folder")
    parser.add_argument("--url", help="a running proxy (default: start one)")
    parser.add_argument("--async", dest="async_", action="store_true",
                        help="roll out step t+1 while step t trains (one step stale)")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt (k)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--clip", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=2, help="updates per batch")
    parser.add_argument("--max-staleness", type=int, default=1,
                        help="drop tokens sampled more than this many versions ago")
    args = parser.parse_args()
    if args.steps < 1 or args.group < 2 or args.prompts < 1 or args.max_tokens < 1:
        parser.error("--steps, --prompts and --max-tokens must be >= 1, --group >= 2")
    opts = Options(args.steps, args.out, args.group, args.prompts, args.max_tokens, args.seed,
                   args.lr, args.clip, args.epochs, args.max_staleness, args.async_)
    run(opts, args.url)


if __name__ == "__main__":
    main()
