"""Speculative and autoregressive decoding over a `ModelPair`, writing a `Generation` trace.

The loop, top to bottom: the drafter proposes up to gamma tokens with their q rows; ONE target
forward over (uncached context + drafts) gives the gamma + 1 p rows; `verify` accepts a prefix
and draws the round's last token; both KV caches are cut back to what was kept (lazily, at the
next forward, see `drafters.KVCache`). All randomness comes from one `torch.Generator` seeded
with the run's seed: the same seed gives the same trace, and no global RNG state is touched.

For models this small the Python work around the two forwards costs as much as a forward, so
the loop keeps it small: the trace of a round is recorded with a few batched tensor ops, the
statistics and the text are derived once at the end (or when a caller streams rounds), and
token texts come from the pair's cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from . import trace as tr
from .drafters import KVCache, align_logits, make_drafter
from .outcomes import Ending, status_at
from .sampling import Rule, SamplingConfig, logits_to_probs, sample, verify
from .settings import AUTOREGRESSIVE, RunSettings
from .trace import Generation, Position, Round


def _sync(device) -> None:
    if torch.device(device).type == "cuda":   # honest timings: wait for queued GPU work
        torch.cuda.synchronize()


def check_request(pair, prompt_ids: list[int], settings: RunSettings) -> None:
    """Refuse a bad request up front with a message a user can act on (ValueError)."""
    if not prompt_ids:
        raise ValueError("the prompt is empty: type at least one word")
    settings.validate()
    limit = pair.context_length
    if limit and settings.gamma >= limit:
        raise ValueError(f"gamma (drafts per round) is {settings.gamma}, but the models' context holds {limit} tokens: "
                         f"lower gamma below {limit}")
    if limit and len(prompt_ids) + settings.max_new_tokens > limit:
        room = limit - len(prompt_ids)
        advice = (f"lower max new tokens to {room} or less" if room > 0
                  else f"shorten the prompt to fewer than {limit} tokens")
        raise ValueError(
            f"the prompt is {len(prompt_ids)} tokens and max new tokens is {settings.max_new_tokens}, but the "
            f"models' context holds {limit} tokens: {advice}")


def settings_from(gamma: int = 4, max_new_tokens: int = 64, sampling: SamplingConfig | None = None,
                  seed: int = 0, skip_adjustment: bool = False, drafter: str = "model",
                  rule: Rule | None = None) -> RunSettings:
    """The keyword form of a run's settings (the library's API) as a `RunSettings`."""
    rule = rule or (Rule.SKIP_ADJUSTMENT if skip_adjustment else Rule.EXACT)
    return RunSettings(gamma=gamma, max_new_tokens=max_new_tokens, sampling=sampling or SamplingConfig(),
                       seed=seed, rule=rule, drafter=drafter)


@torch.inference_mode()
def speculative_generate(pair, prompt: str | list[int], gamma: int = 4, max_new_tokens: int = 64,
                         sampling: SamplingConfig | None = None, seed: int = 0,
                         skip_adjustment: bool = False, drafter: str = "model",
                         on_round: Callable[[Round, Generation], None] | None = None,
                         rule: Rule | None = None, settings: RunSettings | None = None,
                         trace: bool = True) -> Generation:
    """Generate with speculative sampling and return the full trace.

    Settings come either as keywords or as one `RunSettings` (which wins). skip_adjustment=True
    samples from p instead of the residual after a rejection: the deliberately biased shortcut
    the app lets learners try. `on_round(round, generation_so_far)` is called after every round
    (the app streams from it). trace=False records no rounds (for measuring what tracing costs).
    """
    settings = settings or settings_from(gamma, max_new_tokens, sampling, seed, skip_adjustment, drafter, rule)
    prompt_text, prompt_ids = pair.encode(prompt)
    check_request(pair, prompt_ids, settings)
    sampling, rule, gamma, max_new_tokens = settings.sampling, settings.rule, settings.gamma, settings.max_new_tokens
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    draft = make_drafter(settings.drafter, pair)
    target = KVCache(pair.target)
    device = pair.device

    gen = _new_generation(pair, prompt_text, prompt_ids, settings)
    tokens = gen.token_ids
    context = list(prompt_ids)
    target_forwards = 0
    stopped = "max_new_tokens"
    t_start = time.perf_counter()
    while len(tokens) < max_new_tokens:
        # Never draft past the end: the round's own last token fills the final slot.
        g = min(gamma, max_new_tokens - len(tokens) - 1)

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
        n_accepted, end_token = int(verdict.n_accepted), int(verdict.end_token)
        _sync(device)
        t2 = time.perf_counter()

        # Emit accepted drafts then the end token, stopping at EOS or max_new_tokens.
        emitted = []
        for tok in drafts[:n_accepted] + [end_token]:
            if len(tokens) >= max_new_tokens:
                break
            emitted.append(tok)
            tokens.append(tok)
            if tok == pair.eos_token_id:
                stopped = "eos"
                break
        context.extend(emitted)
        if trace:
            rnd = record_round(len(gen.rounds), len(tokens) - len(emitted), drafts, p, q, u, verdict,
                               rule, emitted, t1 - t0, t2 - t1)
            gen.rounds.append(rnd)
            if on_round:
                _finish(gen, pair, target_forwards, draft.forwards, time.perf_counter() - t_start, stopped, [rnd])
                on_round(rnd, gen)
        if stopped == "eos":
            break
    _finish(gen, pair, target_forwards, draft.forwards, time.perf_counter() - t_start, stopped,
            [] if on_round else gen.rounds)
    return gen


@torch.inference_mode()
def autoregressive_generate(pair, prompt: str | list[int], max_new_tokens: int = 64,
                            sampling: SamplingConfig | None = None, seed: int = 0) -> Generation:
    """The baseline: the target alone, one forward per token, with a KV cache. Same processing,
    same kind of seeded generator; its trace has no rounds."""
    settings = RunSettings(mode=AUTOREGRESSIVE, gamma=1, max_new_tokens=max_new_tokens,
                           sampling=sampling or SamplingConfig(), seed=seed)
    prompt_text, prompt_ids = pair.encode(prompt)
    check_request(pair, prompt_ids, settings)
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    target = KVCache(pair.target)
    gen = _new_generation(pair, prompt_text, prompt_ids, settings)
    context = list(prompt_ids)
    stopped = "max_new_tokens"
    step_seconds = 0.0   # time in target steps (forward, probabilities, the draw): the cost of a token
    t_start = time.perf_counter()
    while len(gen.token_ids) < max_new_tokens:
        t0 = time.perf_counter()
        p = logits_to_probs(align_logits(target.forward(context, [])[-1], pair.vocab_size), settings.sampling)
        tok = int(sample(p, generator))   # int() waits for the GPU: the step is over
        step_seconds += time.perf_counter() - t0
        gen.token_ids.append(tok)
        context.append(tok)
        if tok == pair.eos_token_id:
            stopped = "eos"
            break
    _sync(pair.device)
    n = len(gen.token_ids)
    gen.stats = tr.Stats(new_tokens=n, target_forwards=n, tokens_per_target_forward=1.0, verify_seconds=step_seconds,
                         wall_seconds=time.perf_counter() - t_start, stopped=stopped)
    gen.text = pair.decode(gen.token_ids)
    gen.token_text.update(pair.token_texts(set(gen.token_ids) | set(prompt_ids)))
    return gen


# ---------------------------------------------------------------- helpers

def _new_generation(pair, prompt_text, prompt_ids, settings: RunSettings) -> Generation:
    return Generation(prompt=prompt_text, prompt_ids=list(prompt_ids), token_ids=[], text="",
                      rounds=[], stats=tr.Stats(), settings=settings, models=pair.describe(),
                      eos_token_id=pair.eos_token_id)


def record_round(index: int, start: int, drafts: list[int], p, q, u, verdict, rule: Rule,
                 emitted: list[int], draft_s: float, verify_s: float) -> Round:
    """One verify step as a trace Round: sparse rows with exact tail masses.

    Batched (see `trace.keep_top`), in numpy on the host: the ids and values of every drafted
    position come from one pass over all rows, so recording costs a few array operations per
    round, not per token.
    """
    p, q = p.float().cpu().numpy(), q.float().cpu().numpy()
    g = len(drafts)
    n = int(verdict.n_accepted)
    rejected = bool(verdict.rejected)
    p_mass = p.sum(1, dtype=np.float64).tolist()
    q_mass = q.sum(1, dtype=np.float64).tolist()
    overlap = np.minimum(p[:g], q)                                   # min(p, q), exact in float32
    betas = overlap.sum(1, dtype=np.float64)
    # Bias of the skip rule here, in closed form on the full rows: TV(min(p,q) + (1-beta) p, p).
    skip_tv = (0.5 * np.abs(overlap - betas[:, None] * p[:g]).sum(1, dtype=np.float64)).tolist()
    betas = betas.tolist()
    p_draft, q_draft, ratio, u = verdict.p_draft.tolist(), verdict.q_draft.tolist(), verdict.ratio.tolist(), u.tolist()
    positions = []
    if g:
        kept, mask = tr.keep_top(p[:g], q, np.array(drafts))
        p_tail, q_tail = tr.tail_split([p[:g], q], p[:g], q, mask)
        for i, (tok, (ids, pv, qv)) in enumerate(zip(drafts, kept)):
            status = status_at(i, n)
            positions.append(Position(
                draft_token=tok, p_draft=p_draft[i], q_draft=q_draft[i], ratio=ratio[i], u=u[i], status=status,
                beta=betas[i], p=tr.dist(ids, pv, p_mass[i], p_tail[i]), q=tr.dist(ids, qv, q_mass[i], q_tail[i]),
                skip_tv=skip_tv[i]))
    end_dist = verdict.end_dist.float().cpu().numpy().reshape(1, -1)
    end_token = int(verdict.end_token)
    ending = Ending.of(g, rejected, rule)
    # Kept ids at the end position: top of the drawn distribution and of p, and the drawn token.
    [(ids, dv, pv)], mask = tr.keep_top(end_dist, p[n:n + 1], np.array([end_token]))
    end_total = float(end_dist.sum(dtype=np.float64))
    residual_mass = None
    if ending is Ending.RESIDUAL:
        residual_mass = float(np.maximum(p[n].astype(np.float64) - q[n], 0).sum())
    if rejected:   # the tail split by the sign of p - q, as at a drafted position
        [d_tail], [p_tail], [q_tail] = tr.tail_split([end_dist, p[n:n + 1], q[n:n + 1]], p[n:n + 1], q[n:n + 1], mask)
        end_parts = (tr.dist(ids, dv, end_total, d_tail), tr.dist(ids, pv, p_mass[n], p_tail),
                     tr.dist(ids, q[n, ids].tolist(), q_mass[n], q_tail))
    else:
        end_parts = (tr.dist(ids, dv, end_total), tr.dist(ids, pv, p_mass[n]), None)
    return Round(
        index=index, start=start, gamma=g, positions=positions, n_accepted=n, ending=ending,
        end_token=end_token, end_dist=end_parts[0], end_p=end_parts[1], end_q=end_parts[2],
        residual_mass=residual_mass, emitted=list(emitted), draft_seconds=draft_s, verify_seconds=verify_s)


def _finish(gen: Generation, pair, target_forwards, draft_forwards, wall, stopped, new_rounds) -> None:
    """Statistics, text and token texts of the run so far (at the end, or after a streamed
    round); `new_rounds` are the rounds whose token texts are not looked up yet."""
    gen.stats = tr.summarize(gen.rounds, len(gen.token_ids), target_forwards, draft_forwards, wall, stopped)
    gen.text = pair.decode(gen.token_ids)
    ids = set(gen.prompt_ids) | set(gen.token_ids)
    for r in new_rounds:
        ids |= {r.end_token, *r.end_dist.ids}
        for pos in r.positions:
            ids |= {pos.draft_token, *pos.p.ids}
    gen.token_text.update(pair.token_texts(ids - gen.token_text.keys()))
