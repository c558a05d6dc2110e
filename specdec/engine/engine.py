"""The static-cache engine: a speculative round, or a run of target steps, with ONE host sync.

On a GPU a small model's forward is set by kernel launches and host round trips, not by its
arithmetic. So here, per pair: both models keep a static KV cache (`static_cache.StaticModel`);
the draft's one-token step and the target's verify over γ + 1 tokens are each captured once as a
CUDA graph (lazily, per width, rule and sampling shape: temperature, k and p are device tensors
the graph reads, so moving a slider captures nothing new) with the sampling, the acceptance test
and the residual inside; a round's uniforms go up in one copy and its results (and, traced, the
rows reduced on the device to what the trace keeps: `reduction`) come back in one. Rejected
drafts cost no copy: the next forward's start position says what the cache keeps.

The same code runs without graphs (each step called eagerly on the static cache): that is how it
is tested on a CPU, where it must equal the dynamic-cache decoder, and what runs on CUDA when a
graph cannot be captured (`Engine.failure` says why). Randomness is drawn from the run's CPU
generator in exactly the order the eager decoder draws it, so one seed gives the same draws on
every path. The same tokens follow where the paths compute the same probabilities: on the CPU the
static and the dynamic cache agree (tests/test_engine.py), and a graph replays its step's own
kernels; but on CUDA static and dynamic attention round differently, so there a seed's tokens
can differ between the eager decoder and this engine.

One run at a time per pair (`Engine.lock`): the caches and graphs are the pair's, not the run's.

Four parts, one module each: `Engine` here runs rounds (and the target alone's steps);
`graphs` holds the steps it runs and captures their graphs; `slots` holds the
buffers they read and write; `costs` times the steps (the costs the bench predicts with).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from ..core.sampling import DeviceSampling, SamplingConfig
from .costs import Timer, step_costs
from .graphs import StepGraphs
from .static_cache import StaticModel, unsupported


@dataclass
class RoundResult:
    """What a round decided, on the host: the drafts, the verdict's two numbers, and (when traced)
    the summary of its rows (`reduction.round_summary`); the device's own draft and verify seconds."""

    drafts: list[int]
    n_accepted: int
    end_token: int
    summary: torch.Tensor | None
    seconds: tuple[float, float]


class Engine(StepGraphs):
    """A pair's static-cache engine (CUDA graphs when `graphs`): a run's rounds, or the target
    alone's steps, out of its steps (`graphs.StepGraphs`: what each computes, and its graph),
    with what its caches hold of the current run's context."""

    def __init__(self, pair, graphs: bool, capture=None):
        super().__init__(pair, graphs, capture)
        self.lock = threading.Lock()
        self.t_valid = self.d_valid = 0     # cache positions that hold the current run's context
        self.f_valid = 0                    # exact elements in the features drafter's cache
        self.features = False               # the current run drafts with the features net, not the draft model

    # -------------------------------------------------------------- a run
    def start(self, needed: int, gamma: int, features: bool = False) -> None:
        """Prepare for a new run needing `needed` positions and drafting up to `gamma` tokens with
        the draft model, or with the features drafter's net when `features`."""
        self._make_slots(needed, gamma, features=features)
        self.features = features
        self.t_valid = self.d_valid = self.f_valid = 0

    def draftable(self, context: list[int], g: int) -> int:
        """How many of g drafts this round can draft: the features drafter none until a verify has
        given the target's rows up to the last kept position (a run's first round, the prompt's
        prefill), as the eager `FeaturesDrafter`, so that one seed gives the same draws on both."""
        if self.features and (len(context) < 2 or self.t_valid < len(context) - 1):
            return 0
        return g

    @property
    def _layers(self) -> tuple[int, ...] | None:
        """The feature rows the verify keeps (the features drafter's), or None."""
        return self._slots.features.layers if self.features else None

    @torch.inference_mode()
    def speculative_round(self, context: list[int], g: int, sampling: SamplingConfig, rule,
                          uniforms: torch.Tensor, stop=None, trace: bool = True) -> RoundResult | None:
        """Draft g tokens, verify them in one target forward, decide; one sync. `uniforms` [2g + 1]
        float64: the g draft draws, the g acceptance draws, the end token's draw. None if `stop`
        was set between forwards (the round's work is dropped)."""
        s, timer = self._slots, Timer(self.device)
        last = len(context) - 1                        # the target's cache holds context[:last]
        shape = DeviceSampling.shape(sampling)
        s.numbers.set(sampling)
        s.upload(uniforms)
        self._catch_up(s.target, context, last, "t_valid")
        if g and self.features:
            if not self._draft_features(context, g, shape, stop):
                return None
        # The draft: feed what its cache lacks (1 token, or 2 after a round that accepted every draft).
        elif g:
            self._catch_up(s.draft, context, last - 1, "d_valid")
            feed = context[self.d_valid:last + 1]
            position = self.d_valid
            for i, tok in enumerate(feed):
                s.d_in[i].fill_(tok)
            for i in range(g):
                if stop is not None and stop.is_set():
                    return None
                s.draft.start.fill_(position)
                s.u_one.copy_(s.uniforms[i:i + 1])
                q, tok = self._run(("draft", len(feed) if i == 0 else 1, shape), self._draft_fn)
                s.q_rows[i].copy_(q)
                s.drafts[i].copy_(tok)
                s.d_in[0].copy_(tok)
                position += len(feed) if i == 0 else 1
            self.d_valid = last + g                     # the last draft is never fed to the draft
        if stop is not None and stop.is_set():
            return None
        timer.mark()
        s.t_in[0].fill_(context[-1])
        s.t_in[1:g + 1].copy_(s.drafts[:g])
        s.target.start.fill_(last)
        packed = self._run(("verify", g, shape, rule, trace, self._layers), self._verify_fn)
        timer.mark()
        # The round's one host sync. A copy even on a CPU: a graph's output is overwritten by its
        # next replay, and the trace keeps this round's summary until its batch is recorded.
        host = packed.to("cpu", copy=True)
        n, end = int(host[0]), int(host[1])
        drafts = host[2:2 + g].long().tolist()
        self.t_valid = last + 1 + n
        self.d_valid = min(self.d_valid, last + 1 + n) if g else self.d_valid
        summary = host[2 + g:] if trace else None
        return RoundResult(drafts, n, end, summary, timer.seconds())

    def _draft_features(self, context: list[int], g: int, shape, stop) -> bool:
        """The features drafter's g drafts into q_rows and drafts (False if `stop` was set): first
        feed the exact elements its cache lacks (the kept positions' rows, which the verify wrote,
        with the tokens after them; after the prompt, all but the last in one eager forward), then
        one element a step from its own feature and the token just drafted. The drafted elements'
        keys lie past `f_valid`, so the next round's writes replace them (nothing to crop)."""
        s, f = self._slots, self._slots.features
        last = len(context) - 1                       # elements 0 .. last - 1 are exact
        first = self.f_valid
        if last - first > s.gamma + 1:                # the prompt: one forward, no graph for its width
            f.model.start.fill_(first)
            ids = torch.tensor(context[first + 1:last], device=self.device)
            f.model.forward(f.net.fused(f.rows[first:last - 1]), f.embed(ids))
            first = last - 1
        for i, tok in enumerate(context[first + 1:last + 1]):
            f.tokens[i].fill_(tok)
        width = last - first
        for i in range(g):
            if stop is not None and stop.is_set():
                return False
            f.model.start.fill_(first if i == 0 else last + i - 1)
            s.u_one.copy_(s.uniforms[i:i + 1])
            q, tok, feature = self._run(("features", width if i == 0 else 1, i == 0, shape), self._features_fn)
            f.prev.copy_(feature)
            s.q_rows[i].copy_(q)
            s.drafts[i].copy_(tok)
            f.tokens[0].copy_(tok)
        self.f_valid = last
        return True

    @torch.inference_mode()
    def target_steps(self, context: list[int], k: int, sampling: SamplingConfig,
                     uniforms: torch.Tensor) -> list[int]:
        """k plain target steps after `context` (the target alone), one sync at the end; k ≤ 64."""
        s = self._slots
        last = len(context) - 1
        s.numbers.set(sampling)
        s.upload(uniforms)
        self._catch_up(s.target, context, last, "t_valid")
        s.t_in[0].fill_(context[-1])
        for i in range(k):
            s.target.start.fill_(last + i)
            s.u_one.copy_(s.uniforms[i:i + 1])
            tok = self._run(("step", DeviceSampling.shape(sampling)), self._step_fn)
            s.t_in[0].copy_(tok)
            s.tokens[i].copy_(tok)
        self.t_valid = last + k
        return s.tokens[:k].tolist()                   # the one host sync

    def costs(self, context: list[int], widths: list[int], sampling: SamplingConfig, repeats: int = 50) -> dict:
        """Median milliseconds of one draft step, one target step and one verify of each width on
        this engine: the costs the bench, `gpu-check` and the speed explorer predict with
        (`costs.step_costs`)."""
        return step_costs(self, context, widths, sampling, repeats)

    def _catch_up(self, model: StaticModel, context: list[int], upto: int, valid: str) -> None:
        """Feed `model` (eagerly, one forward: `Slots.feed`) the tokens of context[:upto] its cache
        lacks: the prompt at the start of a run."""
        have = getattr(self, valid)
        if have < upto:
            self._slots.feed(model, context[have:upto], have, self._layers)
            setattr(self, valid, upto)


def unsupported_by(pair) -> str | None:
    """Why the pair's models cannot run on this engine (then they run eagerly), or None; worked
    out once and kept on the pair."""
    if not hasattr(pair, "_engine_unsupported"):
        models = [m for m in (pair.target, pair.draft) if m is not None]
        pair._engine_unsupported = next((why for why in map(unsupported, models) if why), None)
    return pair._engine_unsupported


def engine_for(pair) -> Engine | None:
    """The pair's engine for its `engine` setting ("graphs", "static"; None for the eager,
    dynamic-cache path, and for models it cannot hold: `unsupported_by`), made once and kept on
    the pair."""
    kind = getattr(pair, "engine", "eager")
    if kind not in ("graphs", "static") or unsupported_by(pair):
        return None
    engine = getattr(pair, "_engine", None)
    if engine is None:
        engine = pair._engine = Engine(pair, graphs=kind == "graphs")
    return engine
