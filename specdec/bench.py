"""`python -m specdec bench`: speculative decoding against the target alone, and against
`transformers`' own assisted generation, measured in one process. Numbers from one run, never timed tests.

Every contender decodes the same prompts with the same seeds and settings, interleaved (each
pass over a prompt and seed runs every contender once, in a rotating order), after one warm-up
run each:

- the target alone: specdec's autoregressive loop and `transformers` `generate`;
- specdec speculative decoding with the draft model and with the n-gram drafter, gamma = 1..8;
- `transformers` assisted generation with the same draft and gamma, and its prompt lookup;

at T = 0 (greedy: every contender must produce the same tokens) and T = 1. Forward passes are
counted by hooks on the two models, the same way for every contender. The costs behind the
predictions (one cached draft step, one cached target step, one target forward over k tokens)
are timed in steps spread between the passes, so they see the same machine as the runs.

Measured speedup = a contender's tokens/s / the faster target-alone loop's tokens/s, at the same T.
Predicted speedups: Leviathan et al.'s closed form from alpha, gamma and c, and the one from the
measured costs and the counted forwards (what the run would give with zero overhead outside forwards).

Also kept for the model cards (`cards.py`): `cost(pair, gamma)` and `acceptance(pair, gamma)`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import textwrap
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from . import limits
from .checks import whole_number
from .decoding import autoregressive_generate, speculative_generate
from .drafters import KVCache, NgramDrafter
from .sampling import SamplingConfig
from .speed import leviathan_speedup, predicted_speedup

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

SCHEMA = "specdec.bench"
SCHEMA_VERSION = 1

# Settings: the default run fits in 10 minutes on a 2-core CPU; --quick is a seconds-long smoke run.
DEFAULTS = dict(gammas="1-8", temperatures="0,1", max_new_tokens=64, prompts=8, seeds=2, repeats=1,
                cost_steps=40, out="runs/bench")
QUICK = dict(gammas="1,3", temperatures="0,1", max_new_tokens=12, prompts=1, seeds=1, repeats=1,
             cost_steps=5)

DESCRIPTION = ("Speculative decoding against the target alone and against transformers' assisted generation: "
               "same prompts, seeds and settings, interleaved in one process; prints a table, writes JSON and a chart.")

# The goals, checked (not asserted) in the summary.
GOALS = {"speedup_t1": 1.6, "speedup_t0": 1.4, "specdec_over_assisted": 0.8, "measured_over_predicted": 0.9}


# ---------------------------------------------------------------- formulas (pure)
# leviathan_speedup and predicted_speedup live in specdec.speed (the app uses them too).


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile); a single value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def parse_gammas(text: str) -> list[int]:
    """'1-8', '1,2,4' or '4' -> sorted distinct gammas; ValueError with a one-line message."""
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-"))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"--gammas takes whole numbers like '1-8' or '1,2,4', got {text!r}") from None
    for g in (min(out), max(out)):
        whole_number(g, "gamma (drafts per round)", 1, limits.MAX_GAMMA)
    return sorted(out)


def parse_temperatures(text: str) -> list[float]:
    """'0,1' -> [0.0, 1.0], each checked like a run's temperature."""
    try:
        temps = [float(x) for x in str(text).replace(" ", "").split(",")]
    except ValueError:
        raise ValueError(f"--temperatures takes numbers like '0,1', got {text!r}") from None
    for t in temps:
        SamplingConfig(temperature=t).validate()
    return sorted(set(temps))


# ---------------------------------------------------------------- contenders

@dataclass(frozen=True)
class Kind:
    label: str
    family: str                 # specdec | transformers
    drafter: str | None         # model | ngram | None (the target alone)
    counterpart: str | None     # the transformers kind a specdec kind is compared with


SPECDEC_AR, HF_GENERATE = "specdec_ar", "hf_generate"
SPECDEC_MODEL, SPECDEC_NGRAM = "specdec_model", "specdec_ngram"
HF_ASSISTED, HF_LOOKUP = "hf_assisted", "hf_lookup"
KINDS = {
    SPECDEC_AR: Kind("specdec autoregressive", "specdec", None, HF_GENERATE),
    HF_GENERATE: Kind("transformers generate", "transformers", None, None),
    SPECDEC_MODEL: Kind("specdec + draft model", "specdec", "model", HF_ASSISTED),
    SPECDEC_NGRAM: Kind("specdec + n-gram", "specdec", "ngram", HF_LOOKUP),
    HF_ASSISTED: Kind("transformers assisted", "transformers", "model", None),
    HF_LOOKUP: Kind("transformers prompt lookup", "transformers", "ngram", None),
}
BASELINES = (SPECDEC_AR, HF_GENERATE)
SPECULATIVE = (SPECDEC_MODEL, SPECDEC_NGRAM, HF_ASSISTED, HF_LOOKUP)


@dataclass(frozen=True)
class Contender:
    kind: str
    temperature: float
    gamma: int | None = None    # None for the target alone

    @property
    def label(self) -> str:
        return KINDS[self.kind].label


def contenders(gammas: list[int], temperatures: list[float]) -> list[Contender]:
    """Every contender, in table order: per T, the two baselines then each speculative kind over gamma."""
    out = []
    for t in temperatures:
        out += [Contender(k, t) for k in BASELINES]
        out += [Contender(k, t, g) for k in SPECULATIVE for g in gammas]
    return out


def rotated(items: list, pass_index: int, passes: int) -> list:
    """The pass's running order: the list rotated so each contender starts from a different place
    over the passes (slow drift on a shared machine then spreads over all contenders)."""
    shift = (pass_index * len(items)) // max(passes, 1) % max(len(items), 1)
    return items[shift:] + items[:shift]


# transformers' defaults would draft up to 20 tokens and stop early below 0.4 confidence.
ASSISTANT_SETTINGS = dict(num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)


def transformers_kwargs(kind: str, temperature: float, gamma: int | None, max_new_tokens: int,
                        eos_token_id: int | None, ngram: int) -> dict:
    """`generate()` keywords that make transformers decode exactly like specdec's settings."""
    kw = dict(max_new_tokens=max_new_tokens, do_sample=temperature > 0,
              eos_token_id=eos_token_id, pad_token_id=eos_token_id)
    if temperature > 0:
        # generate() applies top-k 50 unless told otherwise; specdec samples from the whole of p.
        kw.update(temperature=temperature, top_k=0, top_p=1.0)
    if kind == HF_ASSISTED:
        kw.update(ASSISTANT_SETTINGS, num_assistant_tokens=gamma)
    if kind == HF_LOOKUP:
        kw.update(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=ngram)
    return kw


@contextmanager
def assistant_settings(draft, gamma: int):
    """transformers 5.23 reads the assistant's settings from the assistant's own generation_config
    (the same names passed to generate() do not reach it): set them there for one call."""
    config = draft.generation_config
    wanted = dict(ASSISTANT_SETTINGS, num_assistant_tokens=gamma)
    saved = {k: getattr(config, k, None) for k in wanted}
    for k, v in wanted.items():
        setattr(config, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(config, k, v)


class ForwardCounter:
    """Counts the forward passes of the target and the draft with pre-forward hooks, and the
    width (tokens fed) of each target forward: the same count for specdec and transformers."""

    def __init__(self, pair):
        self.target_widths: list[int] = []
        self.draft_forwards = 0
        self._handles = [pair.target.register_forward_pre_hook(self._on_target, with_kwargs=True),
                         pair.draft.register_forward_pre_hook(self._on_draft, with_kwargs=True)]

    def _on_target(self, module, args, kwargs):
        ids = args[0] if args else kwargs.get("input_ids")
        self.target_widths.append(int(ids.shape[-1]) if ids is not None else 1)

    def _on_draft(self, module, args, kwargs):
        self.draft_forwards += 1

    def reset(self) -> None:
        self.target_widths = []
        self.draft_forwards = 0

    def close(self) -> None:
        for h in self._handles:
            h.remove()


@dataclass
class Run:
    """One timed run of one contender on one prompt and seed."""

    contender: Contender
    prompt: int
    seed: int
    seconds: float
    token_ids: list[int]
    target_widths: list[int]    # tokens fed to each target forward (the first is the prompt's prefill)
    draft_forwards: int
    accepted: int = 0           # specdec only: drafts accepted / tested (alpha)
    tested: int = 0

    def record(self) -> dict:
        """The JSON form (token ids left out; the greedy check has used them)."""
        widths: dict[str, int] = {}
        for w in self.target_widths[1:]:
            widths[str(w)] = widths.get(str(w), 0) + 1
        return dict(kind=self.contender.kind, temperature=self.contender.temperature,
                    gamma=self.contender.gamma, prompt=self.prompt, seed=self.seed,
                    seconds=self.seconds, new_tokens=len(self.token_ids),
                    target_forwards=len(self.target_widths), draft_forwards=self.draft_forwards,
                    prefill_width=self.target_widths[0] if self.target_widths else 0,
                    target_widths=widths, accepted=self.accepted, tested=self.tested)


def run_contender(pair, contender: Contender, prompt_ids: list[int], max_new_tokens: int, seed: int,
                  counter: ForwardCounter, prompt_index: int = 0) -> Run:
    """Run one contender once, timed from call to return (each library's whole API call)."""
    kind, t = contender.kind, contender.temperature
    sampling = SamplingConfig(temperature=t)
    accepted = tested = 0
    counter.reset()
    if KINDS[kind].family == "specdec":
        start = time.perf_counter()
        if kind == SPECDEC_AR:
            gen = autoregressive_generate(pair, prompt_ids, max_new_tokens=max_new_tokens,
                                          sampling=sampling, seed=seed)
        else:
            gen = speculative_generate(pair, prompt_ids, gamma=contender.gamma, max_new_tokens=max_new_tokens,
                                       sampling=sampling, seed=seed, drafter=KINDS[kind].drafter)
        seconds = time.perf_counter() - start
        tokens = list(gen.token_ids)
        accepted, tested = gen.stats.accepted, gen.stats.tested
    else:
        kwargs = transformers_kwargs(kind, t, contender.gamma, max_new_tokens, pair.eos_token_id,
                                     NgramDrafter(pair.vocab_size).max_ngram)   # specdec's n-gram length
        if kind == HF_ASSISTED:
            kwargs["assistant_model"] = pair.draft
        input_ids = torch.tensor([prompt_ids], device=pair.device)
        mask = torch.ones_like(input_ids)
        with assistant_settings(pair.draft, contender.gamma or 1), torch.inference_mode():
            torch.manual_seed(seed)   # transformers samples from the global RNG (fine in a bench process)
            start = time.perf_counter()
            out = pair.target.generate(input_ids, attention_mask=mask, **kwargs)
            if torch.device(pair.device).type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        tokens = out[0, len(prompt_ids):].tolist()
    return Run(contender, prompt_index, seed, seconds, tokens, list(counter.target_widths),
               counter.draft_forwards, accepted, tested)


# ---------------------------------------------------------------- costs

COST_WARMUP = 3   # untimed steps first: the first one fills the caches with the prompt


class CostMeter:
    """Times one cached forward of the draft over 1 token and of the target over each of `widths`
    tokens (width 1 = one decode step; gamma + 1 = one verify), one `step` at a time.

    A step times every item once, then the context grows by one token, so drift on a shared
    machine hits all widths alike; the bench spreads its steps between the passes so the costs
    see the same machine as the runs. Like the decoder, each forward first crops the tokens the
    previous one fed beyond the context (the rejected drafts), then feeds `width` tokens.
    """

    def __init__(self, pair, prompt_ids: list[int], widths: list[int]):
        self.pair, self.widths = pair, list(widths)
        self.items = [("draft", pair.draft, 1)] + [(w, pair.target, w) for w in widths]
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
        """Median milliseconds per item, and c = draft step / target step."""
        target_ms = {w: statistics.median(self.times[w]) for w in self.widths}
        draft_ms = statistics.median(self.times["draft"])
        step_ms = target_ms.get(1)
        return {"draft_step_ms": draft_ms, "target_ms_by_width": target_ms, "target_step_ms": step_ms,
                "c": draft_ms / step_ms if step_ms else None, "steps": len(self.times["draft"]),
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


def acceptance(pair, gamma: int = 4, max_new_tokens: int = 64, temperature: float = 1.0) -> dict:
    """Pooled alpha (accepted / tested) over PROMPTS x SEEDS with the draft model."""
    accepted = tested = 0
    tpf = []
    for prompt in PROMPTS:
        for seed in SEEDS:
            g = speculative_generate(pair, prompt, gamma=gamma, max_new_tokens=max_new_tokens,
                                     sampling=SamplingConfig(temperature=temperature), seed=seed)
            accepted += g.stats.accepted
            tested += g.stats.tested
            tpf.append(g.stats.tokens_per_target_forward)
    return {"alpha": accepted / tested if tested else 0.0, "tested": tested, "runs": len(PROMPTS) * len(SEEDS),
            "tokens_per_target_forward": statistics.mean(tpf), "gamma": gamma, "temperature": temperature}


# ---------------------------------------------------------------- from runs to rows (pure)

def verify_cost_steps(widths: dict[str, int], target_ms_by_width: dict) -> float | None:
    """Mean cost of the counted target forwards (prefills left out) in target decode steps, from
    the measured cost of a forward of each width (wider than measured: the widest measured)."""
    costs = {int(w): ms for w, ms in target_ms_by_width.items()}   # measured for widths 1..max gamma + 1
    n = sum(widths.values())
    if not n:
        return None
    total = sum(count * costs[min(int(w), max(costs))] for w, count in widths.items())
    return total / n / costs[1]


def aggregate(records: list[dict], costs: dict) -> list[dict]:
    """One row per contender: tokens/s (median and quartiles over runs), counted forwards, alpha,
    c, verify cost, and both predicted speedups. Measured speedups are added by `add_speedups`."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["kind"], r["temperature"], r["gamma"]), []).append(r)
    step_ms, draft_ms = costs["target_step_ms"], costs["draft_step_ms"]
    rows = []
    for (kind, t, gamma), runs in groups.items():
        rates = [r["new_tokens"] / r["seconds"] for r in runs if r["seconds"] > 0]
        q1, med, q3 = quartiles(rates)
        tokens = sum(r["new_tokens"] for r in runs)
        target_fw = sum(r["target_forwards"] for r in runs)
        draft_fw = sum(r["draft_forwards"] for r in runs)
        widths: dict[str, int] = {}
        for r in runs:
            for w, n in r["target_widths"].items():
                widths[w] = widths.get(w, 0) + n
        tested = sum(r["tested"] for r in runs)
        alpha = sum(r["accepted"] for r in runs) / tested if tested else None
        drafter = KINDS[kind].drafter
        c = costs["c"] if drafter == "model" else 0.0 if drafter == "ngram" else None
        verify = verify_cost_steps(widths, costs["target_ms_by_width"]) or 1.0
        tokens_per_round = tokens / target_fw if target_fw else 0.0
        draft_steps_per_round = draft_fw / target_fw if target_fw else 0.0
        rows.append(dict(
            kind=kind, label=KINDS[kind].label, family=KINDS[kind].family, temperature=t, gamma=gamma,
            runs=len(runs), new_tokens=tokens, tok_s=med, tok_s_q1=q1, tok_s_q3=q3,
            tok_s_min=min(rates), tok_s_max=max(rates),
            target_forwards_per_token=target_fw / tokens if tokens else None,
            tokens_per_target_forward=tokens_per_round, draft_forwards_per_round=draft_steps_per_round,
            target_widths=dict(sorted(widths.items(), key=lambda kv: int(kv[0]))),
            eos_stops=sum(r["new_tokens"] < r["max_new_tokens"] for r in runs),
            alpha=alpha, c=c, verify_steps=verify,
            leviathan=leviathan_speedup(alpha, gamma, c) if alpha is not None and gamma and c is not None else None,
            predicted=predicted_speedup(tokens_per_round, draft_steps_per_round, draft_ms / 1000,
                                        verify * step_ms / 1000, step_ms / 1000) if target_fw else None))
    return rows


def drafted_gamma(row: dict) -> bool:
    """Whether a row's rounds drafted gamma tokens (verify forwards gamma + 1 wide). With a
    constant schedule and no confidence threshold only the rounds just before max_new_tokens draft
    fewer, at most gamma of them per run; transformers' defaults would draft 20 or stop early."""
    widths = {int(w): n for w, n in row["target_widths"].items()}
    narrower = sum(n for w, n in widths.items() if w < row["gamma"] + 1)
    return max(widths, default=0) <= row["gamma"] + 1 and narrower <= row["gamma"] * row["runs"]


def add_speedups(rows: list[dict]) -> dict:
    """Measured speedup of every row against the faster target-alone loop at its temperature,
    and each specdec row's time per token over its transformers counterpart's. Returns the baselines."""
    index = {(r["kind"], r["temperature"], r["gamma"]): r for r in rows}
    baselines = {}
    for t in sorted({r["temperature"] for r in rows}):
        candidates = [index[(k, t, None)] for k in BASELINES if (k, t, None) in index]
        fastest = max(candidates, key=lambda r: r["tok_s"])
        baselines[t] = {"kind": fastest["kind"], "label": fastest["label"], "tok_s": fastest["tok_s"]}
    for r in rows:
        base = baselines[r["temperature"]]["tok_s"]
        r["speedup"] = r["tok_s"] / base
        r["speedup_q1"], r["speedup_q3"] = r["tok_s_q1"] / base, r["tok_s_q3"] / base
        r["measured_over_predicted"] = r["speedup"] / r["predicted"] if r.get("predicted") else None
        other = index.get((KINDS[r["kind"]].counterpart, r["temperature"], r["gamma"]))
        r["over_transformers"] = other["tok_s"] / r["tok_s"] if other else None   # time per token ratio
    return baselines


def check_greedy(runs: list[Run]) -> dict:
    """At T = 0 every contender must produce the same tokens for the same prompt as specdec's
    autoregressive loop (whole outputs: everyone stops at the same EOS or max_new_tokens)."""
    reference = {(r.prompt, r.seed): r.token_ids for r in runs
                 if r.contender.temperature == 0 and r.contender.kind == SPECDEC_AR}
    mismatches, compared = [], 0
    for r in runs:
        if r.contender.temperature != 0 or r.contender.kind == SPECDEC_AR:
            continue
        ref = reference.get((r.prompt, r.seed))
        if ref is None:
            continue
        compared += 1
        if r.token_ids != ref:
            first = next((i for i, (a, b) in enumerate(zip(ref, r.token_ids)) if a != b),
                         min(len(ref), len(r.token_ids)))   # one is a prefix of the other
            mismatches.append(dict(kind=r.contender.kind, label=r.contender.label, gamma=r.contender.gamma,
                                   prompt=r.prompt, seed=r.seed, first_difference=first,
                                   lengths=[len(ref), len(r.token_ids)]))
    return {"checked": bool(reference) and compared > 0, "agree": not mismatches, "compared": compared,
            "mismatches": mismatches,
            "how": "whole outputs token for token against specdec's autoregressive loop; every contender "
                   "stops at the same EOS id or after max_new_tokens"}


def summarize(rows: list[dict], baselines: dict, greedy: dict) -> dict:
    """Best gamma per temperature, specdec/assisted ratios, greedy verdict and the issue's goals."""
    best, goals = {}, []
    for t in sorted(baselines):
        spec = [r for r in rows if r["temperature"] == t and r["family"] == "specdec" and r["gamma"]]
        top = max(spec, key=lambda r: r["speedup"], default=None)
        model_rows = [r for r in spec if r["kind"] == SPECDEC_MODEL]
        best_model = max(model_rows, key=lambda r: r["speedup"], default=None)
        assisted = [r for r in rows if r["temperature"] == t and r["kind"] == HF_ASSISTED]
        best[f"{t:g}"] = {
            "baseline": baselines[t],
            "specdec": _brief(top), "specdec_model": _brief(best_model),
            "assisted": _brief(max(assisted, key=lambda r: r["speedup"], default=None))}
        target = {0.0: GOALS["speedup_t0"], 1.0: GOALS["speedup_t1"]}.get(float(t))
        if top and target:
            goals.append(dict(goal=f"specdec speculative at T={t:g}, best gamma >= {target}x the faster "
                                   f"target-alone loop",
                              value=top["speedup"], met=top["speedup"] >= target))
        if top and top.get("measured_over_predicted"):
            goals.append(dict(goal=f"T={t:g} best gamma: measured >= {GOALS['measured_over_predicted']} x predicted "
                                   f"from measured costs", value=top["measured_over_predicted"],
                              met=top["measured_over_predicted"] >= GOALS["measured_over_predicted"]))
    ratios = [r for r in rows if r["kind"] == SPECDEC_MODEL and r.get("over_transformers")]
    worst = max(ratios, key=lambda r: r["over_transformers"], default=None)
    least = min(ratios, key=lambda r: r["over_transformers"], default=None)
    if worst:
        goals.append(dict(goal=f"specdec time / assisted time <= {GOALS['specdec_over_assisted']} at every gamma and T",
                          value=worst["over_transformers"],
                          met=worst["over_transformers"] <= GOALS["specdec_over_assisted"]))
    return {"best": best, "specdec_over_assisted": {"min": _brief(least), "max": _brief(worst)},
            "greedy_agree": greedy["agree"] if greedy["checked"] else None, "goals": goals}


def _brief(row: dict | None) -> dict | None:
    """The summary's view of a row."""
    if row is None:
        return None
    keys = ("kind", "label", "temperature", "gamma", "tok_s", "speedup", "predicted", "leviathan",
            "measured_over_predicted", "over_transformers", "alpha")
    return {k: row.get(k) for k in keys}


# ---------------------------------------------------------------- text output (pure)

COLUMNS = [  # header, width, row -> text
    ("contender", 26, lambda r: r["label"]),
    ("T", 3, lambda r: f"{r['temperature']:g}"),
    ("γ", 2, lambda r: str(r["gamma"]) if r["gamma"] else "-"),
    ("tok/s", 6, lambda r: f"{r['tok_s']:.0f}"),
    ("[q1–q3]", 11, lambda r: f"[{r['tok_s_q1']:.0f}–{r['tok_s_q3']:.0f}]"),
    ("fwd/tok", 7, lambda r: _f(r["target_forwards_per_token"], 2)),
    ("α", 5, lambda r: _f(r["alpha"], 2)),
    ("c", 5, lambda r: _f(r["c"], 2)),
    ("verify", 6, lambda r: _f(r["verify_steps"], 2)),
    ("speedup", 7, lambda r: _f(r["speedup"], 2, "x")),
    ("Leviathan", 9, lambda r: _f(r["leviathan"], 2, "x")),
    ("predicted", 9, lambda r: _f(r["predicted"], 2, "x")),
    ("÷HF", 5, lambda r: _f(r["over_transformers"], 2)),
]


def _f(x, digits: int, suffix: str = "") -> str:
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def format_table(rows: list[dict]) -> str:
    """Fixed-width table, one row per contender x T x gamma; a blank line before each block
    (the two target-alone loops, then each speculative contender over gamma)."""
    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, (_, w, _)) in enumerate(zip(cells, COLUMNS)))

    header = line([h for h, _, _ in COLUMNS])
    out = [header, "-" * len(header)]
    previous = None
    for r in rows:
        block = (r["temperature"], r["kind"] if r["gamma"] else "target alone")
        if previous is not None and block != previous:
            out.append("")
        out.append(line([fmt(r) for _, _, fmt in COLUMNS]))
        previous = block
    return "\n".join(out)


LEGEND = ("tok/s: median over runs, [q1–q3] its quartiles (prompts differ, so they spread); fwd/tok: target "
          "forwards per token; α: accepted/tested drafts; c: draft step / target step; verify: mean target "
          "forward cost in target steps; speedup: tok/s ÷ the faster target-alone loop at the same T; "
          "Leviathan: (1-α^(γ+1))/((1-α)(γc+1)); predicted: from the measured costs and counted forwards; "
          "÷HF: specdec time per token ÷ transformers' (generate, assisted, prompt lookup)")


def format_summary(results: dict) -> str:
    s = results["summary"]
    lines = []
    for t, b in s["best"].items():
        base = b["baseline"]
        line = f"T={float(t):g}: baseline {base['label']} {base['tok_s']:.0f} tok/s"
        for key in ("specdec", "specdec_model", "assisted"):
            r = b[key]
            if r and not (key == "specdec_model" and r["kind"] == b["specdec"]["kind"]):
                line += (f"; best {r['label']} γ={r['gamma']}: {r['speedup']:.2f}x"
                         + (f" (predicted {r['predicted']:.2f}x, measured/predicted {r['measured_over_predicted']:.2f})"
                            if key.startswith("specdec") and r.get("predicted") else ""))
        lines.append(line)
    ratio = s["specdec_over_assisted"]
    if ratio["min"]:
        lo, hi = ratio["min"], ratio["max"]
        lines.append(f"specdec + draft model time ÷ transformers assisted time at equal γ: "
                     f"min {lo['over_transformers']:.2f} "
                     f"(T={lo['temperature']:g}, γ={lo['gamma']}), max {hi['over_transformers']:.2f} "
                     f"(T={hi['temperature']:g}, γ={hi['gamma']})")
    g = results["greedy"]
    if not g["checked"]:
        lines.append("greedy agreement: not checked (no T=0 runs)")
    elif g["agree"]:
        lines.append(f"greedy agreement: OK, {g['compared']} T=0 runs matched specdec's autoregressive output "
                     f"token for token (whole outputs: all stop at the same EOS or max new tokens)")
    else:
        lines.append(f"greedy agreement: FAILED, {len(g['mismatches'])} of {g['compared']} T=0 runs differ:")
        for m in g["mismatches"][:10]:
            lines.append(f"  {m['label']} γ={m['gamma']} prompt {m['prompt']} seed {m['seed']}: first difference "
                         f"at token {m['first_difference']} (lengths {m['lengths'][0]} vs {m['lengths'][1]})")
    for goal in s["goals"]:
        lines.append(f"goal: {goal['goal']}: {goal['value']:.2f} {'met' if goal['met'] else 'NOT met'}")
    for w in results.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the run

@dataclass
class BenchConfig:
    gammas: list[int]
    temperatures: list[float]
    max_new_tokens: int
    prompts: list[str]
    seeds: list[int]
    repeats: int
    threads: int
    cost_steps: int
    out: Path
    progress: bool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench's options (the CLI's `bench` subparser, or `main` here)."""
    d, q = DEFAULTS, QUICK
    add = parser.add_argument
    add("--gammas", default=None, help=f"drafts per round: '1-8', '1,2,4' (default {d['gammas']}; quick {q['gammas']})")
    add("--temperatures", default=None, help=f"comma-separated, 0 = greedy (default {d['temperatures']})")
    add("--max-new-tokens", type=int, default=None, help=f"tokens per run (default {d['max_new_tokens']})")
    add("--prompts", type=int, default=None,
        help=f"how many of the {len(PROMPTS)} built-in prompts (default {d['prompts']})")
    add("--seeds", type=int, default=None, help=f"seeds 0..N-1 per prompt (default {d['seeds']})")
    add("--repeats", type=int, default=None, help="passes over all prompts and seeds (default 1)")
    add("--cost-steps", type=int, default=None, help=f"timed forwards per cost (default {d['cost_steps']})")
    add("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    add("--out", default=None, help=f"folder for results.json and speedup.html (default {d['out']})")
    add("--quick", action="store_true", help="a seconds-long smoke run (small settings)")
    add("--no-progress", action="store_true", help="no progress bar (off anyway when stderr is not a terminal)")
    add("--preset", default=None, help="model pair preset (default: the bundled pair)")
    add("--target", help="target model: folder or hub id (with --draft)")
    add("--draft", help="draft model: folder or hub id (with --target)")


def config_from_args(args) -> BenchConfig:
    """Resolve --quick and the defaults, and check every value (ValueError, one line)."""
    base = QUICK if getattr(args, "quick", False) else DEFAULTS

    def pick(name):
        value = getattr(args, name, None)
        return base.get(name, DEFAULTS.get(name)) if value is None else value

    def whole(name, value, lo, hi=None):
        return whole_number(value, f"--{name}", lo, hi, strict=True)

    gammas = parse_gammas(pick("gammas"))
    temperatures = parse_temperatures(pick("temperatures"))
    max_new = whole("max-new-tokens", pick("max_new_tokens"), 1, limits.MAX_NEW_TOKENS)
    n_prompts = whole("prompts", pick("prompts"), 1, len(PROMPTS))
    n_seeds = whole("seeds", pick("seeds"), 1)
    repeats = whole("repeats", pick("repeats"), 1)
    cost_steps = whole("cost-steps", pick("cost_steps"), 1, 200)
    threads = whole("threads", 1 if getattr(args, "threads", None) is None else args.threads, 1, 512)
    return BenchConfig(gammas, temperatures, max_new, PROMPTS[:n_prompts], list(range(n_seeds)), repeats,
                       threads, cost_steps, Path(pick("out") or DEFAULTS["out"]),
                       progress=not getattr(args, "no_progress", False))


def benchmark(pair, cfg: BenchConfig, bar=None) -> dict:
    """Warm up, run every contender on every prompt and seed (interleaved), time the forward
    costs between the passes, and return the results dict (rows, summary, greedy check, raw runs)."""
    tick = bar.update if bar is not None else (lambda n=1: None)
    prompt_ids = [pair.encode(p)[1] for p in cfg.prompts]
    longest = max(len(ids) for ids in prompt_ids)
    limit = pair.context_length
    if limit and longest + cfg.max_new_tokens > limit:
        raise ValueError(f"the longest prompt is {longest} tokens and max new tokens is {cfg.max_new_tokens}, "
                         f"but the models' context holds {limit} tokens: lower --max-new-tokens to {limit - longest}")
    widths = list(range(1, max(cfg.gammas) + 2))
    # The cost contexts grow by one token a step: keep them inside the models' context.
    steps = cfg.cost_steps if not limit else max(1, min(cfg.cost_steps, limit - len(prompt_ids[0]) - len(widths) - 4))
    lineup = contenders(cfg.gammas, cfg.temperatures)
    passes = [(r, i, s) for r in range(cfg.repeats) for i in range(len(cfg.prompts)) for s in cfg.seeds]
    # Cost steps before each pass (spread over the run, like the runs they predict).
    steps_before = [steps * (k + 1) // len(passes) - steps * k // len(passes) for k in range(len(passes))]
    if bar is not None:
        bar.reset(total=COST_WARMUP + steps + len(lineup) * (1 + len(passes)))
        bar.set_description("warm-up")
    meter = CostMeter(pair, prompt_ids[0], widths)
    counter = ForwardCounter(pair)
    try:
        for _ in range(COST_WARMUP):
            meter.step(timed=False)
            tick()
        for c in lineup:
            run_contender(pair, c, prompt_ids[0], min(16, cfg.max_new_tokens), 0, counter)
            tick()
        gc.collect()
        gc.freeze()   # the loaded models' objects are never garbage: keep collections short and even
        if bar is not None:
            bar.set_description("timed")
        runs: list[Run] = []
        for k, (_, i, seed) in enumerate(passes):
            for _ in range(steps_before[k]):
                meter.step()
                tick()
            for c in rotated(lineup, k, len(passes)):
                runs.append(run_contender(pair, c, prompt_ids[i], cfg.max_new_tokens, seed, counter, i))
                tick()
    finally:
        gc.unfreeze()
        counter.close()
    costs = meter.result()

    records = [dict(r.record(), max_new_tokens=cfg.max_new_tokens) for r in runs]
    rows = aggregate(records, costs)
    order = {c: n for n, c in enumerate(lineup)}
    rows.sort(key=lambda r: order[Contender(r["kind"], r["temperature"], r["gamma"])])
    baselines = add_speedups(rows)
    greedy = check_greedy(runs)
    warnings = [f"{r['label']} γ={r['gamma']} T={r['temperature']:g}: verify forwards were not γ + 1 tokens wide "
                f"({r['target_widths']}): the assistant's settings may not have reached transformers"
                for r in rows if r["kind"] == HF_ASSISTED and not drafted_gamma(r)]
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION,
        "settings": dict(gammas=cfg.gammas, temperatures=cfg.temperatures, max_new_tokens=cfg.max_new_tokens,
                         prompts=cfg.prompts, seeds=cfg.seeds, repeats=cfg.repeats, threads=torch.get_num_threads(),
                         cost_steps=steps, top_k=0, top_p=1.0, eos_token_id=pair.eos_token_id,
                         stop="every contender stops at the pair's EOS id or after max_new_tokens"),
        "pair": pair.describe(),
        "versions": _versions(),
        "costs": {**costs, "target_ms_by_width": {str(w): ms for w, ms in costs["target_ms_by_width"].items()}},
        "baselines": {f"{t:g}": b for t, b in baselines.items()},
        "rows": rows,
        "greedy": greedy,
        "summary": summarize(rows, baselines, greedy),
        "warnings": warnings,
        "runs": records,
    }


def _versions() -> dict:
    import platform

    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.processor() or platform.machine()}


def run(args) -> int:
    """`python -m specdec bench`: prints the table and summary, writes results.json and speedup.html.
    0 on success, 1 when greedy outputs disagree; ValueError for bad option values."""
    started = time.perf_counter()
    cfg = config_from_args(args)   # before loading anything
    try:
        cfg.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create --out folder {cfg.out}: {err.strerror}") from None
    torch.set_num_threads(cfg.threads)

    from transformers.utils import logging as hf_logging

    from .models import load_pair

    hf_logging.set_verbosity_error()   # the output is the table, not transformers' notices
    hf_logging.disable_progress_bar()
    pair = load_pair(target=getattr(args, "target", None), draft=getattr(args, "draft", None),
                     preset=getattr(args, "preset", None))
    lineup = len(contenders(cfg.gammas, cfg.temperatures))
    passes = cfg.repeats * len(cfg.prompts) * len(cfg.seeds)
    print(f"pair: {pair.label}  [{pair.device}]  torch threads: {torch.get_num_threads()}")
    print(f"{lineup} contenders (T = {', '.join(f'{t:g}' for t in cfg.temperatures)}; γ = "
          f"{', '.join(map(str, cfg.gammas))}) x {passes} passes ({len(cfg.prompts)} prompts x {len(cfg.seeds)} "
          f"seeds x {cfg.repeats}), {cfg.max_new_tokens} new tokens each, interleaved", flush=True)

    from tqdm.auto import tqdm

    with tqdm(file=sys.stderr, unit="run", leave=False,
              disable=not (cfg.progress and sys.stderr.isatty())) as bar:
        results = benchmark(pair, cfg, bar)
    results["elapsed_s"] = time.perf_counter() - started

    costs = results["costs"]
    print(f"costs: draft step {costs['draft_step_ms']:.2f} ms, target step {costs['target_step_ms']:.2f} ms, "
          f"c = {costs['c']:.3f}; target forward over k tokens, in steps: "
          + " ".join(f"{k}:{ms / costs['target_step_ms']:.2f}" for k, ms in costs["target_ms_by_width"].items()))
    print()
    print(format_table(results["rows"]))
    print()
    print(textwrap.fill(LEGEND, width=110))
    print()
    print(format_summary(results))

    json_path, html_path = cfg.out / "results.json", cfg.out / "speedup.html"
    from .bench_chart import speedup_figure

    try:
        json_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
        # The whole plotly.js inside the file: it opens offline, with no CDN.
        speedup_figure(results).write_html(str(html_path), include_plotlyjs=True)
    except OSError as err:
        raise ValueError(f"cannot write to {cfg.out}: {err.strerror}") from None
    print(f"wrote {json_path} and {html_path}; elapsed {_duration(results['elapsed_s'])}")
    return 0 if results["greedy"]["agree"] else 1


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m specdec.bench`): the same options and exit codes as the CLI."""
    from .models import ModelLoadError

    parser = argparse.ArgumentParser(prog="python -m specdec bench", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, ModelLoadError) as err:
        print(f"specdec: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
