"""The lab's Monte Carlo: n single-position trials through `sampling.verify`, the decoder's own
verify step, batched and reproducible, in a worker thread limited to its own torch threads.

Each trial drafts x ~ q (the decoder's sampler), draws u ~ U[0, 1), and asks verify whether x is
kept; the emitted token is x when accepted, else the verdict's end token. All randomness comes
from one torch.Generator seeded with the trial's seed; no global RNG state is touched.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import torch

from ..core.sampling import Rule, sample, verify
from ..core.threads import limit_this_thread

CHUNK = 1 << 16            # rows per verify call: bounds memory to ~20 MB at V = 20 (and stays cache-friendly)


def as_tensor(x) -> torch.Tensor:
    """Probabilities (lists, numpy) as a float32 tensor, read in float64 first."""
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float32)


def checkpoints(n: int, start: int = 10) -> list[int]:
    """Sample counts at which the convergence curve is read: 1, 2, 5 per decade, and n."""
    out = []
    decade = 1
    while decade <= n:
        out += [m * decade for m in (1, 2, 5) if start <= m * decade < n]
        decade *= 10
    return sorted(set(out)) + [n]


def _in_own_thread(fn, threads: int):
    """fn() in a fresh thread limited to `threads` (see limit_this_thread); the limit dies with it."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdec-lab",
                            initializer=limit_this_thread, initargs=(threads,)) as pool:
        return pool.submit(fn).result()


def simulate_many(p, q, rule: Rule, n: int, seed: int, at: list[int] | None = None,
                  chunk: int = CHUNK, threads: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """n single-position trials for each of C cases at once, through `sampling.verify`.

    p, q: [C, V] (rows may be zero-padded to a common V). Each trial drafts x ~ q (the decoder's
    sampler), draws u ~ U[0, 1), and calls verify with p [B, 2, V] (row 1, the bonus row, is
    unused), q [B, 1, V], drafts [B, 1], u [B, 1]; the emitted token is x when accepted, else the
    end token. All randomness comes from one torch.Generator seeded with `seed`.

    Returns (counts [C, K, V] cumulative counts after each of the K sample counts in `at`
    (default [n]), accepted [C] number of accepted drafts over all n trials).

    threads: torch intra-op threads for the simulation, which then runs in a thread of its own
    (None: in the calling thread, as it is). One by default: these are small memory-bound ops,
    and on a shared 2-core CPU two threads made them 3-20x slower (measured).
    """
    work = partial(_simulate, p, q, rule, n, seed, at, chunk)
    return work() if threads is None else _in_own_thread(work, threads)


def _simulate(p, q, rule, n, seed, at, chunk):
    if n < 1:
        raise ValueError("number of samples must be >= 1")
    at = sorted(set(at or [n]))
    if at[-1] != n or at[0] < 1:
        raise ValueError("checkpoints must lie in [1, n] and end at n")
    P = as_tensor(p)
    Q = as_tensor(q)
    if P.dim() == 1:
        P, Q = P[None], Q[None]
    C, V = P.shape
    if (Q.sum(-1) <= 0).any():
        raise ValueError("q has no mass")
    gen = torch.Generator().manual_seed(int(seed))
    counts = torch.zeros(C, V, dtype=torch.int64)
    out = torch.zeros(C, len(at), V, dtype=torch.int64)
    accepted = torch.zeros(C, dtype=torch.int64)
    per = max(1, chunk // C)          # trials per case in one verify call
    done, k = 0, 0
    p_rows = P[:, None, None, :]      # [C, 1, 1, V]
    q_rows = Q[:, None, None, :]
    while done < n:
        m = min(per, n - done)
        drafts = sample(Q[:, None, :].expand(C, m, V), gen)        # x ~ q, [C, m]: the decoder's sampler
        u = torch.rand(C * m, 1, generator=gen)
        if C == 1:    # expanded views, no copy
            p_b, q_b = P[0].expand(m, 2, V), Q[0].expand(m, 1, V)
        else:
            p_b = p_rows.expand(C, m, 2, V).reshape(C * m, 2, V)
            q_b = q_rows.expand(C, m, 1, V).reshape(C * m, 1, V)
        verdict = verify(p_b, q_b, drafts.reshape(C * m, 1), u, generator=gen, rule=rule)
        acc = verdict.accepted[:, 0].reshape(C, m)
        emitted = torch.where(acc, drafts, verdict.end_token.reshape(C, m))
        accepted += acc.sum(-1)
        # Cumulative counts at every checkpoint inside this chunk, then the chunk's total.
        while k < len(at) and at[k] <= done + m:
            head = emitted[:, :at[k] - done]
            out[:, k] = counts + torch.zeros(C, V, dtype=torch.int64).scatter_add_(
                1, head, torch.ones_like(head))
            k += 1
        counts.scatter_add_(1, emitted, torch.ones_like(emitted))
        done += m
    return out.numpy(), accepted.numpy()


def simulate(p, q, rule: Rule, n: int, seed: int, threads: int | None = 1) -> np.ndarray:
    """Counts [V] of the emitted token over n trials of one position (see simulate_many)."""
    counts, _ = simulate_many(np.asarray(p)[None], np.asarray(q)[None], rule, n, seed, threads=threads)
    return counts[0, -1]


# ---------------------------------------------------------------- how fast the Monte Carlo runs

def benchmark_vocab(v: int, n: int = 1_000_000, seed: int = 0, repeats: int = 3, threads: int = 1) -> float:
    """Best-of-`repeats` seconds for n samples of the exact rule on a fixed random (p, q) of size v."""
    g = torch.Generator().manual_seed(1234 + v)
    p, q = torch.rand(v, generator=g, dtype=torch.float64), torch.rand(v, generator=g, dtype=torch.float64)
    p, q = (p / p.sum()).numpy(), (q / q.sum()).numpy()
    simulate(p, q, Rule.EXACT, 1000, seed, threads=threads)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate(p, q, Rule.EXACT, n, seed, threads=threads)
        best = min(best, time.perf_counter() - t0)
    return best
