"""The static-cache engine (the CUDA path without its graphs) on the CPU: it must equal the
eager, dynamic-cache decoder token for token, keep the decoder's exactness, stop between
forwards, and serve one run at a time. The CUDA graphs themselves are tested in test_gpu.py."""

from __future__ import annotations

import threading
import types

import pytest
import torch

import bounds
from specdec import (
    Rule,
    RunSettings,
    SamplingConfig,
    autoregressive_generate,
    load_pair,
    load_trace,
    speculative_generate,
)
from specdec.core.sampling import sample
from specdec.engine.engine import engine_for
from specdec.engine.slots import length_for as _length_for
from specdec.models.pair import ModelPair, pick_device, pick_engine
from tiny import StopAfter, tiny_pair

PROMPT = [1, 2, 3]


def static_twin(pair: ModelPair) -> ModelPair:
    """The same models and tokenizer, on the static engine."""
    return ModelPair(pair.tokenizer, pair.target, pair.draft, pair.target_name, pair.draft_name,
                     pair.device, pair.dtype, pair.label, engine="static")


@pytest.fixture(scope="module")
def bundled_pairs():
    eager = load_pair(device="cpu")
    return eager, static_twin(eager)


SETTINGS = [
    RunSettings(gamma=4, max_new_tokens=60),
    RunSettings(gamma=3, max_new_tokens=50, sampling=SamplingConfig(temperature=0)),
    RunSettings(gamma=8, max_new_tokens=70, sampling=SamplingConfig(temperature=0.7, top_k=20, top_p=0.9),
                rule=Rule.SKIP_ADJUSTMENT),
    RunSettings(gamma=1, max_new_tokens=40, sampling=SamplingConfig(temperature=1.3)),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=["T1-g4", "greedy-g3", "T0.7-topk-topp-skip-g8", "T1.3-g1"])
@pytest.mark.parametrize("seed", [0, 1])
def test_static_engine_equals_the_eager_decoder(bundled_pairs, settings, seed):
    eager, static = bundled_pairs
    s = settings.with_(seed=seed)
    a = speculative_generate(eager, "ROMEO.\nBut soft,", s)
    b = speculative_generate(static, "ROMEO.\nBut soft,", s)
    assert b.models["engine"] == "static cache" and a.models["engine"] == "eager"
    assert b.token_ids == a.token_ids
    assert [r.n_accepted for r in b.rounds] == [r.n_accepted for r in a.rounds]
    # two float32 paths through the same model (eager and static-cache attention), then sums over the vocabulary
    tol = bounds.rounding(eager.target.config.vocab_size)
    for ra, rb in zip(a.rounds, b.rounds):
        for x, y in zip(ra.positions, rb.positions):
            assert abs(x.beta - y.beta) < tol and abs(x.p_draft - y.p_draft) < tol and x.status is y.status
        assert rb.end_token == ra.end_token and rb.ending is ra.ending
    assert (b.stats.accepted, b.stats.tested, b.stats.target_forwards, b.stats.draft_forwards) == \
        (a.stats.accepted, a.stats.tested, a.stats.target_forwards, a.stats.draft_forwards)
    assert load_trace(b.to_json()).token_ids == b.token_ids   # the engine's trace passes every check


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_static_engine_target_alone_equals_the_eager_one(bundled_pairs, temperature):
    eager, static = bundled_pairs
    s = RunSettings(max_new_tokens=45, sampling=SamplingConfig(temperature=temperature), seed=3)
    a, b = autoregressive_generate(eager, "KING LEAR.\n", s), autoregressive_generate(static, "KING LEAR.\n", s)
    assert b.token_ids == a.token_ids and b.models["engine"] == "static cache"
    assert b.stats.target_forwards >= b.stats.new_tokens


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_on_the_static_engine_equals_the_target_alone(bundled_pairs, gamma):
    _, static = bundled_pairs
    s = RunSettings(gamma=gamma, max_new_tokens=64, sampling=SamplingConfig(temperature=0))
    assert speculative_generate(static, "To be, or not to be,", s).token_ids == \
        autoregressive_generate(static, "To be, or not to be,", s).token_ids


def test_tiny_pairs_on_the_engine_equal_eager_including_a_draft_that_is_the_target():
    for pair in (tiny_pair(), tiny_pair(same=True), tiny_pair(vocab=12, seed=5, eos=3)):
        for seed in range(3):
            s = RunSettings(gamma=5, max_new_tokens=30, seed=seed)
            assert speculative_generate(static_twin(pair), PROMPT, s).token_ids == \
                speculative_generate(pair, PROMPT, s).token_ids


def test_a_longer_run_or_larger_gamma_grows_the_cache_and_stays_equal(bundled_pairs):
    eager, static = bundled_pairs
    short = RunSettings(gamma=2, max_new_tokens=10)
    speculative_generate(static, "ROMEO.\n", short)
    first = engine_for(static)._slots
    assert first.length == 256 and first.gamma == 8
    long = RunSettings(gamma=12, max_new_tokens=200, seed=2)
    b = speculative_generate(static, "ROMEO.\n", long)
    assert engine_for(static)._slots.gamma == 12 and engine_for(static)._slots is not first
    assert b.token_ids == speculative_generate(eager, "ROMEO.\n", long).token_ids


def test_cache_length_is_a_power_of_two_within_the_context():
    assert _length_for(10, 256) == 256 and _length_for(300, 4096) == 512 and _length_for(3000, 2048) == 2048
    assert _length_for(700, None) == 1024


def test_a_stop_acts_inside_a_round_on_the_engine_and_the_next_run_is_unharmed():
    pair = static_twin(tiny_pair())
    settings = RunSettings(gamma=8, max_new_tokens=40, seed=0)
    gen = speculative_generate(pair, PROMPT, settings, stop=StopAfter(3))   # three draft forwards, then stop
    assert gen.rounds == [] and gen.token_ids == [] and gen.stats.stopped == "stopped"
    again = speculative_generate(pair, PROMPT, settings)
    assert again.token_ids == speculative_generate(tiny_pair(), PROMPT, settings).token_ids


def test_one_run_at_a_time_per_pair_and_concurrent_runs_equal_solo(bundled_pairs):
    _, static = bundled_pairs
    settings = [RunSettings(gamma=4, max_new_tokens=40, seed=s) for s in range(4)]
    solo = [speculative_generate(static, "ROMEO.\n", s).token_ids for s in settings]
    results = [None] * 4

    def work(i):
        results[i] = speculative_generate(static, "ROMEO.\n", settings[i]).token_ids

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == solo


def test_untraced_runs_give_the_same_tokens_and_counts(bundled_pairs):
    for pair in bundled_pairs:
        s = RunSettings(gamma=4, max_new_tokens=50, seed=7)
        traced, bare = speculative_generate(pair, "ROMEO.\n", s), speculative_generate(pair, "ROMEO.\n", s, trace=False)
        assert bare.token_ids == traced.token_ids and bare.rounds == []
        assert (bare.stats.accepted, bare.stats.tested, bare.stats.drafted) == \
            (traced.stats.accepted, traced.stats.tested, traced.stats.drafted)


def test_sampling_with_given_uniforms_equals_drawing_them():
    probs = torch.softmax(torch.randn(5, 30, generator=torch.Generator().manual_seed(0)), -1)
    a = sample(probs, torch.Generator().manual_seed(9))
    u = torch.rand(5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert torch.equal(a, sample(probs, uniforms=u))


def test_float32_on_every_device_unless_asked_and_engine_choice():
    assert pick_device("cpu") == ("cpu", torch.float32)
    assert pick_device("cuda") == ("cuda", torch.float32)    # no GPU needed to pick
    assert pick_device("cuda", "bfloat16")[1] is torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        pick_device("cpu", "float8")
    assert pick_engine(None, "cuda") == "graphs" and pick_engine("auto", "cpu") == "eager"
    with pytest.raises(ValueError, match="engine must be one of"):
        pick_engine("warp", "cpu")


def test_ngram_runs_eagerly_on_an_engine_pair(bundled_pairs):
    _, static = bundled_pairs
    gen = speculative_generate(static, "To be, or not to be, to be", RunSettings(drafter="ngram", max_new_tokens=20))
    assert gen.models["engine"] == "eager"


def test_engine_costs_are_measured_for_every_width(bundled_pairs):
    _, static = bundled_pairs
    costs = engine_for(static).costs(static.encode("ROMEO.\n")[1], [1, 2, 5], SamplingConfig(), repeats=3)
    assert set(costs["target_ms_by_width"]) == {1, 2, 5} and costs["draft_step_ms"] > 0 and costs["c"] > 0
    # and a run afterwards is unharmed by the timing's writes past the context
    s = RunSettings(gamma=4, max_new_tokens=30, seed=1)
    assert speculative_generate(static, "ROMEO.\n", s).token_ids == \
        speculative_generate(bundled_pairs[0], "ROMEO.\n", s).token_ids


def test_a_pair_without_a_draft_model_times_its_target_on_the_engine_and_decodes_the_same(bundled_pairs):
    eager, static = bundled_pairs
    alone = ModelPair(static.tokenizer, static.target, None, "target", None, engine="static")
    costs = engine_for(alone).costs(alone.encode("ROMEO.\n")[1], [1, 3], SamplingConfig(), repeats=2)
    assert set(costs["target_ms_by_width"]) == {1, 3} and costs["draft_step_ms"] is None and costs["c"] is None
    s = RunSettings(drafter="ngram", max_new_tokens=12, sampling=SamplingConfig(temperature=0.0))
    assert autoregressive_generate(alone, "ROMEO.\n", s).token_ids == \
        speculative_generate(eager, "ROMEO.\n", s).token_ids == speculative_generate(alone, "ROMEO.\n", s).token_ids


def test_a_whole_number_temperature_is_a_temperature_on_every_engine():
    pair = tiny_pair()
    s = RunSettings(gamma=3, max_new_tokens=16, seed=2, sampling=SamplingConfig(temperature=2, top_p=1))
    as_float = s.with_(sampling=SamplingConfig(temperature=2.0, top_p=1.0))
    assert s.sampling == as_float.sampling and isinstance(s.sampling.temperature, float)
    want = speculative_generate(pair, PROMPT, as_float).token_ids
    for p in (pair, static_twin(pair)):
        assert speculative_generate(p, PROMPT, s).token_ids == want
    with pytest.raises(ValueError, match="temperature must be"):
        SamplingConfig(temperature=True).validate()     # a bool is not a number here


def test_the_engine_prefill_computes_no_logits_for_the_prompt():
    pair = tiny_pair()
    rows = []
    hooks = [m.register_forward_hook(lambda mod, args, out: rows.append(out.logits.shape[1]))
             for m in (pair.target, pair.draft)]
    prompt, s = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5], RunSettings(gamma=3, max_new_tokens=10, seed=1)
    try:
        tokens = speculative_generate(static_twin(pair), prompt, s).token_ids
    finally:
        for h in hooks:
            h.remove()
    assert max(rows) <= s.gamma + 1       # the prompt's 11 prefilled positions give one row at most
    assert tokens == speculative_generate(pair, prompt, s).token_ids


def _pair_of(model) -> ModelPair:
    return ModelPair(None, model, model, "t", "d", engine="static")


def test_a_model_the_engine_cannot_graph_runs_eagerly_and_says_why():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    size = dict(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
                pad_token_id=None)
    windowed = Qwen2ForCausalLM(Qwen2Config(**size, use_sliding_window=True, sliding_window=16,
                                            max_window_layers=0)).eval()
    dynamic = LlamaForCausalLM(LlamaConfig(**size, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                   "rope_theta": 10000.0})).eval()
    for model, why in ((windowed, "sliding-window"), (dynamic, "dynamic RoPE")):
        pair = _pair_of(model)
        s = RunSettings(gamma=4, max_new_tokens=120, seed=0)   # past the window: the static layer broke at 110
        gen = speculative_generate(pair, PROMPT, s)
        assert gen.models["engine"].startswith("eager (") and why in gen.models["engine"]
        assert autoregressive_generate(pair, PROMPT, s).models["engine"] == gen.models["engine"]
        assert engine_for(pair) is None


def _verify_copies(pair: ModelPair, settings: RunSettings) -> tuple[list[int], object]:
    """Numbers in each traced verify step's result (the round's one copy to the host), and the run."""
    engine = engine_for(pair)
    sizes, run = [], engine._run

    def counting(key, make):
        out = run(key, make)
        if key[0] == "verify":
            sizes.append((key[1], out.numel()))
        return out
    engine._run = counting
    try:
        gen = speculative_generate(pair, PROMPT, settings)
    finally:
        del engine._run
    return sizes, gen


def test_a_traced_round_copies_no_full_vocabulary_row_to_the_host():
    """Defect 5 of #25: the verify step reduces p and q on the device to what the trace keeps, so
    its copy holds 2 + g head numbers and a summary whose size depends on g and TOP_N only. Before,
    it held the (2g + 2) full rows: with vocab 4096 at g 4, 40,966 numbers instead of ~1,000."""
    from specdec.trace.reduction import summary_size
    from specdec.trace.spine import TOP_N

    per_vocab = {}
    for vocab in (8, 512, 4096):
        s = RunSettings(gamma=4, max_new_tokens=12, seed=1)
        sizes, gen = _verify_copies(static_twin(tiny_pair(vocab=vocab, seed=2)), s)
        assert sizes and gen.rounds
        for g, numel in sizes:
            assert numel == 2 + g + summary_size(g, vocab, TOP_N)
            assert vocab < 4096 or numel < vocab   # all of a round's rows in fewer numbers than one full row
        per_vocab[vocab] = {g: numel for g, numel in sizes}
    # The same g copies the same number of numbers for any vocabulary larger than TOP_N.
    common = per_vocab[512].keys() & per_vocab[4096].keys()
    assert common and all(per_vocab[512][g] == per_vocab[4096][g] for g in common)


@pytest.mark.parametrize("rule", list(Rule))
def test_the_engines_rounds_equal_the_eager_recording_of_the_same_rows(monkeypatch, rule):
    """The engine reduces its rows inside the verify step and copies the summary; the eager
    decoder hands its rows to `Pending.of`, which reduces them on the host. Given the same rows,
    both give the same Round exactly: every kept id, value, tail bucket, beta and skip bias."""
    import specdec.engine.graphs as eng
    from specdec.decoding.rounds import Step
    from specdec.trace.recording import Pending, record

    rows, real = [], eng.round_summary

    def keeping(p, q, drafts, end_dist, n_accepted, end_token, n, outside=None):   # the verify step's rows, kept
        rows.append((p.clone(), q.clone(), end_dist.clone()))
        return real(p, q, drafts, end_dist, n_accepted, end_token, n, outside)
    monkeypatch.setattr(eng, "round_summary", keeping)
    pair = tiny_pair(vocab=64, seed=4)
    for seed, sampling in enumerate([SamplingConfig(), SamplingConfig(temperature=0.8, top_k=5),
                                     SamplingConfig(temperature=1.2, top_p=0.8), SamplingConfig(temperature=0)]):
        rows.clear()
        s = RunSettings(gamma=3, max_new_tokens=20, seed=seed, sampling=sampling, rule=rule)
        gen = speculative_generate(static_twin(pair), PROMPT, s)
        assert gen.models["engine"] == "static cache" and len(gen.rounds) == len(rows) > 2
        for r, (p, q, end_dist) in zip(gen.rounds, rows):
            drafts = [pos.draft_token for pos in r.positions]
            step = Step(drafts, p, q, torch.tensor([pos.u for pos in r.positions]),
                        types.SimpleNamespace(end_dist=end_dist), (r.draft_seconds, r.verify_seconds),
                        r.n_accepted, r.end_token, vocab=p.shape[-1])
            assert record([Pending.of(r.index, r.start, step, r.emitted)], rule) == [r]
