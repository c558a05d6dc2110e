"""How a round (or a run of target steps) is computed: the seam between the decoding loop and
the forwards.

Two ways, one interface, so `decoding` reads the same whatever runs underneath:

- eager: the drafter's `propose` and the target's forward over dynamic KV caches (`KVCache`),
  cropped to what was kept. The CPU path, and the fallback everywhere.
- engine: `engine.Engine`, static caches (and CUDA graphs on a GPU) with one host sync a round.

Both draw the round's randomness from the run's generator in the same order (the draft's draws,
then the acceptance uniforms, then the last token's draw), so one seed gives the same draws (and
the same tokens where both compute the same probabilities: on the CPU, not always on CUDA).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from ..core.registry import kind_of
from ..core.sampling import SamplingConfig, Verdict, logits_to_probs, sample, verify
from ..core.settings import RunSettings
from ..drafting.drafters import KVCache, align_logits, check_drafter, make_drafter
from ..engine.engine import engine_for, unsupported_by


@dataclass
class Step:
    """What one round's verify saw and decided: the drafts, p and q rows, the uniforms, the
    verdict, and the seconds spent drafting and verifying (p, q and the verdict are None when the
    round was not traced)."""

    drafts: list[int]
    p: torch.Tensor | None
    q: torch.Tensor | None
    u: torch.Tensor
    verdict: Verdict | None
    seconds: tuple[float, float]
    n_accepted: int
    end_token: int
    summary: torch.Tensor | None = None   # the engine's reduction of the rows (reduction.round_summary)
    vocab: int = 0

    def kept(self) -> list[int]:
        """The accepted drafts, then the token the round drew."""
        return self.drafts[:self.n_accepted] + [self.end_token]


def _sync(device) -> None:
    if torch.device(device).type == "cuda":   # honest timings: wait for queued GPU work
        torch.cuda.synchronize()


class TargetScorer:
    """The target's forward in an eager round: the uncached context and the drafts in one pass, as
    p rows [len(drafts) + 1, V] (row i scores the token after i drafts)."""

    def __init__(self, pair, features: tuple[int, ...] | None = None):
        self.cache = KVCache(pair.target)
        self.vocab_size = pair.vocab_size
        self.forwards = 0
        # Not None: keep the fed positions' feature rows, with the residual stream after these
        # layers (for the `features` drafter: `FeatureNet.feature_layers`).
        self.features = features
        self.fed: tuple[int, torch.Tensor] | None = None   # (first fed position, rows [n, row width])

    def probs(self, context: list[int], drafts: list[int], sampling: SamplingConfig) -> torch.Tensor:
        logits, hidden, start = self.cache.forward_features(context, drafts, self.features)
        self.fed = (start, hidden) if self.features is not None else None
        self.forwards += 1
        return logits_to_probs(align_logits(logits, self.vocab_size), sampling)


class EagerRounds:
    """Rounds over dynamic caches: the drafter proposes, the target scores, `verify` decides."""

    name = "eager"

    def __init__(self, pair, settings: RunSettings, prompt: list[int] = ()):
        """The run's own drafter, started on its `prompt` (token ids) and settings."""
        self.device = pair.device
        self.drafter = make_drafter(settings.drafter, pair)
        self.drafter.start(list(prompt), settings)
        reads = self.drafter.kind.reads_features   # then the verify keeps the rows its net reads (`observe`)
        self.target = TargetScorer(pair, features=self.drafter.net.feature_layers if reads else None)

    @property
    def target_forwards(self) -> int:
        return self.target.forwards

    @property
    def draft_forwards(self) -> int:
        return self.drafter.forwards

    def held(self, needed: int, gamma: int):
        return contextlib.nullcontext()

    def run(self, context, g, settings: RunSettings, generator, stop, trace: bool = True) -> Step | None:
        t0 = time.perf_counter()
        drafts, q = self.drafter.propose(context, g, settings.sampling, generator, stop=stop)
        _sync(self.device)
        if stop is not None and stop.is_set():
            return None
        t1 = time.perf_counter()
        p = self.target.probs(context, drafts, settings.sampling)          # ONE target forward: [len(drafts) + 1, V]
        u = torch.rand(len(drafts), generator=generator)
        verdict = verify(p, q.to(p.device), torch.tensor(drafts, dtype=torch.long, device=p.device), u.to(p.device),
                         generator=generator, rule=settings.rule)
        n, end = int(verdict.n_accepted), int(verdict.end_token)          # int() waits for the GPU
        if self.target.fed is not None:   # the features of the positions kept: the context and the accepted drafts
            start, hidden = self.target.fed
            self.drafter.observe(start, hidden[:len(context) + n - start])
        return Step(drafts, p, q, u, verdict, (t1 - t0, time.perf_counter() - t1), n, end, vocab=p.shape[-1])


class EngineRounds:
    """Rounds on the pair's static-cache engine (CUDA graphs on a GPU): one host sync a round."""

    def __init__(self, engine, features: bool = False):
        self.engine = engine
        self.features = features   # the features drafter's net drafts (it reads the verify's rows), not a draft model
        self.name = engine.name
        self.target_forwards = self.draft_forwards = 0

    @contextlib.contextmanager
    def held(self, needed: int, gamma: int):
        with self.engine.lock:   # the caches and graphs are the pair's: one run at a time
            self.engine.start(needed, gamma, features=self.features)
            mark = self.engine.eager_steps
            yield
            self.name = self.engine.name_since(mark)   # a capture failed mid-run: say what ran

    def run(self, context, g, settings: RunSettings, generator, stop, trace: bool = True) -> Step | None:
        g = self.engine.draftable(context, g)
        draws = torch.rand(g, generator=generator, dtype=torch.float64)   # the draft's draws, as `sample` takes them
        u = torch.rand(g, generator=generator)
        end = torch.rand(1, generator=generator, dtype=torch.float64)
        res = self.engine.speculative_round(context, g, settings.sampling, settings.rule,
                                            torch.cat([draws, u.double(), end]), stop, trace)
        if res is None:
            return None
        self.draft_forwards += g
        self.target_forwards += 1
        # The rows stayed on the device: only their summary came back (`res.summary`).
        return Step(res.drafts, None, None, u, None, res.seconds, res.n_accepted, res.end_token,
                    summary=res.summary, vocab=self.engine.pair.vocab_size)


class EagerSteps:
    """Target steps over a dynamic cache, one token (and one host read) at a time."""

    name = "eager"
    per_sync = 1

    def __init__(self, pair):
        self.target = TargetScorer(pair)

    @property
    def forwards(self) -> int:
        return self.target.forwards

    def held(self, needed: int):
        return contextlib.nullcontext()

    def run(self, context, k, sampling, generator) -> list[int]:
        return [int(sample(self.target.probs(context, [], sampling)[-1], generator))]


class EngineSteps:
    """Target steps on the pair's engine (graphed one-token steps on a GPU), a host read every
    `per_sync` tokens: the target alone at its fastest on this device."""

    per_sync = 8

    def __init__(self, engine):
        self.engine, self.name, self.forwards = engine, engine.name, 0

    @contextlib.contextmanager
    def held(self, needed: int):
        with self.engine.lock:
            self.engine.start(needed, 1)
            mark = self.engine.eager_steps
            yield
            self.name = self.engine.name_since(mark)

    def run(self, context, k, sampling, generator) -> list[int]:
        self.forwards += k
        draws = torch.rand(k, generator=generator, dtype=torch.float64)
        return self.engine.target_steps(context, k, sampling, draws)


def rounds_for(pair, settings: RunSettings, prompt: list[int] = ()):
    """The rounds of a speculative run over `prompt` (token ids): on the pair's engine when it has
    one and the drafter's kind runs there (a model: the draft model, or the features drafter's net,
    whose rows the verify graph writes), else eager (the n-gram drafter has no model to put in a graph)."""
    kind = kind_of(settings.drafter)
    check_drafter(settings.drafter, pair)   # a pair that lacks what the drafter needs is told so before any run
    engine = engine_for(pair) if kind.on_engine else None
    if engine is not None:
        return EngineRounds(engine, features=kind.reads_features)
    rounds = EagerRounds(pair, settings, prompt)
    rounds.name = _eager_name(pair)
    return rounds


def steps_for(pair):
    engine = engine_for(pair)
    if engine is not None:
        return EngineSteps(engine)
    steps = EagerSteps(pair)
    steps.name = _eager_name(pair)
    return steps


def _eager_name(pair) -> str:
    """"eager", and why, when the pair asked for the engine and its models cannot run on it."""
    why = unsupported_by(pair) if getattr(pair, "engine", "eager") in ("graphs", "static") else None
    return f"eager (the static engine cannot hold {why})" if why else "eager"
