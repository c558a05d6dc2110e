"""Speculative and autoregressive decoding over a `ModelPair`, writing a `Generation` trace.

The loop, top to bottom: the drafter proposes up to gamma tokens with their q rows; ONE target
forward over (uncached context + drafts) gives the gamma + 1 p rows (`TargetScorer`); `verify`
accepts a prefix and draws the round's last token; both KV caches are cut back to what was kept
(lazily, at the next forward, see `drafters.KVCache`). All randomness comes from one
`torch.Generator` seeded with the run's seed: the same seed gives the same trace, and no global
RNG state is touched.

Every entry takes one `RunSettings`. A `stop` (a `threading.Event`, or a `StopSignal` that also
carries a deadline and says why) is checked before every forward, the drafter's included: a
stopped run returns what its finished rounds emitted, with `stats.stopped` saying why.

For models this small the Python work around the two forwards costs as much as a forward, so
the loop keeps it small: the trace of a round is recorded with a few batched tensor ops, and the
statistics are tallied one round at a time (`trace.Tally`). A caller that streams rounds
(`on_round`) also gets the text and the token texts extended as the run goes; otherwise they are
derived once at the end.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

import torch

from ..core.registry import kind_of
from ..core.sampling import Rule
from ..core.settings import AUTOREGRESSIVE, RunSettings
from ..core.threads import run_threads, threads_for_model
from ..drafting import features as fx
from ..drafting.drafters import check_drafter
from ..trace import spine as tr
from ..trace.recording import BATCH_BYTES, Pending, mark_outside, record
from ..trace.spine import Generation, Round
from .rounds import _sync as _sync
from .rounds import rounds_for, steps_for

STOPPED, TIME_LIMIT = "stopped", "time limit"   # why a run stopped early (stats.stopped)


# ---------------------------------------------------------------- stopping

class StopSignal:
    """A `threading.Event` that says why it was set, and may carry a deadline (`seconds` from now):
    past it, `is_set()` is true and the reason is "time limit". The decoders check it between
    forwards; a visitor's Stop (or a closed page) sets it with the reason "stopped"."""

    def __init__(self, seconds: float | None = None):
        self._event = threading.Event()
        self.reason: str | None = None
        self.deadline = time.monotonic() + seconds if seconds is not None else None

    def set(self, reason: str = STOPPED) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        if self.deadline is not None and not self._event.is_set() and time.monotonic() >= self.deadline:
            self.set(TIME_LIMIT)
        return self._event.is_set()


def stop_reason(stop) -> str | None:
    """Why `stop` (None, a threading.Event or a StopSignal) asks the run to end, or None."""
    if stop is None or not stop.is_set():
        return None
    return getattr(stop, "reason", None) or STOPPED


def check_request(pair, prompt_ids: list[int], settings: RunSettings) -> None:
    """Refuse a bad request up front with a message that names what is wrong (ValueError)."""
    if not prompt_ids:
        raise ValueError("the prompt is empty: type at least one word")
    settings.validate()
    if settings.speculative:
        check_drafter(settings.drafter, pair)
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


# ---------------------------------------------------------------- the decoders

def _in_threads(generate):
    """`generate` with the calling thread's torch threads set by the policy (`core.threads`) on a CPU;
    the count is recorded in the trace (`models.threads`)."""
    @functools.wraps(generate)
    def run(pair, *args, **kwargs):
        if not str(pair.device).startswith("cpu"):
            return generate(pair, *args, **kwargs)
        n = threads_for_model(pair.target)
        with run_threads(n):
            gen = generate(pair, *args, **kwargs)
        gen.models["threads"] = n
        return gen
    return run


@_in_threads
@torch.inference_mode()
def speculative_generate(pair, prompt: str | list[int], settings: RunSettings | None = None, *,
                         on_round: Callable[[Round, Generation], None] | None = None,
                         stream_every: float = 0.0, stop=None, trace: bool = True) -> Generation:
    """Generate with speculative sampling and return the full trace.

    `settings` (default `RunSettings()`) say what to run; under `Rule.SKIP_ADJUSTMENT` a rejection
    samples from p instead of the residual: the deliberately biased shortcut the app lets learners
    try. `on_round(round, generation_so_far)` is called after every round with the new round; the
    generation's stats, text and token texts are brought up to date first (the app streams from
    it). With `stream_every` (seconds), it is called after the first round, then after the first
    round that ends that long after the last call, with the latest round; the rounds between are
    recorded in one batch, as an unstreamed run's are (a round recorded alone costs a fast model's
    run about 6 %: the page shows a stream a few times a second, not every round). The returned
    generation is the same either way. `stop` is checked before every forward (see the module
    docstring). trace=False records no rounds, only counts and times (the bench measures what
    tracing costs with it).
    """
    settings = settings or RunSettings()
    gen, context = _start(pair, prompt, settings)
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    rounds = rounds_for(pair, gen.settings, context)   # its chat resolved for this pair
    outside = inside = None   # the features drafter's vocabulary (mask, ids) when its q reads a subset
    if kind_of(settings.drafter).reads_features:   # which of the target's layers its q read (the page says so)
        net = fx.net_for(pair)
        gen.models["feature_layers"] = list(net.feature_layers)
        if net.vocab is not None:   # q reads a vocabulary subset (the step viewer says how much p lies outside)
            gen.models["draft_vocab"] = len(net.vocab)
            outside = fx.outside_vocab(net, pair.vocab_size, pair.device)   # `round_summary` sums p over it
            inside = frozenset(net.vocab.tolist())   # which stored ids are outside (`mark_outside`)
    tally, text = tr.Tally(), _Text(pair) if on_round else None
    pending: list[Pending] = []
    ending = None
    # When on_round was last called, the tokens emitted since, and how many rounds it has shown.
    streamed, unstreamed, streamed_rounds = None, [], 0
    t_start = time.perf_counter()
    with rounds.held(len(context) + settings.max_new_tokens + settings.gamma + 1, settings.gamma):
        while ending is None:
            # Never draft past the end: the round's own last token fills the final slot.
            g = min(settings.gamma, settings.max_new_tokens - len(gen.token_ids) - 1)
            step = rounds.run(context, g, settings, generator, stop, trace)
            if step is None:   # stopped between forwards: the round is dropped, its output never was
                ending = stop_reason(stop)
                break
            emitted, ending = _emit(gen.token_ids, step.kept(), settings.max_new_tokens, pair.eos_token_id)
            context.extend(emitted)
            if not trace:
                tally.count(len(step.drafts), step.n_accepted, step.seconds)
                continue
            pending.append(Pending.of(len(gen.rounds) + len(pending), len(gen.token_ids) - len(emitted), step,
                                      emitted, outside))
            due = False
            if on_round is not None:
                unstreamed += emitted
                due = streamed is None or time.perf_counter() - streamed >= stream_every
            if due or sum(r.nbytes for r in pending) > BATCH_BYTES:
                _record(gen, tally, pending, settings.rule, inside)
            if due:
                gen.stats = tally.stats(len(gen.token_ids), rounds.target_forwards, rounds.draft_forwards,
                                        time.perf_counter() - t_start, ending or "")
                gen.text = text.extend(unstreamed)
                _note_token_texts(gen, pair, gen.rounds[streamed_rounds:])
                on_round(gen.rounds[-1], gen)
                streamed, unstreamed, streamed_rounds = time.perf_counter(), [], len(gen.rounds)
    gen.models["engine"] = rounds.name            # read after the run: what ran, not what was meant to
    _record(gen, tally, pending, settings.rule, inside)   # the rounds nobody streamed, in one batch
    gen.stats = tally.stats(len(gen.token_ids), rounds.target_forwards, rounds.draft_forwards,
                            time.perf_counter() - t_start, ending)
    _finish_text(gen, pair, gen.rounds[streamed_rounds:])
    return gen


@_in_threads
@torch.inference_mode()
def autoregressive_generate(pair, prompt: str | list[int], settings: RunSettings | None = None, *,
                            stop=None) -> Generation:
    """The baseline: the target alone, one forward per token, with a KV cache. Same processing,
    same kind of seeded generator (the settings' length, sampling and seed; gamma, rule and
    drafter do not apply); its trace has no rounds. `stop` is checked before every forward (every
    few steps on the CUDA engine, which syncs once per few steps). It runs on the pair's engine,
    like the speculative decoder: a comparison of the two is like for like."""
    s = settings or RunSettings()
    settings = RunSettings(mode=AUTOREGRESSIVE, gamma=1, max_new_tokens=s.max_new_tokens, sampling=s.sampling,
                           seed=s.seed, chat=s.chat)
    gen, context = _start(pair, prompt, settings)
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    steps = steps_for(pair)
    ending = None
    step_seconds = 0.0   # time in target steps (forward, probabilities, the draw): the cost of a token
    t_start = time.perf_counter()
    with steps.held(len(context) + settings.max_new_tokens + 1):
        while ending is None:
            ending = stop_reason(stop)
            if ending is not None:
                break
            t0 = time.perf_counter()
            k = min(steps.per_sync, settings.max_new_tokens - len(gen.token_ids))
            toks = steps.run(context, k, settings.sampling, generator)   # returns on the host: the steps are over
            step_seconds += time.perf_counter() - t0
            emitted, ending = _emit(gen.token_ids, toks, settings.max_new_tokens, pair.eos_token_id)
            context.extend(emitted)
    _sync(pair.device)
    gen.models["engine"] = steps.name
    n = len(gen.token_ids)
    gen.stats = tr.Stats(new_tokens=n, target_forwards=steps.forwards,
                         tokens_per_target_forward=n / steps.forwards if steps.forwards else 0.0,
                         verify_seconds=step_seconds, wall_seconds=time.perf_counter() - t_start, stopped=ending)
    _finish_text(gen, pair, [])
    return gen


# ---------------------------------------------------------------- one round

def _emit(tokens: list[int], decided: list[int], max_new_tokens: int, eos: int | None
          ) -> tuple[list[int], str | None]:
    """Append the round's decided tokens to `tokens` up to EOS or max_new_tokens: (what was
    emitted, why the run ends or None)."""
    emitted = []
    for tok in decided:
        if len(tokens) >= max_new_tokens:
            break
        emitted.append(tok)
        tokens.append(tok)
        if tok == eos:
            return emitted, "eos"
    return emitted, "max_new_tokens" if len(tokens) >= max_new_tokens else None


# ---------------------------------------------------------------- the run's record

def _record(gen: Generation, tally: tr.Tally, pending: list[Pending], rule: Rule,
            inside: frozenset[int] | None = None) -> None:
    """Record the pending rounds into the trace and the tally (emptying `pending`); with `inside`
    (a drafter's vocabulary subset) each position notes its stored ids outside it."""
    rounds = record(pending, rule)
    if inside is not None:
        mark_outside(rounds, inside)
    for rnd in rounds:
        gen.rounds.append(rnd)
        tally.add(rnd)
    pending.clear()


def _start(pair, prompt, settings: RunSettings) -> tuple[Generation, list[int]]:
    """The empty trace of a checked request, and the context the loop extends. The trace records
    whether the prompt was read as a chat turn (`settings.chat` resolved for this pair)."""
    settings = settings.with_(chat=pair.uses_chat(prompt, settings.chat))
    prompt_text, prompt_ids = pair.encode(prompt, settings.chat)
    check_request(pair, prompt_ids, settings)
    gen = Generation(prompt=prompt_text, prompt_ids=list(prompt_ids), token_ids=[], text="", rounds=[],
                     stats=tr.Stats(), settings=settings, models=pair.describe(), eos_token_id=pair.eos_token_id)
    return gen, list(prompt_ids)


class _Text:
    """The generated text, extended as tokens come: each round decodes its new tokens with a few
    before them (a character split across tokens comes out whole), never the whole output."""

    def __init__(self, pair):
        self.pair, self.ids, self.text = pair, [], ""
        self.window = self.read = 0   # decode from ids[window:]; ids[:read] are in the text

    def extend(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        before = self.pair.decode(self.ids[self.window:self.read])
        after = self.pair.decode(self.ids[self.window:])
        if len(after) > len(before) and not after.endswith("\ufffd"):   # a split character waits for its rest
            self.text += after[len(before):]
            self.window, self.read = self.read, len(self.ids)
        return self.text


def _note_token_texts(gen: Generation, pair, rounds: list[Round]) -> None:
    """Look up the texts of the ids these rounds show (and of the prompt and output so far)."""
    ids = set(gen.prompt_ids) | set(gen.token_ids)
    for r in rounds:
        ids |= {r.end_token, *r.end_dist.ids}
        for pos in r.positions:
            ids |= {pos.draft_token, *pos.p.ids}
    gen.token_text.update(pair.token_texts(ids - gen.token_text.keys()))


def _finish_text(gen: Generation, pair, rounds: list[Round]) -> None:
    """The exact text of the whole output (one decode), and the token texts not looked up yet."""
    gen.text = pair.decode(gen.token_ids)
    _note_token_texts(gen, pair, rounds)
