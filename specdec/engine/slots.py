"""The engine's buffers: static KV caches and every tensor a captured step reads or writes, made
once per cache length and γ and kept at fixed addresses (a CUDA graph replays the addresses it
was captured with), with the two ways data gets into them from the host: a round's uniforms in
one copy, and a prompt fed in one eager forward. Made at a run's `start`
(`graphs.StepGraphs`); the graphs live beside them (`Slots.graphs`), so new buffers drop
the old graphs too."""

from __future__ import annotations

import torch

from ..core.sampling import DeviceSampling
from .static_cache import Graphed, StaticFeatureNet, StaticModel


def length_for(needed: int, context: int | None) -> int:
    """Cache slots for a run needing `needed` positions: a power of two (so a few sizes serve every
    request and their graphs are reused), at least 256, at most the models' context."""
    size = 256
    while size < needed:
        size *= 2
    return min(size, context) if context else size


class Slots:
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
        self.features: FeatureSlots | None = None   # made by the first run with the features drafter
        self.device = dev

    def upload(self, uniforms: torch.Tensor) -> None:
        """The uniforms of a round (or of a run of steps) in one host-to-device copy."""
        n = len(uniforms)
        self.uniforms_host[:n].copy_(uniforms)
        self.uniforms[:n].copy_(self.uniforms_host[:n], non_blocking=True)

    def feed(self, model: StaticModel, tokens: list[int], start: int, layers: tuple[int, ...] | None) -> None:
        """Feed `model` (eagerly, one forward) `tokens` from cache position `start`, with no logits;
        the target, with the features drafter's `layers`, writes its rows of those positions."""
        model.start.fill_(start)
        ids = torch.tensor(tokens, device=self.device)
        if model is self.target and layers is not None:   # the features drafter reads its rows
            self.features.rows[start:start + len(tokens)] = model.forward(ids, keep=1, layers=layers)[1]
        else:
            model.forward(ids, keep=1)   # no logits wanted


class FeatureSlots:
    """What the features drafter's steps read and write: its net over a static cache of exact
    elements (element i = the target's rows at position i, fused, with token i + 1), the target's
    rows at every position (the verify writes those of its positions, at its start), the tokens of
    the elements a round feeds, and the drafter's latest feature, which the next drafting step reads."""

    def __init__(self, pair, length: int, gamma: int):
        from ..drafting import features as fx

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
        self.outside = fx.outside_vocab(self.net, pair.vocab_size, dev)   # p's mass there goes in the trace
