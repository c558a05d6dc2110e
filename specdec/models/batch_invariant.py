"""Batch-invariant forwards on a CPU: a verify's rows get the same bits as one-token steps.

Speculative decoding's target scores γ drafts and the bonus position in one forward over γ + 1
new tokens, where decoding alone takes one token a step. For the page's comparison to teach
exactness (greedy speculation writes the target's own greedy text), row i of the verify must
equal the step at that position. In float32 the two differ by rounding only (about 1e-4 in a
logit). In bfloat16 every layer rounds its output to 8 bits of mantissa, so any difference in the
order of a sum becomes a whole bfloat16 step and grows through the layers: without this module,
texts part. Two ops make a row's result depend on how many rows run with it (He et al., "Defeating
Nondeterminism in LLM Inference", 2025, name this batch invariance):

- **Products over one row.** oneDNN computes a product with one row (a one-token step) with
  another kernel than a product with two or more, and that kernel sums in another order; all
  products of two rows or more give a row the same bits. So a layer's product over a single row
  runs over that row twice and keeps one (`PairedLinear`): the step then takes the kernel the
  verify takes. The head (the vocabulary's product) is left as it is: it is the largest product,
  a second row would cost it most, and it gave every row the same bits.
- **Causal attention over several new tokens.** torch's fused attention (SDPA) tiles a block of
  queries over the keys, and where a row's last keys fall in its tiles depends on the block's size.
  Attention as two products and a softmax (transformers' own "eager" attention) sums over the same
  keys in the same order for every row; the keys a row may not see get a weight of exactly 0, which
  adds nothing to a sum. So the model attends that way (`ATTENTION`), steps and verifies alike.

Whether this holds depends on the kernels a machine's torch picks, so `rows_equal` checks it on
the loaded model (a verify's logits against one-token steps, bit for bit), and `load_pair` keeps
half precision as the default only where it does. It applies to Llama-style decoders (the real
model, SmolLM2, is one); `supported` says which.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ATTENTION", "supported", "make_batch_invariant", "rows_equal", "PairedLinear"]

ATTENTION = "eager"   # transformers' attention as products and a softmax (its own, not fused: see above)
_LAYER_PRODUCTS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}


class PairedLinear(nn.Linear):
    """A linear layer that never computes a product over a single row: one row runs beside a copy
    of itself, so it takes the kernel (and the order of sums) that two or more rows take."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[:-1].numel() != 1:
            return F.linear(x, self.weight, self.bias)
        row = x.reshape(1, -1)
        return F.linear(torch.cat([row, row]), self.weight, self.bias)[:1].reshape(*x.shape[:-1], -1)


def _layers(model):
    return getattr(getattr(model, "model", None), "layers", None)


def supported(model) -> bool:
    """A Llama-style decoder whose attention is full causal (no sliding window) over rotary
    positions: the shape `make_batch_invariant` knows how to change."""
    layers, config = _layers(model), model.config
    if layers is None or getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", False):
        return False
    return all(isinstance(getattr(getattr(layer, part, None), name, None), nn.Linear)
               for layer in layers for part, names in _LAYER_PRODUCTS.items() for name in names)


def make_batch_invariant(model) -> bool:
    """Change `model` in place (weights untouched) so that its forwards are batch-invariant in the
    two ways above; False, with nothing changed, where the model is not `supported`."""
    if not supported(model):
        return False
    model.config._attn_implementation = ATTENTION
    for layer in _layers(model):
        layer.self_attn.config._attn_implementation = ATTENTION
        for part, names in _LAYER_PRODUCTS.items():
            for name in names:
                getattr(getattr(layer, part), name).__class__ = PairedLinear
    return True


@torch.inference_mode()
def rows_equal(model, prompt_ids: list[int], block: list[int]) -> float:
    """The largest |logit difference| between one forward over `block` after `prompt_ids` and one
    forward per token of it over the same cache (0.0: every row the same bits)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    prompt = torch.tensor([prompt_ids], device=device)
    cache = DynamicCache()
    model(prompt, past_key_values=cache, use_cache=True)
    rows = model(torch.tensor([block], device=device), past_key_values=cache, use_cache=True).logits[0].float()
    cache = DynamicCache()
    model(prompt, past_key_values=cache, use_cache=True)
    steps = torch.cat([model(torch.tensor([[t]], device=device), past_key_values=cache, use_cache=True).logits[0]
                       for t in block]).float()
    return float((rows - steps).abs().max())
