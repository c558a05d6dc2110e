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
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from .drafters import align_logits
from .reduction import round_summary
from .sampling import DeviceSampling, SamplingConfig, Verdict, sample, verify
from .static_cache import Graphed, StaticFeatureNet, StaticModel, unsupported
from .trace import TOP_N

MAX_GRAPHS = 64   # captured graphs kept per pair (each width, rule and sampling shape needs its own)


@dataclass
class RoundResult:
    """What a round decided, on the host: the drafts, the verdict's two numbers, and (when traced)
    the summary of its rows (`reduction.round_summary`); the device's own draft and verify seconds."""

    drafts: list[int]
    n_accepted: int
    end_token: int
    summary: torch.Tensor | None
    seconds: tuple[float, float]


def _length_for(needed: int, context: int | None) -> int:
    """Cache slots for a run needing `needed` positions: a power of two (so a few sizes serve every
    request and their graphs are reused), at least 256, at most the models' context."""
    size = 256
    while size < needed:
        size *= 2
    return min(size, context) if context else size


class _Slots:
    """Static caches and every tensor a graph reads or writes, at fixed addresses, for runs of up
    to `length` positions and γ ≤ `gamma`."""

    def __init__(self, pair, length: int, gamma: int):
        dev = torch.device(pair.device)
        self.length, self.gamma, self.vocab = length, gamma, pair.vocab_size
        self.target = StaticModel(pair.target, length)
        self.draft = StaticModel(pair.draft, length) if pair.draft is not None else None
        self.t_in = torch.zeros(gamma + 1, dtype=torch.long, device=dev)   # verify: last token + drafts
        self.d_in = torch.zeros(2, dtype=torch.long, device=dev)           # draft step: 1 or 2 new tokens
        self.u_one = torch.zeros(1, dtype=torch.float64, device=dev)       # the uniform of one draw
        self.uniforms = torch.zeros(max(2 * gamma + 1, 64), dtype=torch.float64, device=dev)
        pin = dev.type == "cuda"
        self.uniforms_host = torch.zeros(self.uniforms.shape, dtype=torch.float64, pin_memory=pin)
        self.q_rows = torch.zeros(gamma, self.vocab, device=dev)
        self.drafts = torch.zeros(gamma, dtype=torch.long, device=dev)
        self.tokens = torch.zeros(64, dtype=torch.long, device=dev)       # target steps between syncs
        self.numbers = DeviceSampling(dev)   # temperature, k, p: graph inputs, so a slider move captures nothing
        self.graphs: dict[tuple, Graphed] = {}
        self.features: _FeatureSlots | None = None   # made by the first run with the features drafter


class _FeatureSlots:
    """What the features drafter's steps read and write: its net over a static cache of exact
    elements (element i = the target's rows at position i, fused, with token i + 1), the target's
    rows at every position (the verify writes those of its positions, at its start), the tokens of
    the elements a round feeds, and the drafter's latest feature, which the next drafting step reads."""

    def __init__(self, pair, length: int, gamma: int):
        from . import features as fx

        dev = torch.device(pair.device)
        self.net = fx.net_for(pair)
        self.layers = self.net.feature_layers
        self.model = StaticFeatureNet(self.net, length)
        self.rows = torch.zeros(length, self.net.row_width, device=dev)
        self.tokens = torch.zeros(gamma + 1, dtype=torch.long, device=dev)
        self.prev = torch.zeros(self.net.config.hidden_size, device=dev)
        self.embed = pair.target.get_input_embeddings()
        self.norm = pair.target.get_decoder().norm
        self.head = pair.target.get_output_embeddings()
        self.logits = fx.head_logits(self.head, pair.vocab_size, self.net.vocab)   # q through its vocabulary subset


class Engine:
    """A pair's static-cache engine (CUDA graphs when `graphs`).

    `capture` makes a step's graph from its function (default `Graphed`, CUDA only); a test gives
    an emulated capture to run the graph path on a CPU (tests/graph_emulation.py)."""

    def __init__(self, pair, graphs: bool, capture=None):
        self.pair = pair
        self.device = torch.device(pair.device)
        self.capture = capture or Graphed
        self.graphs = bool(graphs) and (self.device.type == "cuda" or capture is not None)
        self.failure: str | None = None     # why the latest failed capture failed
        self.failures: dict[tuple, str] = {}  # the steps that run without a graph, and why
        self.eager_steps = 0                # steps run without their graph because capture failed
        self.lock = threading.Lock()
        self._slots: _Slots | None = None
        self.t_valid = self.d_valid = 0     # cache positions that hold the current run's context
        self.f_valid = 0                    # exact elements in the features drafter's cache
        self.drafter = "model"              # the current run's: "model" or "features"

    @property
    def name(self) -> str:
        return getattr(self.capture, "label", "cuda graphs") if self.graphs else "static cache"

    def name_since(self, eager_steps: int) -> str:
        """What ran since `eager_steps` was read: the graphs, unless a step ran without its graph."""
        return self.name if self.eager_steps == eager_steps else "static cache (a graph capture failed)"

    # -------------------------------------------------------------- a run
    def start(self, needed: int, gamma: int, drafter: str = "model") -> None:
        """Prepare for a new run needing `needed` positions and drafting up to `gamma` tokens with
        the `drafter` ("model" or "features")."""
        s = self._slots
        if s is None or s.length < needed or s.gamma < gamma:
            length = _length_for(needed, self.pair.context_length)
            self._slots = None   # free the old caches and graphs first
            self._slots = s = _Slots(self.pair, length, max(gamma, 8))
        if drafter == "features" and s.features is None:
            s.features = _FeatureSlots(self.pair, s.length, s.gamma)
        self.drafter = drafter
        self.t_valid = self.d_valid = self.f_valid = 0

    def draftable(self, context: list[int], g: int) -> int:
        """How many of g drafts this round can draft: the features drafter none until a verify has
        given the target's rows up to the last kept position (a run's first round, the prompt's
        prefill), as the eager `FeaturesDrafter`, so that one seed gives the same draws on both."""
        if self.drafter == "features" and (len(context) < 2 or self.t_valid < len(context) - 1):
            return 0
        return g

    @property
    def _layers(self) -> tuple[int, ...] | None:
        """The feature rows the verify keeps (the features drafter's), or None."""
        return self._slots.features.layers if self.drafter == "features" else None

    @torch.inference_mode()
    def speculative_round(self, context: list[int], g: int, sampling: SamplingConfig, rule,
                          uniforms: torch.Tensor, stop=None, trace: bool = True) -> RoundResult | None:
        """Draft g tokens, verify them in one target forward, decide; one sync. `uniforms` [2g + 1]
        float64: the g draft draws, the g acceptance draws, the end token's draw. None if `stop`
        was set between forwards (the round's work is dropped)."""
        s, timer = self._slots, _Timer(self.device)
        last = len(context) - 1                        # the target's cache holds context[:last]
        shape = DeviceSampling.shape(sampling)
        s.numbers.set(sampling)
        self._upload(uniforms)
        self._catch_up(s.target, context, last, "t_valid")
        if g and self.drafter == "features":
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
        self._upload(uniforms)
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

    @torch.inference_mode()
    def costs(self, context: list[int], widths: list[int], sampling: SamplingConfig, repeats: int = 50) -> dict:
        """Median milliseconds, on this engine, of one draft step, one target step (the target
        alone's token), and one verify of each width (its test and residual included): the costs
        the bench, `gpu-check` and the speed explorer predict with. Each call is timed with a
        device sync around it."""
        from .sampling import Rule

        gamma = max(widths) - 1
        with self.lock:
            self.start(len(context) + gamma + 2, max(gamma, 1))
            s, last = self._slots, len(context) - 1
            self._catch_up(s.target, context, last, "t_valid")
            self._catch_up(s.draft, context, last, "d_valid")
            s.target.start.fill_(last)
            s.draft.start.fill_(last)
            for buf in (s.t_in, s.d_in, s.drafts):
                buf.fill_(context[-1])
            s.q_rows.fill_(1.0 / s.vocab)
            s.uniforms.fill_(0.5)
            s.u_one.fill_(0.5)
            s.numbers.set(sampling)
            shape = DeviceSampling.shape(sampling)
            timed = {"draft_step_ms": _median_ms(lambda: self._run(("draft", 1, shape), self._draft_fn),
                                                 repeats, self.device),
                     "target_step_ms": _median_ms(lambda: self._run(("step", shape), self._step_fn),
                                                  repeats, self.device)}
            by_width = {1: timed["target_step_ms"]}
            for w in widths:
                if w > 1:
                    key = ("verify", w - 1, shape, Rule.EXACT, False, None)
                    by_width[w] = _median_ms(lambda key=key: self._run(key, self._verify_fn), repeats, self.device)
            self.t_valid = self.d_valid = 0   # the timing wrote past the context: the next run starts afresh
        return {**timed, "target_ms_by_width": by_width,
                "c": timed["draft_step_ms"] / timed["target_step_ms"], "engine": self.name}

    # -------------------------------------------------------------- what the graphs hold
    def _draft_fn(self, key):
        _, width, shape = key
        s = self._slots

        def fn():
            logits = s.draft.forward(s.d_in[:width])[-1]
            q = s.numbers.probs(align_logits(logits, s.vocab), shape)
            return q, sample(q, uniforms=s.u_one)
        return fn

    def _features_fn(self, key):
        _, width, exact, shape = key
        s, f = self._slots, self._slots.features

        def fn():
            if exact:   # the kept positions' rows, as the target computed them
                feats = f.net.fused(f.rows.index_select(0, f.model.start + f.model.slots[:width]))
            else:       # the drafter's own feature from the step before
                feats = f.prev[None]
            feature = f.norm(f.model.forward(feats, f.embed(f.tokens[:width]))[-1])
            q = s.numbers.probs(f.logits(feature), shape)
            # The feature goes to `prev` outside the step: a step that read and wrote `prev` would
            # move it on at each of a capture's warm-up runs.
            return q, sample(q, uniforms=s.u_one), feature
        return fn

    def _verify_fn(self, key):
        _, g, shape, rule, trace, layers = key
        s = self._slots

        def fn():
            if layers is None:
                logits = s.target.forward(s.t_in[:g + 1])
            else:   # the features drafter's next round reads these positions' rows
                logits, rows = s.target.forward(s.t_in[:g + 1], layers=layers)
                s.features.rows.index_copy_(0, s.target.start + s.target.slots[:g + 1], rows)
            p = s.numbers.probs(align_logits(logits, s.vocab), shape)
            v: Verdict = verify(p, s.q_rows[:g], s.drafts[:g], s.uniforms[g:2 * g].float(), rule=rule,
                                end_uniform=s.uniforms[2 * g:2 * g + 1])
            # float64: the ids are exact in it, and so are the summary's float64 sums.
            head = torch.cat([torch.stack([v.n_accepted, v.end_token.reshape(())]), s.drafts[:g]]).double()
            if not trace:
                return head
            # The trace's rows reduced here, so the round's one copy moves O(g x TOP_N) numbers, not g x V.
            return torch.cat([head, round_summary(p, s.q_rows[:g], s.drafts[:g], v.end_dist, v.n_accepted,
                                                  v.end_token, TOP_N)])
        return fn

    def _step_fn(self, key):
        _, shape = key
        s = self._slots

        def fn():
            p = s.numbers.probs(align_logits(s.target.forward(s.t_in[:1]), s.vocab), shape)[0]
            return sample(p, uniforms=s.u_one)
        return fn

    # -------------------------------------------------------------- plumbing
    def _run(self, key: tuple, make):
        """The step `key` (captured as a graph on first use when graphs are on), run once. The
        cache keeps the MAX_GRAPHS most recently used; a step whose capture failed runs eagerly
        from then on (`failures`), and every other step keeps its graph."""
        s = self._slots
        if not self.graphs:
            return make(key)()
        graph = s.graphs.pop(key, None)
        if graph is None and key not in self.failures:
            if len(s.graphs) >= MAX_GRAPHS:
                s.graphs.pop(next(iter(s.graphs)))          # the least recently used
            try:
                graph = self.capture(make(key))
            except Exception as err:   # capture is not possible here (an op that syncs, ZeroGPU...)
                self.failure = self.failures[key] = f"{type(err).__name__}: {err}"[:300]
                while len(self.failures) > MAX_GRAPHS:
                    self.failures.pop(next(iter(self.failures)))
        if graph is None:
            self.eager_steps += 1
            return make(key)()
        s.graphs[key] = graph                               # now the most recently used
        return graph()

    def _upload(self, uniforms: torch.Tensor) -> None:
        """The uniforms of a round (or of a run of steps) in one host-to-device copy."""
        s, n = self._slots, len(uniforms)
        s.uniforms_host[:n].copy_(uniforms)
        s.uniforms[:n].copy_(s.uniforms_host[:n], non_blocking=True)

    def _catch_up(self, model: StaticModel, context: list[int], upto: int, valid: str) -> None:
        """Feed `model` (eagerly, one forward) the tokens of context[:upto] its cache lacks: the
        prompt at the start of a run."""
        have = getattr(self, valid)
        if have < upto:
            model.start.fill_(have)
            ids = torch.tensor(context[have:upto], device=self.device)
            if model is self._slots.target and self._layers is not None:   # the features drafter reads its rows
                self._slots.features.rows[have:upto] = model.forward(ids, keep=1, layers=self._layers)[1]
            else:
                model.forward(ids, keep=1)   # no logits wanted
            setattr(self, valid, upto)


class _Timer:
    """Seconds between marks: CUDA events on a GPU (no sync until the round's own), else the clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks = [self._now()]

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self) -> None:
        self.marks.append(self._now())

    def seconds(self) -> tuple[float, ...]:
        if self.cuda:
            return tuple(a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:]))
        return tuple(b - a for a, b in zip(self.marks, self.marks[1:]))


def _median_ms(fn, repeats: int, device: torch.device) -> float:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return sorted(times)[len(times) // 2]


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
