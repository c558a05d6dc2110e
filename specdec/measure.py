"""Measure a model pair: what its forwards cost and how often its draft is accepted.

Library functions (no app, no bench): the bench times its contenders against these costs, and
the bundled pair's model cards (`specdec.training.cards`) quote them.

- `CostMeter` times one cached forward of the draft over 1 token and of the target over each of
  several widths (width 1 = one decode step; gamma + 1 = one verify), one step at a time;
- `cost(pair, gamma)`: c = one draft step / one target step, and a verify in target steps;
- `acceptance(pair, gamma)`: the pooled acceptance rate alpha over PROMPTS x SEEDS.
"""

from __future__ import annotations

import statistics
import time

import torch

from .decoding import autoregressive_generate, speculative_generate
from .drafters import KVCache
from .sampling import SamplingConfig
from .settings import RunSettings

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
SEEDS = [0, 1, 2]   # acceptance() and the model cards

COST_WARMUP = 3   # untimed steps first: the first one fills the caches with the prompt


class CostMeter:
    """Times one cached forward of the draft over 1 token (when the pair has a draft model) and of the
    target over each of `widths` tokens (width 1 = one decode step; gamma + 1 = one verify), one
    `step` at a time.

    A step times every item once, then the context grows by one token, so drift on a shared
    machine hits all widths alike; the bench spreads its steps between the passes so the costs
    see the same machine as the runs. Like the decoder, each forward first crops the tokens the
    previous one fed beyond the context (the rejected drafts), then feeds `width` tokens.
    """

    def __init__(self, pair, prompt_ids: list[int], widths: list[int]):
        self.pair, self.widths = pair, list(widths)
        drafts = [("draft", pair.draft, 1)] if pair.draft is not None else []
        self.items = drafts + [(w, pair.target, w) for w in widths]
        self.caches = {key: KVCache(model) for key, model, _ in self.items}
        self.times: dict = {key: [] for key, _, _ in self.items}
        self.context = list(prompt_ids)
        self.first_context = len(prompt_ids)

    @torch.inference_mode()
    def step(self, timed: bool = True) -> None:
        for key, _, width in self.items:
            extra = [self.context[-1]] * (width - 1)
            start = time.perf_counter()
            self.caches[key].forward(self.context, extra)
            if torch.device(self.pair.device).type == "cuda":
                torch.cuda.synchronize()
            if timed:
                self.times[key].append((time.perf_counter() - start) * 1000)
        self.context.append(self.context[-1])

    def result(self) -> dict:
        """Median milliseconds per item, and c = draft step / target step (both None without a draft model)."""
        target_ms = {w: statistics.median(self.times[w]) for w in self.widths}
        draft_ms = statistics.median(self.times["draft"]) if "draft" in self.times else None
        step_ms = target_ms.get(1)
        return {"draft_step_ms": draft_ms, "target_ms_by_width": target_ms, "target_step_ms": step_ms,
                "c": draft_ms / step_ms if step_ms and draft_ms is not None else None,
                "steps": len(self.times[self.widths[0]]),
                "context_tokens": [self.first_context, len(self.context)]}


def measure_costs(pair, prompt_ids: list[int], widths: list[int], steps: int = 40,
                  warmup: int = COST_WARMUP) -> dict:
    """All the steps of a `CostMeter` in one go (the model cards' measurement)."""
    meter = CostMeter(pair, prompt_ids, widths)
    for i in range(warmup + steps):
        meter.step(timed=i >= warmup)
    return meter.result()


def cost(pair, gamma: int = 4) -> dict:
    """c = one draft decode step / one target decode step (KV cache), and one verify forward over
    gamma + 1 tokens in target steps (the model cards quote these)."""
    ids = pair.encode(PROMPTS[0])[1]
    m = measure_costs(pair, ids, [1, gamma + 1], steps=60)
    verify = m["target_ms_by_width"][gamma + 1]
    return {"draft_step_ms": m["draft_step_ms"], "target_step_ms": m["target_step_ms"], "c": m["c"],
            "verify_ms": verify, "verify_over_step": verify / m["target_step_ms"], "gamma": gamma}


def acceptance_grid(pair, gammas=range(1, 9), temperatures=(0.0, 0.7, 1.0), max_new_tokens: int = 64) -> list[dict]:
    """Pooled alpha over PROMPTS x SEEDS for every gamma and temperature (the draft's model card)."""
    return [acceptance(pair, g, max_new_tokens, t) for t in temperatures for g in gammas]


def acceptance(pair, gamma: int = 4, max_new_tokens: int = 64, temperature: float = 1.0) -> dict:
    """Pooled alpha (accepted / tested) over PROMPTS x SEEDS with the draft model."""
    settings = RunSettings(gamma=gamma, max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temperature))
    accepted = tested = 0
    tpf = []
    for prompt in PROMPTS:
        for seed in SEEDS:
            g = speculative_generate(pair, prompt, settings.with_(seed=seed))
            accepted += g.stats.accepted
            tested += g.stats.tested
            tpf.append(g.stats.tokens_per_target_forward)
    return {"alpha": accepted / tested if tested else 0.0, "tested": tested, "runs": len(PROMPTS) * len(SEEDS),
            "tokens_per_target_forward": statistics.mean(tpf), "gamma": gamma, "temperature": temperature}



# ---------------------------------------------------------------- a fair comparison

def compare_with_target(pair, prompt, settings: RunSettings, stop=None, warmup_tokens: int = 8):
    """(speculative run, target-alone run) of one prompt and settings, timed fairly.

    Both contenders are warmed up first (a few tokens each: a GPU's first forwards pay for CUDA
    and cuBLAS start-up, graphs are captured), then run in the order A B B A; each run's wall
    time is the mean of its two (the same seed gives the same tokens, so the two runs of a
    contender do the same work). Every timing in the decoders waits for the device (`_sync`, or
    the engine's one read a round). The returned generations are the second runs, with their
    wall, drafting and verify times set to the means (`mean_timings`).
    """
    short = settings.with_(max_new_tokens=min(warmup_tokens, settings.max_new_tokens))
    speculative_generate(pair, prompt, short, stop=stop)
    autoregressive_generate(pair, prompt, short, stop=stop)
    spec_a = speculative_generate(pair, prompt, settings, stop=stop)
    ar_a = autoregressive_generate(pair, prompt, settings, stop=stop)
    ar_b = autoregressive_generate(pair, prompt, settings, stop=stop)
    spec_b = speculative_generate(pair, prompt, settings, stop=stop)
    mean_timings(spec_a.stats, spec_b.stats)
    mean_timings(ar_a.stats, ar_b.stats)
    return spec_b, ar_b


TIMINGS = ("wall_seconds", "draft_seconds", "verify_seconds")


def mean_timings(first, second) -> None:
    """Set `second`'s wall, drafting and verify times to the means of both runs' (in place).

    All three, not the wall alone: the page splits the wall time into drafting, verifying and
    everything else, and a wall time from two runs beside parts from one of them can leave the
    parts larger than the whole (a target step longer than the target alone's time per token)."""
    for name in TIMINGS:
        setattr(second, name, (getattr(first, name) + getattr(second, name)) / 2)
