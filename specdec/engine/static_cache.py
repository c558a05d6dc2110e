"""A model with a static KV cache, and one forward captured as a CUDA graph.

Why not `DynamicCache`: on a GPU a forward of a small model is set by kernel launches, not
arithmetic. A CUDA graph replays a whole
forward as one launch, but it needs every tensor at a fixed address and no host round trip, so
the cache must be preallocated (transformers' `StaticCache`) and positions, the attention mask
and the cache length must live on the device.

Rolling back rejected drafts is free here: the next forward's `start` says how much of the cache
is kept (keys past it are masked out, then overwritten). Each `StaticLayer` keeps its length in a
0-d device tensor `cumulative_length` that its `update` reads and advances; we set it from
`start` at the top of every forward, a device op a graph can hold (transformers 5.23).
"""

from __future__ import annotations

import torch

from ..drafting.features import target_rows


def unsupported(model) -> str | None:
    """Why this engine cannot hold `model`, or None. Sliding-window layers keep their length in a
    Python int (`cumulative_length_int`) that `start` cannot roll back; dynamic and longrope RoPE
    read the positions on the host inside the forward, which no graph can hold (transformers 5.23)."""
    from transformers import StaticCache

    config = model.config
    layers = StaticCache(config=config, max_cache_len=8).layers   # no memory yet: layers allocate lazily
    if any(hasattr(layer, "cumulative_length_int") for layer in layers):
        return "sliding-window attention layers"
    rope = getattr(config, "rope_parameters", None) or {}
    kinds = [rope] if "rope_type" in rope else [r for r in rope.values() if isinstance(r, dict)]
    for kind in ("dynamic", "longrope"):
        if any(r.get("rope_type") == kind for r in kinds):
            return f"{kind} RoPE"
    return None


class _StaticCached:
    """A module over a static KV cache of `length` slots, written at positions start .. start + n - 1
    (`start`, a 0-d device tensor, set by the caller with `start.fill_(k)`)."""

    def __init__(self, module, length: int):
        from transformers import StaticCache

        self.length = length
        self.device = next(module.parameters()).device
        self.cache = StaticCache(config=module.config, max_cache_len=length)
        self.start = torch.zeros((), dtype=torch.long, device=self.device)
        self.slots = torch.arange(length, device=self.device)
        self.ready = False   # the cache allocates its tensors at the first forward (then `start` must be 0)

    def _positions(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The n new positions and their mask (`_causal`), the cache rewound to `start`: device ops only."""
        if self.ready:
            for layer in self.cache.layers:   # each layer's next write goes to `start`
                layer.cumulative_length.copy_(self.start)
        return _causal(self.start, self.slots, n)


class StaticModel(_StaticCached):
    """A causal LM over a static cache. Call `forward(ids)` with ids [n] on the model's device: it
    writes their keys at positions start .. start + n - 1 and returns the logits [n, V]."""

    def __init__(self, model, length: int):
        super().__init__(model, length)
        self.model = model
        # "eager" attention adds its mask to the scores; sdpa takes a boolean one (True = attend).
        self.additive = getattr(model.config, "_attn_implementation", "sdpa") == "eager"

    def forward(self, ids: torch.Tensor, keep: int = 0, layers: tuple[int, ...] | None = None):
        """`keep`: logits for the last `keep` positions only (0: all), as transformers'
        `logits_to_keep`; a prefill keeps 1 (a long prompt and a large vocabulary would otherwise
        make gigabytes of logits nobody reads). `layers` not None: (logits, the feature rows [n, ...]
        of every fed position, as `features.forward_with_features` gives them) for the features drafter."""
        n = ids.shape[-1]
        positions, mask = self._positions(n)
        if self.additive:   # eager attention adds its mask
            mask = torch.zeros(mask.shape, dtype=self.model.dtype, device=self.device).masked_fill(
                ~mask, torch.finfo(self.model.dtype).min)
        out = self.model(input_ids=ids.reshape(1, n), position_ids=positions[None], attention_mask=mask,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=keep,
                         output_hidden_states=layers is not None)
        self.ready = True
        if layers is None:
            return out.logits[0]
        return out.logits[0], target_rows(out.hidden_states[-1], out.hidden_states, layers)[0]


class StaticFeatureNet(_StaticCached):
    """The features drafter's net (`features.FeatureNet`) over a static cache, as `StaticModel` holds
    a causal LM: `forward(feats [n, d], embeds [n, d])` writes the n elements' keys at positions
    start .. start + n - 1 and returns the layer's outputs [n, d]."""

    def __init__(self, net, length: int):
        super().__init__(net, length)
        self.net = net

    def forward(self, feats: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        positions, mask = self._positions(feats.shape[0])
        out = self.net(feats[None], embeds[None], positions[None], mask, self.cache)
        self.ready = True
        return out[0]


def _causal(start: torch.Tensor, slots: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions start .. start + n - 1 and the boolean mask [1, 1, n, length] over the cache's slots:
    causal, and nothing past the kept prefix (True = attend). Device ops only: a graph holds them."""
    positions = start + slots[:n]
    return positions, (slots[None, :] <= positions[:, None])[None, None]


class Graphed:
    """`fn()` captured once as a CUDA graph; calling replays it on the current contents of the
    tensors it reads, and returns the same output tensors (overwritten by each replay).

    `fn` must read its inputs from tensors at fixed addresses and make no host round trip. Its
    warm-up runs (on a side stream, as PyTorch's docs ask) may write the cache past the kept
    prefix: harmless, since a slot is written again before any query attends to it.
    """

    def __init__(self, fn, warmup: int = 2):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: an allocation by another thread (a CUDA out-of-memory handler emptying the
        # cache) cannot break this capture; the server's device queue keeps runs apart.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.out = fn()

    def __call__(self):
        self.graph.replay()
        return self.out
