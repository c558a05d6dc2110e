"""The math of speculative sampling as small pure tensor functions.

p is always the target distribution, q always the draft distribution. Everything here works
in float32 on whatever device the tensors live on, and takes randomness only through explicit
arguments (uniform draws, a `torch.Generator`), never from global RNG state.

References: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023); Chen et al., "Accelerating Large Language Model Decoding with
Speculative Sampling" (arXiv 2302.01318).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from .checks import is_whole, whole_number

# ---------------------------------------------------------------- logits -> probabilities

@dataclass(frozen=True)
class SamplingConfig:
    """Processing applied identically to target and draft logits (the same meaning as in
    `transformers`' `generate()`): temperature, then top-k, then top-p. temperature=0 is greedy."""

    temperature: float = 1.0
    top_k: int = 0        # 0 = off
    top_p: float = 1.0    # 1.0 = off

    def __post_init__(self):
        # A whole-number temperature or top-p (2, as JSON or Python gives it) is that number:
        # transformers' warpers refuse an int ("has to be a strictly positive float").
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if is_whole(value):
                object.__setattr__(self, name, float(value))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate(self) -> SamplingConfig:
        """Raise ValueError with a message a user can act on."""
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t) or t < 0 or t > 100:
            raise ValueError(f"temperature must be between 0 (greedy) and 100, got {t}")
        if 0 < t < 1e-3:
            raise ValueError(f"temperature {t} is too small to be meaningful: use 0 for greedy, or at least 0.001")
        whole_number(k, "top-k (0 turns it off)", 0, strict=True)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p) or not 0 < p <= 1:
            raise ValueError(f"top-p must be in (0, 1] (1 turns it off), got {p}")
        return self


def logits_to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Rows of logits [..., V] -> rows of probabilities, float32.

    Uses transformers' own logits warpers (same order as `generate()`: temperature, top-k,
    top-p) so that "top-p 0.9" here means exactly what it means there; top-p runs the warper's
    ops over the logits top-k left (`top_p_cut`). Greedy gives the one-hot of the argmax, which
    is what `generate(do_sample=False)` picks (first index on ties).
    """
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    logits = logits.float()
    shape = logits.shape
    flat = logits.reshape(-1, shape[-1])
    if config.greedy:
        probs = torch.zeros_like(flat)
        probs.scatter_(-1, flat.argmax(-1, keepdim=True), 1.0)
        return probs.reshape(shape)
    if config.temperature != 1.0:
        flat = TemperatureLogitsWarper(config.temperature)(None, flat)
    if config.top_k > 0:
        flat = TopKLogitsWarper(config.top_k)(None, flat)
    if config.top_p < 1.0:
        flat = top_p_cut(flat, config.top_p)
    return torch.softmax(flat, dim=-1).reshape(shape)


def top_p_cut(flat: torch.Tensor, top_p: float) -> torch.Tensor:
    """Rows of logits [N, V] after transformers' top-p cut (`TopPLogitsWarper`), sorting only the
    logits still finite where some are -inf (after top-k, or a drafter's vocabulary subset).

    Why not the warper alone: it sorts the whole vocabulary, 49,152 logits for the real model (~4 ms
    a row on a 2-core CPU), where after top-k 50 only 50 are finite: a pair's own sampling (top-k
    then top-p) paid ~1 ms a draft and ~3 ms a verify over 5 rows for that sort. A logit of -inf has
    probability 0 and adds 0 to the cumulative sum, so the same tokens are cut, up to the rounding of
    that sum. Of logits tied exactly at the cut, which one goes is the sort's choice, as in the
    warper. Measured on that CPU (1 and 5 rows of 49,152): the compact sort wins up to ~4,096 finite
    logits a row and loses beyond (a drafter's 16,384-id subset: 3.7 ms against the warper's 2.0), so
    it runs where at most a sixteenth of the row is finite, and only on a CPU: counting them reads the
    device, which would stall a GPU's queue at every draft.
    """
    from transformers.generation.logits_process import TopPLogitsWarper

    width = int((flat > -math.inf).sum(-1).max()) if flat.device.type == "cpu" else None   # most a row holds
    if width is None or width > flat.shape[-1] // 16:
        return TopPLogitsWarper(top_p)(None, flat)
    ids = flat.topk(max(width, 1), dim=-1).indices.sort(-1).values   # those logits' ids, ascending
    ordered, order = flat.gather(-1, ids).sort(dim=-1, descending=False, stable=True)
    remove = ordered.softmax(-1).cumsum(-1) <= (1 - top_p)
    remove[..., -1:] = False   # the warper's min_tokens_to_keep = 1
    cut = torch.zeros_like(flat, dtype=torch.bool).scatter_(-1, ids.gather(-1, order), remove)
    return flat.masked_fill(cut, -math.inf)


class DeviceSampling:
    """A SamplingConfig's numbers as 0-d tensors on a device, so that a CUDA graph holds them as
    inputs: one graph per `shape` (greedy, top-k on, top-p on) then serves every temperature, k
    and p, where a graph with the numbers baked in would be captured again at every slider move."""

    def __init__(self, device):
        self.temperature = torch.ones((), device=device)
        self.top_k = torch.ones((), dtype=torch.long, device=device)
        self.top_p_floor = torch.zeros((), device=device)   # 1 - top_p: the mass a top-p cut may drop

    @staticmethod
    def shape(config: SamplingConfig) -> tuple[bool, bool, bool]:
        """What changes the ops: greedy, top-k on, top-p on (the numbers do not)."""
        return config.greedy, config.top_k > 0, config.top_p < 1.0

    def set(self, config: SamplingConfig) -> None:
        self.temperature.fill_(config.temperature or 1.0)
        self.top_k.fill_(max(config.top_k, 1))
        self.top_p_floor.fill_(1 - config.top_p)   # in float64 first, as the warper computes it

    def probs(self, logits: torch.Tensor, shape: tuple[bool, bool, bool]) -> torch.Tensor:
        """`logits_to_probs` with the numbers read from the tensors: the same ops as transformers'
        warpers, so the same probabilities bit for bit (tests/test_sampling.py)."""
        greedy, use_k, use_p = shape
        logits = logits.float()
        flat = logits.reshape(-1, logits.shape[-1])
        if greedy:
            return logits_to_probs(logits, SamplingConfig(temperature=0))
        flat = flat / self.temperature
        if use_k:   # the k-th largest logit, as topk's last value, with k read from the device
            k = self.top_k.clamp(max=flat.shape[-1]) - 1
            kth = flat.sort(-1, descending=True).values.gather(-1, k.expand(flat.shape[0], 1))
            flat = flat.masked_fill(flat < kth, -math.inf)
        if use_p:   # TopPLogitsWarper, its threshold read from the device
            sorted_logits, order = torch.sort(flat, descending=False)
            remove = sorted_logits.softmax(-1).cumsum(-1) <= self.top_p_floor
            remove[..., -1:] = False
            flat = flat.masked_fill(remove.scatter(1, order, remove), -math.inf)
        return torch.softmax(flat, dim=-1).reshape(logits.shape)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None,
           uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of probs [..., V], by inverse CDF with a float64 uniform and cumsum.

    Used for every draw (drafter, verify, autoregressive) so all randomness is one explicit
    stream. Chosen over `torch.multinomial` because it is vectorised over millions of rows (the
    lab draws 10^6 at once), takes its uniforms from a CPU generator whatever the device (so a
    seed means the same thing on CUDA), and never picks a zero-probability token: such a token
    adds nothing to the cumulative sum, so `searchsorted(right=True)` always lands before it.

    `uniforms` (float64, one per row, on probs' device) replaces the draw from `generator`: the
    CUDA engine draws a round's uniforms in one go, uploads them once, and samples inside a graph.
    """
    flat = probs.reshape(-1, probs.shape[-1]).double()
    if uniforms is None:
        uniforms = torch.rand(flat.shape[0], generator=generator, dtype=torch.float64).to(flat.device)
    cdf = flat.cumsum(-1)
    total = cdf[:, -1:].contiguous()
    idx = torch.searchsorted(cdf, uniforms.reshape(-1, 1) * total, right=True)
    # v * total can round up to total itself: clamp to the first token where the sum reaches its
    # total, which has positive mass (the sum rose there). One search, where finding the last
    # positive entry took five ops: a draw cost ~70 µs, now ~35 (one row of 2,048, 1 thread).
    return torch.minimum(idx, torch.searchsorted(cdf, total)).reshape(probs.shape[:-1])


# ---------------------------------------------------------------- the residual

def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) along the last axis, float32, batched over leading axes.

    Where the positive part sums to 0 (p == q, or rounding leaves nothing) it returns p: a
    rejection is then impossible in exact arithmetic, and p is the only sensible answer.
    Never divides by zero, never returns NaN. (romsto calls this `max_fn`.)
    """
    p, q = p.float(), q.float()
    positive = (p - q).clamp_min(0.0)
    mass = positive.sum(-1, keepdim=True)
    return torch.where(mass > 0, positive / torch.where(mass > 0, mass, 1.0), p)


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """beta = sum(min(p, q)) = 1 - TV(p, q): the chance a draft from q is accepted."""
    return torch.minimum(p.float(), q.float()).sum(-1)


# ---------------------------------------------------------------- the verify step

class Rule(str, Enum):
    """What happens when a draft is tested. EXACT is speculative sampling; the others are the
    shortcuts a learner may try, kept here so the lab tests them on the very same code path."""

    EXACT = "exact"                    # accept if u < p/q, else sample the residual
    SKIP_ADJUSTMENT = "skip_adjustment"  # accept if u < p/q, else sample p (biased)
    ACCEPT_ALL = "accept_all"          # accept every draft (output follows q, biased)
    GREEDY_MATCH = "greedy_match"      # accept if draft == argmax p, else emit argmax p



@dataclass
class Verdict:
    """Everything one verify step decided, batched over leading axes (B = 1 in the decoder)."""

    p_draft: torch.Tensor     # [..., g] p(x_i)
    q_draft: torch.Tensor     # [..., g] q(x_i)
    ratio: torch.Tensor       # [..., g] p(x_i) / q(x_i)
    accepted: torch.Tensor    # [..., g] bool: passed its test (later ones are meaningless after a rejection)
    n_accepted: torch.Tensor  # [...] number of leading accepted drafts
    rejected: torch.Tensor    # [...] bool: a draft was rejected (else every draft passed)
    end_dist: torch.Tensor    # [..., V] the distribution the round's last token was drawn from
    end_token: torch.Tensor   # [...] that token


def verify(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor,
           generator: torch.Generator | None = None, rule: Rule = Rule.EXACT,
           end_uniform: torch.Tensor | None = None) -> Verdict:
    """The verify step of speculative sampling.

    p: [..., g + 1, V] target rows (row i scores the token after i drafts; row g gives the bonus),
    q: [..., g, V] draft rows, drafts: [..., g] drafted tokens, u: [..., g] uniform draws in [0, 1).
    Accept draft i while u_i < p_i(x_i) / q_i(x_i). At the first rejection n, draw the next
    token from residual(p_n, q_n) (or from p_n under SKIP_ADJUSTMENT); if all g drafts pass,
    draw a bonus token from p_g. g may be 0 (then this is one plain target step).
    """
    p, q = p.float(), q.float()
    g = drafts.shape[-1]
    idx = drafts.long().unsqueeze(-1)
    p_draft = p[..., :g, :].gather(-1, idx).squeeze(-1)
    q_draft = q.gather(-1, idx).squeeze(-1)
    # A drafted token always has q > 0; the guard only keeps a malformed q from making NaN.
    ratio = torch.where(q_draft > 0, p_draft / q_draft.clamp_min(torch.finfo(torch.float32).tiny),
                        torch.full_like(p_draft, math.inf))
    if rule is Rule.ACCEPT_ALL:
        accepted = torch.ones_like(ratio, dtype=torch.bool)
    elif rule is Rule.GREEDY_MATCH:
        accepted = drafts.long() == p[..., :g, :].argmax(-1)
    else:
        accepted = u.float() < ratio
    n_accepted = accepted.long().cumprod(-1).sum(-1)
    rejected = n_accepted < g

    # Row of p (and of q, when there is one) at the position where the round ends.
    vocab = p.shape[-1]
    p_end = p.gather(-2, n_accepted[..., None, None].expand(*n_accepted.shape, 1, vocab)).squeeze(-2)
    if g > 0:
        q_row = n_accepted.clamp_max(g - 1)
        q_end = q.gather(-2, q_row[..., None, None].expand(*q_row.shape, 1, vocab)).squeeze(-2)
        if rule is Rule.EXACT:
            on_reject = residual(p_end, q_end)
        elif rule is Rule.GREEDY_MATCH:
            on_reject = torch.zeros_like(p_end).scatter_(-1, p_end.argmax(-1, keepdim=True), 1.0)
        else:
            on_reject = p_end
        end_dist = torch.where(rejected[..., None], on_reject, p_end)
    else:
        end_dist = p_end
    end_token = sample(end_dist, generator, end_uniform)
    return Verdict(p_draft, q_draft, ratio, accepted, n_accepted, rejected, end_dist, end_token)


# ---------------------------------------------------------------- closed forms

def emission_parts(p: torch.Tensor, q: torch.Tensor, rule: Rule = Rule.EXACT
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form split of the token emitted at one drafted position (draft x ~ q, one test):

    (P[emitted as the accepted draft], P[emitted after a rejection]), each over the vocabulary.
    For EXACT: q * min(1, p/q) = min(p, q), and (1 - beta) * residual(p, q): they add up to p.
    """
    p, q = p.float(), q.float()
    if rule is Rule.ACCEPT_ALL:
        return q.clone(), torch.zeros_like(q)
    if rule is Rule.GREEDY_MATCH:
        top = torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0)
        kept = q * top
        return kept, (1 - kept.sum(-1, keepdim=True)) * top
    accepted = torch.minimum(p, q)
    reject_mass = (1 - accepted.sum(-1, keepdim=True)).clamp_min(0.0)
    after = residual(p, q) if rule is Rule.EXACT else p
    return accepted, reject_mass * after


def output_distribution(p: torch.Tensor, q: torch.Tensor, skip_adjustment: bool = False,
                        rule: Rule | None = None) -> torch.Tensor:
    """Distribution of the token emitted at one position: q*min(1, p/q) + (1 - beta) * residual
    (or * p when the adjustment is skipped). Equals p for the exact rule."""
    rule = rule or (Rule.SKIP_ADJUSTMENT if skip_adjustment else Rule.EXACT)
    accepted, after = emission_parts(p, q, rule)
    return accepted + after
