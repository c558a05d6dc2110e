"""Measure a model pair: what its forwards cost and how often its draft is accepted.

Library functions (no app, no bench): the bench times its contenders against these costs, and
the bundled pair's model cards (`specdec.training.bundled.cards`) quote them.

- `CostMeter` times one cached forward of the draft over 1 token and of the target over each of
  several widths (width 1 = one decode step; gamma + 1 = one verify), one step at a time;
- `cost(pair, gamma)`: c = one draft step / one target step, and a verify in target steps;
- `acceptance(pair, gamma)`: the pooled acceptance rate alpha over PROMPTS x SEEDS.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..core.sampling import SamplingConfig
from ..core.settings import RunSettings
from ..core.threads import run_threads, threads_for_model
from ..decoding.loop import autoregressive_generate, speculative_generate
from ..drafting.drafters import KVCache
from .speed import speedup

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

# Chat questions a visitor might type (a chat model's prompts; none is among its drafter's training
# topics' wording): asked under the model's chat template.
CHAT_PROMPTS = ("What is the capital of France?", "How do I make a good cup of tea?", "Explain why the sky is blue.",
                "Give me three tips for staying focused while studying.", "What are the benefits of regular exercise?",
                "Write a short poem about autumn.", "How does a refrigerator keep food cold?",
                "What should I pack for a weekend hiking trip?")


def prompts_for(pair) -> list[str]:
    """The prompts a pair is measured on: chat questions for a chat model, the bundled pair's
    Shakespeare openings otherwise."""
    return list(CHAT_PROMPTS if pair.has_chat_template else PROMPTS)

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

@dataclass(frozen=True)
class Repeats:
    """A run and the target alone timed `len(speedups)` times, interleaved: the last run of each,
    with its wall, drafting and verify times set to the means over the repeats (so the speedup of
    `spec` over `ar` is the repeats' pooled ratio), and each repeat's own speedup, the spread."""

    spec: object   # trace.Generation
    ar: object
    speedups: tuple[float, ...]

    @property
    def spread(self) -> tuple[float, float]:
        """(lowest, highest) of the repeats' speedups: the pooled speedup lies between them (it is
        their average weighted by the run's wall times)."""
        return min(self.speedups), max(self.speedups)


def timed_repeats(pair, prompt, settings: RunSettings, repeats: int = 3, stop=None,
                  warmup_tokens: int = 8, on_repeat=None) -> Repeats:
    """The run and the target alone, each timed `repeats` times, interleaved as the bench does.

    Both contenders are warmed up first (a few tokens each: a GPU's first forwards pay for CUDA
    and cuBLAS start-up, graphs are captured); then each repeat runs both, in alternating order
    (A B, B A, A B, ...), so drift on a shared machine falls on both sides alike. The same seed
    gives the same tokens, so every run of a contender does the same work. One pair of runs is
    noise: the same settings gave 1.19x and then 1.05x on this machine; the repeats'
    speedups say how far apart runs fall. Every timing waits for the device. `on_repeat(k)`, if
    given, is called as the k-th repeat ends (a page shows the comparison's progress).
    """
    if repeats < 2:
        raise ValueError(f"repeats must be at least 2 (one pair of runs has no spread), got {repeats}")
    with run_threads(threads_for_model(pair.target)):   # one thread count for every run of the comparison
        return _timed_repeats(pair, prompt, settings, repeats, stop, warmup_tokens, on_repeat or (lambda _k: None))


def _timed_repeats(pair, prompt, settings: RunSettings, repeats: int, stop, warmup_tokens: int,
                   on_repeat) -> Repeats:
    short = settings.with_(max_new_tokens=min(warmup_tokens, settings.max_new_tokens))
    speculative_generate(pair, prompt, short, stop=stop)
    autoregressive_generate(pair, prompt, short, stop=stop)
    specs, ars = [], []
    for i in range(repeats):
        if i % 2 == 0:
            specs.append(speculative_generate(pair, prompt, settings, stop=stop))
            ars.append(autoregressive_generate(pair, prompt, settings, stop=stop))
        else:
            ars.append(autoregressive_generate(pair, prompt, settings, stop=stop))
            specs.append(speculative_generate(pair, prompt, settings, stop=stop))
        on_repeat(i + 1)
    speedups = tuple(speedup(s.stats, a.stats) for s, a in zip(specs, ars))
    mean_timings(*(g.stats for g in specs))
    mean_timings(*(g.stats for g in ars))
    return Repeats(specs[-1], ars[-1], speedups)


def comparison_seconds(run, target_step_ms: float | None, repeats: int, warmup_tokens: int = 8) -> float:
    """About how long `timed_repeats` takes for a run whose stats (`run`) are known: each repeat runs
    it again (about its own wall time) and the target alone (its tokens times one target step),
    after a warm-up of `warmup_tokens` of each. Without a measured step, one of the run's verifies
    stands in for it (a forward a few tokens wide: a little longer, so the estimate errs long)."""
    n = max(run.new_tokens, 1)
    one = run.wall_seconds + n * step_or_verify_ms(run, target_step_ms) / 1000
    return one * (repeats + min(warmup_tokens, n) / n)


def step_or_verify_ms(run, target_step_ms: float | None) -> float:
    """`target_step_ms`, or where it is not known, the mean verify of the run whose stats are `run`."""
    return target_step_ms or 1000 * run.verify_seconds / max(run.target_forwards, 1)


def compare_with_target(pair, prompt, settings: RunSettings, stop=None, warmup_tokens: int = 8):
    """(speculative run, target-alone run) of one prompt and settings, timed fairly: two repeats of
    `timed_repeats` (warmed up, then A B B A), each run's times the mean of its two."""
    r = timed_repeats(pair, prompt, settings, repeats=2, stop=stop, warmup_tokens=warmup_tokens)
    return r.spec, r.ar


TIMINGS = ("wall_seconds", "draft_seconds", "verify_seconds")


def mean_timings(*runs) -> None:
    """Set the last run's wall, drafting and verify times to the means of all the runs' (in place).

    All three, not the wall alone: the page splits the wall time into drafting, verifying and
    everything else, and a wall time from two runs beside parts from one of them can leave the
    parts larger than the whole (a target step longer than the target alone's time per token)."""
    for name in TIMINGS:
        setattr(runs[-1], name, statistics.fmean(getattr(r, name) for r in runs))
