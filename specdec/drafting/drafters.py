"""Drafters: whatever proposes tokens for the target to verify.

One small interface (like transformers' `CandidateGenerator`), so the decoder never branches on
the kind of drafter: `propose` returns the drafted tokens and the distribution q each was drawn
from. q is the draft distribution after the same processing as p (temperature, top-k, top-p). A
drafter that runs a model checks `stop` before each of its forwards and returns what it has.

A drafter is one class: its `kind` (`specdec.core.registry.DrafterKind`) says what the rest of the
code asks about it, `build(pair)` makes one for a pair, and `@register` puts it in the one registry
(the settings, the page, the CLI and the bench read their choices there). Adding a drafter is its
class (here or in a module of its own that this package's `__init__` imports), its `@register`
line and its tests.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch

from ..core.registry import (
    FEATURES,
    MODEL,
    NGRAM,
    DrafterKind,
    by_preference,
    class_of,
    kind_of,
    lacks_draft_model,
    register,
    runnable,
)
from ..core.sampling import SamplingConfig, logits_to_probs, sample
from ..core.settings import RunSettings
from . import features as fx


class Drafter(Protocol):
    """What the rounds ask of a drafter.

    One drafter is built per run (`make_drafter`, when the run's rounds are made), so what it keeps
    (a KV cache, an index over the context) is that run's alone. `start` is called once, before the
    first `propose`, with the run's prompt ids and its settings: a drafter that reads the prompt
    reads it there, not on its first `propose`. Then `propose` once per round, each time with the
    whole context so far (the prompt and every kept token). Where a run goes on the pair's engine
    (a kind with `on_engine`, on a pair that has one), the engine drafts with the same model on its
    static caches and no drafter is built (`decoding.rounds.rounds_for`).
    """

    kind: ClassVar[DrafterKind]   # its name and what it needs (`specdec.core.registry`)
    forwards: int   # model forward passes spent so far

    @classmethod
    def build(cls, pair) -> Drafter:
        """A new drafter for one run on `pair` (which `check_drafter` found can run it)."""
        ...

    @property
    def name(self) -> str: ...

    def start(self, prompt: list[int], settings: RunSettings) -> None:
        """The run begins: its prompt (token ids) and its settings."""
        ...

    def propose(self, context: list[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator, stop=None) -> tuple[list[int], torch.Tensor]:
        """Up to `gamma` drafted tokens after `context`, and q: [len(drafts), V] float32 rows.
        `stop` (a threading.Event, or None): when set, return the drafts so far."""
        ...


class BaseDrafter:
    """What every drafter shares: its name from its kind, no model forward yet, nothing to do at the
    start of a run. A drafter need not derive from it; it only has to answer as `Drafter` does."""

    kind: ClassVar[DrafterKind]
    forwards = 0

    @property
    def name(self) -> str:
        return self.kind.name

    def start(self, prompt: list[int], settings: RunSettings) -> None:
        pass


class KVCache:
    """A model's DynamicCache plus the token ids it holds, so it can be cut back to the longest
    prefix it shares with a new context (`DynamicCache.crop` does the cutting)."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []

    def forward(self, context: list[int], extra: list[int]) -> torch.Tensor:
        """Logits [len(extra) + 1, V] scoring the token after context[-1] and after each of `extra`.

        Feeds the model only the tokens the cache lacks, after cropping the cache to the
        longest common prefix (tokens rejected in an earlier round are dropped here).
        """
        return self.forward_features(context, extra, layers=None)[0]

    def forward_features(self, context: list[int], extra: list[int], layers: tuple[int, ...] | None = ()):
        """(logits [len(extra) + 1, V], the fed positions' feature rows [n, d * (1 + len(layers))] or
        None, the first fed position): `forward`, plus the model's post-norm last hidden state (and
        its residual stream after each of `layers`) at every position it fed: what the `features`
        drafter reads (see `specdec.drafting.features.forward_with_features`). `layers` None: no rows."""
        tokens = context + extra
        keep = common_prefix(self.ids, tokens)
        keep = min(keep, len(tokens) - len(extra) - 1)   # always feed context[-1] to get its logits
        if keep < len(self.ids):
            self.cache.crop(keep - len(self.ids))         # transformers 5: negative = drop that many
            self.ids = self.ids[:keep]
        feed = tokens[keep:]
        device = next(self.model.parameters()).device
        ids = torch.tensor([feed], device=device)
        if layers is not None:
            logits, hidden = fx.forward_with_features(self.model, ids, self.cache, layers)
            hidden = hidden[0]
        else:
            logits, hidden = self.model(ids, past_key_values=self.cache, use_cache=True).logits, None
        self.ids = tokens
        return logits[0, -(len(extra) + 1):], hidden, keep


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix. The usual case, `a` a prefix of `b`, is one list
    comparison in C: this runs before every forward, so it must not walk the context in Python."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n   # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect on slice equality
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@register
class ModelDrafter(BaseDrafter):
    """A small causal LM drafting autoregressively with its own KV cache."""

    kind = MODEL

    @classmethod
    def build(cls, pair) -> ModelDrafter:
        return cls(pair.draft, pair.vocab_size)

    def __init__(self, model, vocab_size: int):
        self.model = model
        self.vocab_size = vocab_size
        self.cache = KVCache(model)
        self.forwards = 0

    @torch.inference_mode()
    def propose(self, context, gamma, sampling, generator, stop=None):
        drafts: list[int] = []
        rows = []
        for _ in range(gamma):
            if stop is not None and stop.is_set():
                break
            logits = self.cache.forward(context + drafts, [])[-1]
            self.forwards += 1
            q = logits_to_probs(align_logits(logits, self.vocab_size), sampling)
            drafts.append(int(sample(q, generator)))
            rows.append(q)
        if not rows:
            return [], torch.zeros(0, self.vocab_size)
        return drafts, torch.stack(rows)


@register
class NgramDrafter(BaseDrafter):
    """Prompt lookup: find the latest earlier occurrence of the context's last n tokens
    (n = max_ngram down to 1) and propose the tokens that followed it.

    Its q is one-hot on each proposed token (the drafter is deterministic), so a draft is
    accepted with probability p(x) and a rejection resamples from p with x removed: exact.
    (romsto's n-gram drafter samples differently; we keep q honest instead.)

    It never proposes a special token (`special`: the tokenizer's, such as a chat template's
    <|im_start|> and <|im_end|>): copied from a prompt's template they are no guess at an answer
   . A proposal stops before the first one; q stays one-hot on what it proposes.
    """

    kind = NGRAM

    @classmethod
    def build(cls, pair) -> NgramDrafter:
        special = frozenset() if cls.kind.proposes_special else special_ids(pair)
        return cls(pair.vocab_size, device=pair.device, special=special)

    def __init__(self, vocab_size: int, max_ngram: int = 3, device: str | torch.device = "cpu",
                 special: frozenset[int] = frozenset()):
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.special = frozenset(special)
        self.device = device   # q lives where the target's p does (on a GPU a CPU q broke the round's summary)
        self.forwards = 0   # no model

    def lookup(self, context: list[int], gamma: int) -> list[int]:
        for n in range(min(self.max_ngram, len(context) - 1), 0, -1):
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):   # latest match first
                if context[start:start + n] == tail:
                    follow = self._plain(context[start + n:start + n + gamma])
                    if follow:
                        return follow
        return []

    def _plain(self, tokens: list[int]) -> list[int]:
        """`tokens` up to the first special one."""
        for i, token in enumerate(tokens):
            if token in self.special:
                return tokens[:i]
        return tokens

    def propose(self, context, gamma, sampling, generator, stop=None):   # no forward to stop between
        drafts = self.lookup(context, gamma) if gamma > 0 else []
        q = torch.zeros(len(drafts), self.vocab_size, device=self.device)
        if drafts:
            q[torch.arange(len(drafts)), torch.tensor(drafts)] = 1.0   # CPU indices index a device tensor
        return drafts, q


@register
class FeaturesDrafter(BaseDrafter):
    """Drafts from the target's features: the `features` drafter (EAGLE-style, see `specdec.drafting.features`).

    It keeps its own KV cache of "exact" elements (built from the target's features), one per
    context position but the last: element i = (f_i, x_{i+1}). Drafted elements (built from its own
    features) are dropped at the end of every `propose`; elements past a rejected draft are cropped
    when the context no longer matches (like `KVCache`). The rounds hand it the target's features of
    every kept position with `observe` after each verify.
    """

    kind = FEATURES

    @classmethod
    def build(cls, pair) -> FeaturesDrafter:
        return cls(fx.net_for(pair), pair.target, pair.vocab_size)

    def __init__(self, net, target, vocab_size: int):
        from transformers import DynamicCache

        self.net, self.vocab_size = net, vocab_size
        self.embed = target.get_input_embeddings()
        self.norm = fx.rms_norm(target.get_decoder().norm)   # the target's final norm
        self.head = target.get_output_embeddings()
        self.forward = fx.LeanForward(net)   # the net's math without transformers' per-call overhead
        self.rows_of = _row_lookup(self.embed)
        self.logits = fx.head_logits(self.head, vocab_size, net.vocab)   # q through a vocabulary subset, if any
        self.feats = torch.zeros(0, net.row_width, device=self.embed.weight.device)   # the target's rows at 0, 1, ...
        self.cache = DynamicCache(config=net.config)
        self.ids: list[int] = []   # x_{i+1} of each cached element
        self.forwards = 0
        self.last_source: dict | None = None   # where the latest drafts' q came from (the trace's sentence)

    def observe(self, start: int, rows: torch.Tensor) -> None:
        """The target's feature rows at positions start, start + 1, ... ([n, net.row_width]): what a
        verify forward computed for the positions the round kept."""
        self.feats = torch.cat([self.feats[:start], rows.detach().to(self.feats.device, self.feats.dtype)])

    def _catch_up(self, context: list[int]) -> torch.Tensor:
        """Feed the exact elements the cache lacks; the layer output of the last one [1, d]."""
        want = context[1:]
        keep = min(common_prefix(self.ids, want), len(want) - 1)   # always feed the last element
        fx.crop_to(self.cache, keep)
        embeds = self.embed(torch.tensor(want[keep:], device=self.embed.weight.device))
        out = self.forward(self.net.fused(self.feats[keep:len(want)].to(embeds.dtype)), embeds, keep, self.cache)
        self.ids = want
        return out[-1:]

    @torch.inference_mode()
    def propose(self, context, gamma, sampling, generator, stop=None):
        n = len(context)
        if gamma <= 0 or n < 2 or len(self.feats) < n - 1 or (stop is not None and stop.is_set()):
            # No feature for the last kept position yet (a run's first round): draft nothing; the
            # verify forward is then the prompt's prefill and brings the features.
            self.last_source = None
            return [], torch.zeros(0, self.vocab_size)
        out = self._catch_up(context)
        self.forwards += 1
        drafts: list[int] = []
        rows = []
        for j in range(gamma):
            feature = self.norm(out)
            q = logits_to_probs(self.logits(feature)[0], sampling)
            drafts.append(int(sample(q, generator)))
            rows.append(q)
            if j + 1 == gamma or (stop is not None and stop.is_set()):
                break
            out = self.forward(feature, self.rows_of(drafts[-1]), n - 1 + j, self.cache)
            self.forwards += 1
        fx.crop_to(self.cache, n - 1)   # drop the drafted elements: only the target's features are kept
        self.last_source = {"position": n - 2, "token": context[-1], "drafts": len(drafts)}
        return drafts, torch.stack(rows)


def _row_lookup(embed):
    """token id -> its embedding row [1, d]: a plain `nn.Embedding` read as a view of its weight (no
    index tensor, no module call: per-call overhead is most of a small draft's step on a
    CPU), any other module called."""
    if type(embed) is torch.nn.Embedding and embed.max_norm is None:
        weight = embed.weight
        return lambda token: weight[token:token + 1]
    return lambda token: embed(torch.tensor([token], device=embed.weight.device))


def align_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Align a model's logits to the pair's vocabulary: keep ids below `vocab_size`.

    The ids cut off are embedding-matrix padding that no tokenizer entry maps to (see
    `ModelPair.vocab_size`); p and q are both computed over the same real vocabulary.
    """
    if logits.shape[-1] < vocab_size:
        raise ValueError(f"logits have {logits.shape[-1]} entries, fewer than the pair's {vocab_size}")
    return logits[..., :vocab_size]


def drafters_for(pair) -> list[str]:
    """The drafters that can run on this pair, in listing order: what each needs (a draft model,
    features weights for its target) against what the pair has."""
    return runnable(has_draft=getattr(pair, "draft", None) is not None, has_features=fx.available(pair))


def default_drafter(pair) -> str:
    """The drafter a run gets when it names none: the preferred one the pair can run (the draft
    model where the pair has one, else the features drafter trained for its target, else n-gram)."""
    return by_preference(drafters_for(pair))[0]


def check_drafter(name: str, pair) -> None:
    """ValueError, naming the drafters the pair has, when it cannot run the drafter `name` (an
    unknown name, or one that needs a draft model or features weights the pair lacks)."""
    kind = kind_of(name)
    if kind.needs_draft_model and getattr(pair, "draft", None) is None:
        raise ValueError(lacks_draft_model(name, pair.label, drafters_for(pair)))
    if kind.reads_features:
        fx.net_for(pair)   # weights for the pair's target, loaded once; else a ValueError that says so


def special_ids(pair) -> frozenset[int]:
    """The pair's special token ids (its tokenizer's: a chat template's markers, EOS), which the
    n-gram drafter never proposes; none for a pair without a tokenizer."""
    tokenizer = getattr(pair, "tokenizer", None)
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}   # SmolLM2's <repo_name>, … are special there
    return frozenset(getattr(tokenizer, "all_special_ids", None) or ()) | {
        int(i) for i, token in added.items() if getattr(token, "special", False)}


def make_drafter(name: str, pair) -> Drafter:
    """A new drafter of the registered kind `name` for one run, over the pair's shared vocabulary."""
    check_drafter(name, pair)
    return class_of(name).build(pair)
