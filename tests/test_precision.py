"""The precision a pair runs in, batch-invariant forwards, the thread policy and costs measured here.

The claim under test: in the default precision a verify's rows are the one-token steps' rows, bit
for bit, so greedy speculation writes the target's own greedy text. Its control: the same
half-precision model without the batch-invariant ops parts (skipped, saying so, on a CPU whose
kernels happen to give every row the same bits anyway).
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec.core import threads
from specdec.models import batch_invariant, precision

# Rows of a verify (γ + 1 for γ 1..8) and prompts the drafters never trained on.
BLOCKS = (2, 3, 5, 9)
FRESH = ("How do volcanoes form?", "Give me three tips for learning to cook.",
         "Why do leaves change colour in autumn?")


def llama_layers(seed: int = 0, layers: int = 2):
    """A random Llama with the real model's layer shapes (576 wide, 1536 inner, 9 heads over 3 key-value
    heads): the shapes whose one-row products and masked attention part in half precision."""
    config = LlamaConfig(vocab_size=512, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05) if p.dim() > 1 else p.fill_(1.0)
    return model.to(torch.bfloat16)


def parting(model, seed: int = 0) -> list[float]:
    """The largest |logit difference| of each block size over a few random prompts."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (7, 19, 40)]
    return [batch_invariant.rows_equal(model, p, torch.randint(0, 512, (k,), generator=gen).tolist())
            for p in prompts for k in BLOCKS]


def test_a_paired_product_gives_one_row_the_bits_it_gets_among_others():
    torch.manual_seed(0)
    layer = torch.nn.Linear(1536, 576, bias=False).to(torch.bfloat16)
    x = torch.randn(64, 1536).to(torch.bfloat16)
    layer.__class__ = batch_invariant.PairedLinear
    alone = torch.cat([layer(x[i:i + 1]) for i in range(64)])
    for m in (2, 3, 5, 9, 64):
        assert torch.equal(layer(x[:m]), alone[:m])


def test_batch_invariant_half_precision_rows_equal_the_steps_bit_for_bit():
    model = llama_layers()
    assert batch_invariant.make_batch_invariant(model)
    assert parting(model) == [0.0] * (3 * len(BLOCKS))


def test_control_without_the_change_half_precision_rows_part():
    plain = parting(llama_layers())
    if max(plain) == 0.0:
        pytest.skip("this CPU's kernels give every row the same bits even without the change: nothing to control")
    assert max(plain) > 0.0


def test_float32_is_left_alone_and_an_unsupported_model_keeps_its_own_attention():
    model = llama_layers().float()
    assert precision.settle(model, None, "cpu", "eager", torch.float32, by_default=True) is precision.FLOAT32
    assert model.config._attn_implementation != batch_invariant.ATTENTION
    model.config.sliding_window = 16          # sliding windows: the row-by-row attention does not know them
    assert not batch_invariant.supported(model) and not batch_invariant.make_batch_invariant(model)


def test_half_precision_on_the_static_engine_or_a_gpu_is_labelled_as_rounding_differently():
    model = llama_layers()
    for device, engine in (("cpu", "static"), ("cuda", "graphs")):
        how = precision.settle(model, None, device, engine, torch.bfloat16, by_default=False)
        assert how.rows_equal is None and "can part" in how.words
    assert model.config._attn_implementation != batch_invariant.ATTENTION


# ---------------------------------------------------------------- threads

def test_threads_a_fixed_count_wins_a_small_model_gets_one_and_a_block_holds_its_count(monkeypatch):
    monkeypatch.setattr(threads, "free_cores", lambda: 2)
    try:
        assert threads.threads_for(1_000) == 1
        assert threads.threads_for(threads.SMALL_PARAMS) == 2
        with threads.run_threads(1):
            assert threads.threads_for(threads.SMALL_PARAMS) == 1     # a comparison's runs: alike
        threads.fix(3)
        assert threads.threads_for(1_000) == 3
    finally:
        threads.fix(None)


def test_free_cores_counts_the_threads_already_running_and_ignores_a_passing_spin(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    looks = iter([3, 3, 3, 3])                 # two busy processes beside the caller
    monkeypatch.setattr(threads, "_running", lambda: next(looks))
    assert threads.free_cores(gap=0) == 1
    looks = iter([2, 1, 2, 2])                 # a thread finishing its spin, once: the least look counts
    monkeypatch.setattr(threads, "_running", lambda: next(looks))
    assert threads.free_cores(gap=0) == 2
    monkeypatch.setattr(threads, "_running", lambda: None)          # no /proc/stat: the usable cores
    assert threads.free_cores(gap=0) == 2


def test_run_threads_sets_the_calling_threads_count_and_restores_it():
    before = torch.get_num_threads()
    with threads.run_threads(1):
        if threads._OMP_SET_NUM_THREADS is not None:
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------- the real model

@pytest.mark.slow
def test_the_real_model_runs_batch_invariant_bfloat16_by_default_and_every_verify_row_is_a_step(real_pair):
    how = real_pair.precision
    if not how.rows_equal:       # this machine's kernels part: the default must then be float32
        assert real_pair.dtype == torch.float32 and how is precision.FLOAT32
        pytest.skip("this CPU does not keep bfloat16 rows equal: the real model runs in float32 here")
    assert real_pair.dtype == torch.bfloat16 and "batch-invariant" in how.words
    assert real_pair.describe()["rows_equal"] is True
    block = [504, 2365, 314, 253, 1345, 28, 418, 2114, 30]
    for prompt in FRESH:
        ids = real_pair.encode(prompt, True)[1]
        assert [batch_invariant.rows_equal(real_pair.target, ids, block[:k]) for k in BLOCKS] == [0.0] * len(BLOCKS)


@pytest.mark.slow
def test_greedy_speculation_equals_the_target_alone_in_the_default_precision(real_pair):
    from specdec.core.sampling import SamplingConfig
    from specdec.core.settings import RunSettings
    from specdec.decoding.loop import autoregressive_generate, speculative_generate

    greedy = SamplingConfig(temperature=0.0)
    for prompt in FRESH[:2]:
        alone = autoregressive_generate(real_pair, prompt, RunSettings(max_new_tokens=32, sampling=greedy))
        for gamma in (1, 3):
            spec = speculative_generate(real_pair, prompt, RunSettings(gamma=gamma, max_new_tokens=32,
                                                                       sampling=greedy, drafter="features"))
            assert spec.token_ids == alone.token_ids, (prompt, gamma)
            assert spec.models["precision"] == real_pair.precision.words and "threads" in spec.models
