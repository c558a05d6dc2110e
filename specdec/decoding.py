"""Speculative and autoregressive decoding over a `ModelPair`, writing a `Generation` trace.

The loop, top to bottom: the drafter proposes up to gamma tokens with their q rows; ONE target
forward over (uncached context + drafts) gives the gamma + 1 p rows; `verify` accepts a prefix
and draws the round's last token; both KV caches are cut back to what was kept (lazily, at the
next forward, see `drafters.KVCache`). All randomness comes from one `torch.Generator` seeded
with `seed`: the same seed gives the same trace, and no global RNG state is touched.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from . import trace as tr
from .drafters import Drafter, KVCache, ModelDrafter, NgramDrafter, align_logits
from .sampling import END_RESIDUAL, Rule, SamplingConfig, acceptance_probability, end_rule, logits_to_probs, sample, verify
from .trace import Dist, Generation, Position, Round

MAX_GAMMA = 16
MAX_NEW_TOKENS = 1024
DRAFTERS = ("model", "ngram")


def _sync(device) -> None:
    if torch.device(device).type == "cuda":   # honest timings: wait for queued GPU work
        torch.cuda.synchronize()


def check_request(pair, prompt_ids: list[int], gamma: int, max_new_tokens: int,
                  sampling: SamplingConfig, drafter: str = "model") -> None:
    """Refuse bad settings up front with a message a user can act on (ValueError)."""
    if not prompt_ids:
        raise ValueError("the prompt is empty: type at least one word")
    check_settings(gamma, max_new_tokens, sampling, drafter)
    limit = pair.context_length
    if limit and len(prompt_ids) + max_new_tokens > limit:
        raise ValueError(
            f"the prompt is {len(prompt_ids)} tokens and max new tokens is {max_new_tokens}, but the "
            f"models' context holds {limit} tokens: shorten the prompt or lower max new tokens "
            f"(at most {max(0, limit - len(prompt_ids))} here)")


def check_settings(gamma: int, max_new_tokens: int, sampling: SamplingConfig, drafter: str = "model") -> None:
    """The checks that need no model (the CLI runs them before loading one)."""
    if not isinstance(gamma, int) or isinstance(gamma, bool) or not 1 <= gamma <= MAX_GAMMA:
        raise ValueError(f"gamma (drafts per round) must be a whole number from 1 to {MAX_GAMMA}, got {gamma}")
    if not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max new tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {max_new_tokens}")
    if drafter not in DRAFTERS:
        raise ValueError(f"unknown drafter {drafter!r}: choose 'model' or 'ngram'")
    sampling.validate()


def _make_drafter(pair, name: str) -> Drafter:
    if name == "ngram":
        return NgramDrafter(pair.vocab_size)
    return ModelDrafter(pair.draft, pair.vocab_size)


@torch.no_grad()
def speculative_generate(pair, prompt: str | list[int], gamma: int = 4, max_new_tokens: int = 64,
                         sampling: SamplingConfig | None = None, seed: int = 0,
                         skip_adjustment: bool = False, drafter: str = "model",
                         on_round: Callable[[Round, Generation], None] | None = None,
                         rule: Rule | None = None) -> Generation:
    """Generate with speculative sampling and return the full trace.

    skip_adjustment=True samples from p instead of the residual after a rejection: the
    deliberately biased shortcut the app lets learners try. `on_round(round, generation_so_far)`
    is called after every round (the app streams from it).
    """
    sampling = sampling or SamplingConfig()
    rule = rule or (Rule.SKIP_ADJUSTMENT if skip_adjustment else Rule.EXACT)
    prompt_text, prompt_ids = pair.encode(prompt)
    check_request(pair, prompt_ids, gamma, max_new_tokens, sampling, drafter)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    draft = _make_drafter(pair, drafter)
    target = KVCache(pair.target)
    device = pair.device

    gen = _new_generation(pair, prompt_text, prompt_ids, dict(
        mode="speculative", gamma=gamma, max_new_tokens=max_new_tokens,
        sampling=vars(sampling).copy(), seed=seed, skip_adjustment=rule is Rule.SKIP_ADJUSTMENT,
        rule=rule.value, drafter=drafter))
    context = list(prompt_ids)
    target_forwards = 0
    stopped = "max_new_tokens"
    t_start = time.perf_counter()
    while len(gen.token_ids) < max_new_tokens:
        left = max_new_tokens - len(gen.token_ids)
        # Never draft past the end: the round's own last token fills the final slot.
        g = min(gamma, left - 1)

        t0 = time.perf_counter()
        drafts, q = draft.propose(context, g, sampling, generator)
        _sync(device)
        t1 = time.perf_counter()
        logits = target.forward(context, drafts)             # ONE target forward: [len(drafts)+1, V]
        target_forwards += 1
        p = logits_to_probs(align_logits(logits, pair.vocab_size), sampling)
        u = torch.rand(len(drafts), generator=generator)
        verdict = verify(p, q.to(p.device), torch.tensor(drafts, dtype=torch.long, device=p.device),
                         u.to(p.device), generator=generator, rule=rule)
        _sync(device)
        t2 = time.perf_counter()

        rnd = _record_round(gen, len(gen.rounds), drafts, p, q, u, verdict, rule, t1 - t0, t2 - t1)
        # Emit accepted drafts then the end token, stopping at EOS or max_new_tokens.
        for tok in drafts[:rnd.n_accepted] + [rnd.end_token]:
            if len(gen.token_ids) >= max_new_tokens:
                break
            rnd.emitted.append(tok)
            gen.token_ids.append(tok)
            if tok == pair.eos_token_id:
                stopped = "eos"
                break
        context = list(prompt_ids) + gen.token_ids
        gen.rounds.append(rnd)
        _update(gen, pair, target_forwards, draft.forwards, time.perf_counter() - t_start, stopped)
        if on_round:
            on_round(rnd, gen)
        if stopped == "eos":
            break
    _update(gen, pair, target_forwards, draft.forwards, time.perf_counter() - t_start, stopped)
    return gen


@torch.no_grad()
def autoregressive_generate(pair, prompt: str | list[int], max_new_tokens: int = 64,
                            sampling: SamplingConfig | None = None, seed: int = 0) -> Generation:
    """The baseline: the target alone, one forward per token, with a KV cache. Same processing,
    same kind of seeded generator; its trace has no rounds."""
    sampling = sampling or SamplingConfig()
    prompt_text, prompt_ids = pair.encode(prompt)
    check_request(pair, prompt_ids, 1, max_new_tokens, sampling)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    target = KVCache(pair.target)
    gen = _new_generation(pair, prompt_text, prompt_ids, dict(
        mode="autoregressive", max_new_tokens=max_new_tokens, sampling=vars(sampling).copy(), seed=seed))
    context = list(prompt_ids)
    stopped = "max_new_tokens"
    t_start = time.perf_counter()
    while len(gen.token_ids) < max_new_tokens:
        p = logits_to_probs(align_logits(target.forward(context, [])[-1], pair.vocab_size), sampling)
        tok = int(sample(p, generator))
        gen.token_ids.append(tok)
        context.append(tok)
        if tok == pair.eos_token_id:
            stopped = "eos"
            break
    _sync(pair.device)
    n = len(gen.token_ids)
    gen.stats = tr.Stats(new_tokens=n, target_forwards=n, tokens_per_target_forward=1.0,
                         wall_seconds=time.perf_counter() - t_start, stopped=stopped)
    gen.text = pair.decode(gen.token_ids)
    gen.token_text.update(pair.token_texts(set(gen.token_ids) | set(prompt_ids)))
    return gen


# ---------------------------------------------------------------- helpers

def _new_generation(pair, prompt_text, prompt_ids, settings) -> Generation:
    return Generation(prompt=prompt_text, prompt_ids=list(prompt_ids), token_ids=[], text="",
                      rounds=[], stats=tr.Stats(), settings=settings, models=pair.describe(),
                      eos_token_id=pair.eos_token_id)


def _record_round(gen, index, drafts, p, q, u, verdict, rule, draft_s, verify_s) -> Round:
    """Turn one verify step into a trace Round (sparse, exact tail masses)."""
    p, q = p.float().cpu(), q.float().cpu()
    n = int(verdict.n_accepted)
    rejected = bool(verdict.rejected)
    betas = acceptance_probability(p[:len(drafts)], q).tolist()   # all positions in one op
    positions = []
    for i, tok in enumerate(drafts):
        ids = tr.union_top(p[i], q[i], also=[tok])   # the drafted token is always kept
        status = tr.ACCEPTED if i < n else (tr.REJECTED if i == n else tr.UNUSED)
        positions.append(Position(
            draft_token=tok, p_draft=float(verdict.p_draft[i]), q_draft=float(verdict.q_draft[i]),
            ratio=float(verdict.ratio[i]), u=float(u[i]), status=status,
            beta=betas[i], p=tr.sparse(p[i], ids), q=tr.sparse(q[i], ids)))
    end_dist = verdict.end_dist.float().cpu()
    end_token = int(verdict.end_token)
    # Kept ids at the end position: top of the drawn distribution and of p, and the drawn token.
    end_ids = tr.union_top(end_dist, p[n], also=[end_token])
    how = end_rule(rejected, rule)
    residual_mass = None
    if rejected and how == END_RESIDUAL:
        residual_mass = float((p[n].double() - q[n].double()).clamp_min(0).sum())
    rnd = Round(
        index=index, start=len(gen.token_ids), gamma=len(drafts), positions=positions, n_accepted=n,
        end_rule=how, end_token=end_token, end_dist=tr.sparse(end_dist, end_ids),
        end_p=tr.sparse(p[n], end_ids), end_q=tr.sparse(q[n], end_ids) if rejected else None,
        residual_mass=residual_mass,
        emitted=[], draft_seconds=draft_s, verify_seconds=verify_s)
    return rnd


def _update(gen: Generation, pair, target_forwards, draft_forwards, wall, stopped) -> None:
    gen.stats = tr.summarize(gen.rounds, len(gen.token_ids), target_forwards, draft_forwards, wall, stopped)
    gen.text = pair.decode(gen.token_ids)
    ids = set(gen.prompt_ids) | set(gen.token_ids)
    for r in gen.rounds[-1:]:
        ids |= {r.end_token, *r.end_dist.ids}
        for pos in r.positions:
            ids |= {pos.draft_token, *pos.p.ids}
    gen.token_text.update(pair.token_texts(ids - gen.token_text.keys()))
