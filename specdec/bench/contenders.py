"""The bench's contenders: who decodes (specdec's loops, transformers' generate, assisted
generation and prompt lookup), with which settings, and one timed run of one of them.

Every contender decodes with the same settings; forward passes are counted by hooks on the two
models, the same way for every contender (`ForwardCounter`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..core.registry import find, kind_of, kinds, names
from ..core.sampling import SamplingConfig
from ..core.settings import RunSettings
from ..decoding.loop import autoregressive_generate, speculative_generate
from ..drafting.drafters import NgramDrafter


@dataclass(frozen=True)
class Kind:
    label: str
    family: str                 # specdec | transformers
    drafter: str | None         # a registered drafter's name (`core.registry`), None for the target alone
    counterpart: str | None     # the transformers kind a specdec kind is compared with


SPECDEC_AR, HF_GENERATE = "specdec_ar", "hf_generate"
SPECDEC_MODEL, SPECDEC_NGRAM = "specdec_model", "specdec_ngram"
SPECDEC_FEATURES = "specdec_features"   # the drafter that reads the target's features (EAGLE-style)
SPECDEC_UNTRACED = "specdec_model_untraced"   # the same run recording no trace: what tracing costs
HF_ASSISTED, HF_LOOKUP = "hf_assisted", "hf_lookup"
KINDS = {
    SPECDEC_AR: Kind("specdec autoregressive", "specdec", None, HF_GENERATE),
    HF_GENERATE: Kind("transformers generate", "transformers", None, None),
    SPECDEC_MODEL: Kind("specdec + draft model", "specdec", "model", HF_ASSISTED),
    SPECDEC_UNTRACED: Kind("specdec + draft model, no trace", "specdec", "model", None),
    # transformers has no features drafter: its time per token is set against assisted generation
    # with the distilled draft model at the same gamma.
    SPECDEC_FEATURES: Kind("specdec + features drafter", "specdec", "features", HF_ASSISTED),
    SPECDEC_NGRAM: Kind("specdec + n-gram", "specdec", "ngram", HF_LOOKUP),
    HF_ASSISTED: Kind("transformers assisted", "transformers", "model", None),
    HF_LOOKUP: Kind("transformers prompt lookup", "transformers", "ngram", None),
}
BASELINES = (SPECDEC_AR, HF_GENERATE)
SPECULATIVE = (SPECDEC_MODEL, SPECDEC_UNTRACED, SPECDEC_FEATURES, SPECDEC_NGRAM, HF_ASSISTED, HF_LOOKUP)


def speculative_kinds() -> list[str]:
    """The speculative kinds, the table's own first, then one for each registered drafter that has
    none: specdec with it, set against transformers' assisted generation where it runs a model,
    else against prompt lookup (the model-free drafter transformers has)."""
    covered = {KINDS[k].drafter for k in SPECULATIVE if KINDS[k].family == "specdec"}
    for kind in kinds():
        if kind.name not in covered:
            runs_a_model = kind.needs_draft_model or kind.reads_features
            KINDS.setdefault(f"specdec_{kind.name}", Kind(f"specdec + {kind.word}", "specdec", kind.name,
                                                          HF_ASSISTED if runs_a_model else HF_LOOKUP))
    registered = set(names())
    extra = [k for k, v in KINDS.items() if k not in SPECULATIVE and k not in BASELINES and v.drafter in registered]
    return [*SPECULATIVE, *extra]


@dataclass(frozen=True)
class Contender:
    kind: str
    temperature: float
    gamma: int | None = None    # None for the target alone

    @property
    def label(self) -> str:
        return KINDS[self.kind].label


def contenders(gammas: list[int], temperatures: list[float], features: bool = False,
               model: bool = True) -> list[Contender]:
    """Every contender, in table order: per T, the two baselines then each speculative kind over
    gamma (a registered drafter without a kind of its own here gets one: `speculative_kinds`). Each
    runs only where the pair has what its drafter needs: weights for its target (`features`), a
    draft model (`model`: specdec's draft model and transformers' assisted generation)."""
    kinds = [k for k in speculative_kinds() if kind_of(KINDS[k].drafter).runs_on(model, has_features=features)]
    out = []
    for t in temperatures:
        out += [Contender(k, t) for k in BASELINES]
        out += [Contender(k, t, g) for k in kinds for g in gammas]
    return out


def rotated(items: list, pass_index: int, passes: int) -> list:
    """The pass's running order: the list rotated so each contender starts from a different place
    over the passes (slow drift on a shared machine then spreads over all contenders)."""
    shift = (pass_index * len(items)) // max(passes, 1) % max(len(items), 1)
    return items[shift:] + items[:shift]


# transformers' defaults would draft up to 20 tokens and stop early below 0.4 confidence.
ASSISTANT_SETTINGS = dict(num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)


def transformers_kwargs(kind: str, temperature: float, gamma: int | None, max_new_tokens: int,
                        eos_token_id: int | None, ngram: int, top_k: int = 0, top_p: float = 1.0) -> dict:
    """`generate()` keywords that make transformers decode exactly like specdec's settings."""
    kw = dict(max_new_tokens=max_new_tokens, do_sample=temperature > 0,
              eos_token_id=eos_token_id, pad_token_id=eos_token_id)
    if temperature > 0:
        # generate() applies top-k 50 unless told otherwise: always told, as specdec was.
        kw.update(temperature=temperature, top_k=top_k, top_p=top_p)
    if kind == HF_ASSISTED:
        kw.update(ASSISTANT_SETTINGS, num_assistant_tokens=gamma)
    if kind == HF_LOOKUP:
        kw.update(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=ngram)
    return kw


@contextmanager
def assistant_settings(draft, gamma: int):
    """transformers 5.23 reads the assistant's settings from the assistant's own generation_config
    (the same names passed to generate() do not reach it): set them there for one call (no draft
    model: nothing to set)."""
    if draft is None:
        yield
        return
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
        self._handles = [pair.target.register_forward_pre_hook(self._on_target, with_kwargs=True)]
        if pair.draft is not None:
            self._handles.append(pair.draft.register_forward_pre_hook(self._on_draft, with_kwargs=True))

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
    drafted: int = 0            # specdec only: drafts made, and the seconds spent making them
    draft_seconds: float = 0.0  # (the features drafter's c comes from these: it has no model to time alone)

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
                    target_widths=widths, accepted=self.accepted, tested=self.tested, drafted=self.drafted,
                    draft_seconds=self.draft_seconds)


def _widths_of(gen) -> list[int]:
    """Tokens fed to each target forward after the prefill, from a run's own record."""
    if gen.rounds:
        return [r.gamma + 1 for r in gen.rounds]
    return [1] * gen.stats.target_forwards


def run_contender(pair, contender: Contender, prompt_ids: list[int], max_new_tokens: int, seed: int,
                  counter: ForwardCounter, prompt_index: int = 0, top_k: int = 0, top_p: float = 1.0) -> Run:
    """Run one contender once, timed from call to return (each library's whole API call); above
    T = 0 it samples with `top_k` and `top_p` (0 and 1: the whole of p)."""
    kind, t = contender.kind, contender.temperature
    accepted = tested = drafted = 0
    draft_seconds = 0.0
    counter.reset()
    if KINDS[kind].family == "specdec":
        sampling = SamplingConfig(temperature=t, top_k=top_k if t else 0, top_p=top_p if t else 1.0)
        settings = RunSettings(gamma=contender.gamma or 1, max_new_tokens=max_new_tokens, seed=seed,
                               sampling=sampling, drafter=KINDS[kind].drafter or RunSettings.drafter)
        start = time.perf_counter()
        if kind == SPECDEC_AR:
            gen = autoregressive_generate(pair, prompt_ids, settings)
        else:
            gen = speculative_generate(pair, prompt_ids, settings, trace=kind != SPECDEC_UNTRACED)
        seconds = time.perf_counter() - start
        tokens = list(gen.token_ids)
        accepted, tested = gen.stats.accepted, gen.stats.tested
        drafted, draft_seconds = gen.stats.drafted, gen.stats.draft_seconds
        drafter = find(KINDS[kind].drafter)   # None: the target alone
        if drafter is not None and drafter.reads_features:   # its net is no model the hooks see: its own count
            counter.draft_forwards = gen.stats.draft_forwards
        if not counter.target_widths:   # a CUDA graph's replay calls no forward hook: widths from the run
            counter.target_widths = [len(prompt_ids)] + _widths_of(gen)
            counter.draft_forwards = gen.stats.draft_forwards
    else:
        kwargs = transformers_kwargs(kind, t, contender.gamma, max_new_tokens, pair.eos_token_id,
                                     NgramDrafter(pair.vocab_size).max_ngram, top_k, top_p)   # specdec's n-gram
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
               counter.draft_forwards, accepted, tested, drafted, draft_seconds)

