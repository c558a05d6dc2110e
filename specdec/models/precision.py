"""How a pair computes: its device and engine, which precision its weights run in, and whether a
verify's rows then equal the one-token steps'.

float32 is exact everywhere: a verify's rows and the steps' differ by rounding only, and greedy
speculation writes the target's own text. bfloat16 halves the bytes a CPU reads per token (a small
model's step there is bound by memory), but rounds each layer's output to 8 bits of mantissa, so
it keeps that promise only with batch-invariant forwards (`batch_invariant`), and only where this
machine's kernels give the bits that module expects. So on a CPU half precision is made
batch-invariant and checked once at load (`rows_equal`, well under a second): a pair whose preset
runs in bfloat16 by default falls back to float32 where the check fails, and a half precision a
user asked for is kept, labelled as rounding differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import batch_invariant

__all__ = ["DTYPES", "ENGINES", "Precision", "pick_device", "pick_engine", "dtype_name", "settle"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# A prompt and a block the check runs when the pair has a chat template (real text, as runs see);
# token ids 10.. where it has none.
_CHECK_TEXT, _CHECK_BLOCK = "Why is the sky blue?", 6


def pick_device(device: str | None = None, dtype: str | None = None) -> tuple[str, torch.dtype]:
    """CUDA when present, else the CPU; float32 weights unless `dtype` asks for half precision
    ("bfloat16" or "float16"). (A preset may run in another precision by default: `load_pair`.)"""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = dtype or "float32"
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return device, DTYPES[name]


ENGINES = ("auto", "eager", "static", "graphs")


def pick_engine(engine: str | None, device: str) -> str:
    """"auto": CUDA graphs over static caches on a GPU (a small model's step there is set by kernel
    launches), the eager dynamic-cache loop on a CPU (where graphs do not exist)."""
    engine = engine or "auto"
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "auto":
        return "graphs" if device.startswith("cuda") else "eager"
    return engine


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Precision:
    """How a loaded target computes: its dtype; `rows_equal` True where a verify's rows were checked
    to equal the steps' bit for bit, False where they part, None where unchecked (float32, or a
    GPU); `words`, what the page and the CLI say of it."""
    dtype: str = "float32"
    rows_equal: bool | None = None
    words: str = "float32"

    def describe(self) -> dict:
        return {"precision": self.words, "rows_equal": self.rows_equal}


FLOAT32 = Precision()


def _check_ids(tokenizer, vocab_size: int) -> tuple[list[int], list[int]]:
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": _CHECK_TEXT}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text + "The sky is blue because", add_special_tokens=False)["input_ids"]
        return ids[:-_CHECK_BLOCK], ids[-_CHECK_BLOCK:]
    ids = [10 + i % max(vocab_size - 10, 1) for i in range(24)]
    return ids[:-_CHECK_BLOCK], ids[-_CHECK_BLOCK:]


def settle(model, tokenizer, device: str, engine: str, dtype: torch.dtype, by_default: bool) -> Precision | None:
    """The precision `model` (already loaded in `dtype` on `device`, run by `engine`) runs in; None where the caller
    must load it again in float32 (half precision was only the preset's default, and this machine
    does not keep its rows equal)."""
    name = dtype_name(dtype)
    if dtype == torch.float32:
        return FLOAT32
    if not device.startswith("cpu") or engine != "eager":   # made and checked for the eager loop a CPU runs
        return Precision(name, None, f"{name} (a verify rounds differently from one-token steps: greedy texts "
                                     "can part)")
    if batch_invariant.make_batch_invariant(model):
        diff = batch_invariant.rows_equal(model, *_check_ids(tokenizer, model.config.vocab_size))
        if diff == 0.0:
            return Precision(name, True, f"{name}, batch-invariant (a verify's rows equal one-token steps', "
                                         "checked at load)")
    if by_default:
        return None
    return Precision(name, False, f"{name} (faster; a verify rounds differently from one-token steps on this "
                                  "machine: greedy texts can part)")
