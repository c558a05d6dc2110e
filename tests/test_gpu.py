"""The decoder on a CUDA device (skipped without one): the CUDA-graph engine, exact as on the CPU.

Run on a GPU machine with `python -m pytest -m gpu` (or `python -m specdec gpu-check`, which runs
these and more). Weights are float32, the default on every device: in half precision a verify
pass and a one-token step round differently (see DESIGN), so greedy outputs could differ.
"""

from __future__ import annotations

import pytest
import torch

from specdec import RunSettings, SamplingConfig, autoregressive_generate, load_pair, load_trace, speculative_generate
from specdec.engine.engine import engine_for

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

PROMPT = "ROMEO.\nBut soft,"


@pytest.fixture(scope="module")
def pairs():
    return {kind: load_pair(device="cuda", engine=kind) for kind in ("graphs", "static", "eager")}


def test_cuda_loads_float32_and_picks_graphs_by_default():
    pair = load_pair(device="cuda")
    assert pair.dtype == torch.float32 and pair.engine == "graphs"


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("drafter", ["model", "ngram", "features"])
def test_greedy_on_cuda_equals_the_target_alone(pairs, gamma, drafter):
    greedy = RunSettings(gamma=gamma, max_new_tokens=48, sampling=SamplingConfig(temperature=0), drafter=drafter)
    spec = speculative_generate(pairs["graphs"], PROMPT, greedy)
    assert spec.token_ids == autoregressive_generate(pairs["graphs"], PROMPT, greedy).token_ids
    assert spec.token_ids == autoregressive_generate(pairs["eager"], PROMPT, greedy).token_ids


@pytest.mark.parametrize("drafter", ["model", "features"])
@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=20, top_p=0.9)])
def test_graphs_equal_the_same_engine_without_graphs_token_for_token(pairs, sampling, drafter):
    for seed in range(3):
        s = RunSettings(gamma=4, max_new_tokens=60, sampling=sampling, seed=seed, drafter=drafter)
        graphed = speculative_generate(pairs["graphs"], PROMPT, s)
        assert graphed.models["engine"] == "cuda graphs", engine_for(pairs["graphs"]).failure
        assert graphed.token_ids == speculative_generate(pairs["static"], PROMPT, s).token_ids
        assert autoregressive_generate(pairs["graphs"], PROMPT, s).token_ids == \
            autoregressive_generate(pairs["static"], PROMPT, s).token_ids


def test_a_graphed_run_is_reproducible_and_its_trace_valid(pairs):
    settings = RunSettings(gamma=4, max_new_tokens=40, seed=3)
    a = speculative_generate(pairs["graphs"], "To be, or not to be", settings)
    b = speculative_generate(pairs["graphs"], "To be, or not to be", settings)
    assert a.token_ids == b.token_ids and a.stats.tested > 0
    assert load_trace(a.to_json()).token_ids == a.token_ids


def test_exactness_on_cuda_passes_and_its_skip_control_fails(pairs):
    from specdec.bench.gpu_check import exactness

    # The skip rule's bias is fixed, so the control's statistic grows with the runs: 3000 make it fail
    # clearly where 1500 can leave it above CONTROL_FAIL.
    exact, control = exactness(pairs["graphs"], 3000)
    assert exact["ok"], exact["result"]
    assert control["ok"], control["result"]


def test_a_moved_slider_captures_nothing_and_every_step_is_graphed(pairs):
    from specdec.bench.gpu_check import graphs_in_use

    engine, ids = engine_for(pairs["graphs"]), pairs["graphs"].encode(PROMPT)[1]
    engine.costs(ids, [1, 2, 5], SamplingConfig(temperature=0.7, top_p=0.9), repeats=2)
    before = len(engine._slots.graphs)
    engine.costs(ids, [1, 2, 5], SamplingConfig(temperature=1.3, top_p=0.6), repeats=2)
    assert len(engine._slots.graphs) == before
    speculative_generate(pairs["graphs"], PROMPT, RunSettings(gamma=4, max_new_tokens=40, seed=1))
    check = graphs_in_use(pairs["graphs"])
    assert check["ok"], check["result"]


def test_a_large_vocabulary_is_sampled_inside_captured_steps():
    """`gpu-check --shapes` in small: Qwen2.5's shapes (151,936 ids) cut to two layers, on the graph
    engine: top-p's sort over the full row and the trace's reduction run inside captured steps, and
    no capture fails."""
    from specdec.bench import shapes
    from specdec.bench.gpu_check import graphs_in_use

    (row,) = shapes.run_shapes("cuda", torch.float32, "graphs", ["qwen2.5"], [1, 2, 5], repeats=5, tokens=24,
                               graphs_check=graphs_in_use, log=lambda m: None, layers=2)
    assert row["costs"]["engine"] == "cuda graphs" and row["sampled_run"]["engine"] == "cuda graphs"
    assert row["sampled_run"]["tokens"] == 24
    assert row["graphs"]["ok"], row["graphs"]["result"]
