"""The engine's steps and their graphs: what each step computes (the functions a CUDA graph
captures: a draft step, a features-drafter step, a verify with its test inside, a target step),
over which buffers (`slots`, made here so that new buffers drop the old graphs with them),
and how it runs: captured on first use when graphs are on, kept among the MAX_GRAPHS most recently
used, and run eagerly from then on where its capture failed (`failures`). `engine.Engine` runs
rounds out of these steps."""

from __future__ import annotations

import torch

from ..core.sampling import Verdict, sample, verify
from ..drafting.drafters import align_logits
from ..trace.reduction import round_summary
from ..trace.spine import TOP_N
from .slots import FeatureSlots, Slots, length_for
from .static_cache import Graphed

MAX_GRAPHS = 64   # captured graphs kept per pair (each width, rule and sampling shape needs its own)


class StepGraphs:
    """A pair's steps over its buffers (`_slots`, made at a run's `start`), as CUDA graphs when
    `graphs`.

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
        self._slots: Slots | None = None

    def _make_slots(self, needed: int, gamma: int, features: bool) -> None:
        """Buffers for runs of `needed` positions drafting up to `gamma` tokens (with the features
        drafter's when `features`): the current ones if large enough, else new ones."""
        s = self._slots
        if s is None or s.length < needed or s.gamma < gamma:
            length = length_for(needed, self.pair.context_length)
            self._slots = None   # free the old caches and graphs first
            self._slots = s = Slots(self.pair, length, max(gamma, 8))
        if features and s.features is None:
            s.features = FeatureSlots(self.pair, s.length, s.gamma)

    @property
    def name(self) -> str:
        return getattr(self.capture, "label", "cuda graphs") if self.graphs else "static cache"

    def name_since(self, eager_steps: int) -> str:
        """What ran since `eager_steps` was read: the graphs, unless a step ran without its graph."""
        return self.name if self.eager_steps == eager_steps else "static cache (a graph capture failed)"

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
            outside = s.features.outside if layers is not None else None   # a features drafter's subset
            return torch.cat([head, round_summary(p, s.q_rows[:g], s.drafts[:g], v.end_dist, v.n_accepted,
                                                  v.end_token, TOP_N, outside)])
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
