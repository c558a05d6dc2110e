"""Tiny random-initialised transformers models for tests: they build in milliseconds."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec.models.pair import ModelPair


def tiny_model(vocab: int = 8, layers: int = 1, width: int = 16, seed: int = 0, sharpness: float = 0.5,
               context: int = 64, eos: int | None = None):
    """A random Llama whose next-token distributions are far from uniform (sharpness scales the
    output layer), so p and q differ clearly and tests have power."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=context, tie_word_embeddings=False,
                         eos_token_id=eos, bos_token_id=None, pad_token_id=None)
    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 if p.dim() > 1 else torch.ones_like(p))
        model.lm_head.weight.mul_(sharpness)
    return model.eval()


def tiny_pair(vocab: int = 8, seed: int = 0, context: int = 64, eos: int | None = None,
              same: bool = False) -> ModelPair:
    target = tiny_model(vocab, layers=2, seed=seed, context=context, eos=eos)
    draft = target if same else tiny_model(vocab, layers=1, seed=seed + 100, context=context, eos=eos)
    return ModelPair(None, target, draft, "tiny-target", "tiny-draft")


class StopAfter:
    """A stop that turns true at its (n + 1)-th check: counts how often the decoder looks."""

    def __init__(self, n: int):
        self.n, self.checks = n, 0

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks > self.n
