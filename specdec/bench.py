"""Measurements printed by `python -m specdec bench`: numbers from one run, never timed tests.

- cost: one draft decode step vs one target decode step, with a KV cache (c = ratio), and one
  target forward over gamma + 1 tokens (the verify step) vs one target decode step;
- acceptance: alpha at a fixed set of prompts and seeds (the model cards quote it);
- speed: speculative vs autoregressive wall time on the same prompts, and the ratio.
"""

from __future__ import annotations

import statistics
import time

import torch

from .decoding import autoregressive_generate, speculative_generate
from .drafters import KVCache
from .sampling import SamplingConfig

PROMPTS = [
    "To be, or not to be, that is the question:",
    "KING HENRY.\nOnce more unto the breach, dear friends, once more;",
    "ROMEO.\nBut soft, what light through yonder window breaks?",
    "Now is the winter of our discontent",
    "MACBETH.\nIs this a dagger which I see before me,",
    "Friends, Romans, countrymen, lend me your ears;",
    "HAMLET.\nAlas, poor Yorick!",
    "The quality of mercy is not strain'd,",
]
SEEDS = [0, 1, 2]


@torch.no_grad()
def decode_step_ms(model, prompt_ids: list[int], steps: int = 60, width: int = 1) -> float:
    """Median milliseconds of one cached forward over `width` new tokens (after warm-up)."""
    cache = KVCache(model)
    context = list(prompt_ids)
    cache.forward(context[:-1], [])
    times = []
    for i in range(steps + 5):
        extra = [context[-1]] * (width - 1)
        t0 = time.perf_counter()
        cache.forward(context, extra)
        if torch.device(next(model.parameters()).device).type == "cuda":
            torch.cuda.synchronize()
        if i >= 5:
            times.append((time.perf_counter() - t0) * 1000)
        context = context + [context[-1]]
        cache.forward(context[:-1], [])   # keep the cache one token behind, as in decoding
    return statistics.median(times)


def cost(pair, gamma: int = 4) -> dict:
    ids = pair.encode(PROMPTS[0])[1]
    draft = decode_step_ms(pair.draft, ids)
    target = decode_step_ms(pair.target, ids)
    verify = decode_step_ms(pair.target, ids, width=gamma + 1)
    return {"draft_step_ms": draft, "target_step_ms": target, "c": draft / target,
            "verify_ms": verify, "verify_over_step": verify / target, "gamma": gamma}


def acceptance(pair, gamma: int = 4, max_new_tokens: int = 64, temperature: float = 1.0) -> dict:
    """Pooled alpha (accepted / tested) over PROMPTS x SEEDS at temperature 1."""
    accepted = tested = 0
    tpf = []
    for prompt in PROMPTS:
        for seed in SEEDS:
            g = speculative_generate(pair, prompt, gamma=gamma, max_new_tokens=max_new_tokens,
                                     sampling=SamplingConfig(temperature=temperature), seed=seed)
            accepted += g.stats.accepted
            tested += g.stats.tested
            tpf.append(g.stats.tokens_per_target_forward)
    return {"alpha": accepted / tested, "tested": tested, "runs": len(PROMPTS) * len(SEEDS),
            "tokens_per_target_forward": statistics.mean(tpf), "gamma": gamma, "temperature": temperature}


def speed(pair, gamma: int = 4, max_new_tokens: int = 64, drafter: str = "model") -> dict:
    """Wall time of speculative vs autoregressive decoding, same prompts and seeds, interleaved."""
    spec = ar = 0.0
    tokens_spec = tokens_ar = 0
    sampling = SamplingConfig(temperature=1.0)
    speculative_generate(pair, PROMPTS[0], gamma=gamma, max_new_tokens=8)   # warm-up
    for prompt in PROMPTS:
        for seed in SEEDS[:2]:
            g = speculative_generate(pair, prompt, gamma=gamma, max_new_tokens=max_new_tokens,
                                     sampling=sampling, seed=seed, drafter=drafter)
            a = autoregressive_generate(pair, prompt, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)
            spec += g.stats.wall_seconds
            ar += a.stats.wall_seconds
            tokens_spec += g.stats.new_tokens
            tokens_ar += a.stats.new_tokens
    return {"speculative_tok_s": tokens_spec / spec, "autoregressive_tok_s": tokens_ar / ar,
            "speedup": (tokens_spec / spec) / (tokens_ar / ar), "drafter": drafter, "gamma": gamma}


def report(pair, gamma: int = 4, threads: int | None = None) -> str:
    if threads:
        torch.set_num_threads(threads)
    lines = [f"pair: {pair.label}  device: {pair.device}  torch threads: {torch.get_num_threads()}"]
    c = cost(pair, gamma)
    lines.append(f"cost   draft step {c['draft_step_ms']:.2f} ms, target step {c['target_step_ms']:.2f} ms, "
                 f"c = draft/target = {c['c']:.3f}; verify of {gamma + 1} tokens = "
                 f"{c['verify_over_step']:.2f} x one target step")
    a = acceptance(pair, gamma)
    lines.append(f"accept alpha = {a['alpha']:.3f} (T=1, gamma={gamma}, {a['runs']} runs, {a['tested']} drafts tested), "
                 f"tokens per target forward {a['tokens_per_target_forward']:.2f}")
    for drafter in ("model", "ngram"):
        s = speed(pair, gamma, drafter=drafter)
        lines.append(f"speed  [{drafter}] speculative {s['speculative_tok_s']:.0f} tok/s vs autoregressive "
                     f"{s['autoregressive_tok_s']:.0f} tok/s: speedup x{s['speedup']:.2f}")
    return "\n".join(lines)
