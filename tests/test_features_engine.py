"""The features drafter on the static-cache engine (the CUDA path) and on its graphs, emulated on the
CPU: token for token the eager decoder's run, with no host read inside a captured step.

On the engine the verify writes the target's rows of its positions into a device buffer, and the
drafter's own net keeps a static cache of exact elements; a round feeds the elements it lacks (one
captured step per width) and then one element per draft. The eager `FeaturesDrafter` is the
reference (tests/test_features.py proves it exact); here the engine must make the same draws from
the same probabilities. Random nets (a plain one and one fusing middle layers) and the shipped one."""

from __future__ import annotations

import itertools

import pytest
import torch

import bounds
from graph_emulation import Emulator
from specdec import Rule, RunSettings, SamplingConfig, load_pair, load_trace, speculative_generate
from specdec.engine.engine import Engine
from specdec.models.pair import ModelPair
from test_features import random_net
from tiny import StopAfter, tiny_pair

SAMPLINGS = {"greedy": SamplingConfig(temperature=0), "T1": SamplingConfig(),
             "top-k": SamplingConfig(temperature=0.8, top_k=3), "top-p": SamplingConfig(temperature=1.2, top_p=0.8)}


def on(pair: ModelPair, engine: str, net=None, emulator: Emulator | None = None) -> ModelPair:
    """The same models on `engine`, with the features net `net` (None: the one beside the target);
    with an emulator, on the graph path it emulates."""
    out = ModelPair(pair.tokenizer, pair.target, pair.draft, pair.target_name, pair.draft_name,
                    pair.device, pair.dtype, pair.label, engine=engine)
    if net is not None:
        out.feature_net = net
    if emulator is not None:
        out._engine = Engine(out, graphs=True, capture=emulator)
    return out


def same_runs(a, b, vocab: int) -> None:
    assert b.token_ids == a.token_ids
    assert [(r.n_accepted, r.end_token, len(r.positions)) for r in b.rounds] == \
        [(r.n_accepted, r.end_token, len(r.positions)) for r in a.rounds]
    tol = bounds.rounding(vocab)   # two float32 paths (dynamic and static attention), then sums over the vocabulary
    for ra, rb in zip(a.rounds, b.rounds):
        for x, y in zip(ra.positions, rb.positions):
            assert x.draft_token == y.draft_token
            assert abs(x.beta - y.beta) < tol and abs(x.p_draft - y.p_draft) < tol and x.status is y.status
    assert (b.stats.accepted, b.stats.tested, b.stats.target_forwards, b.stats.draft_forwards) == \
        (a.stats.accepted, a.stats.tested, a.stats.target_forwards, a.stats.draft_forwards)


@pytest.fixture(scope="module")
def bundled_cpu():
    return load_pair(device="cpu")


SETTINGS = {
    "T1-g4": RunSettings(gamma=4, max_new_tokens=48),
    "greedy-g3": RunSettings(gamma=3, max_new_tokens=40, sampling=SamplingConfig(temperature=0)),
    "T0.7-topk-topp-skip-g8": RunSettings(gamma=8, max_new_tokens=48, rule=Rule.SKIP_ADJUSTMENT,
                                          sampling=SamplingConfig(temperature=0.7, top_k=20, top_p=0.9)),
    "T1.3-g1": RunSettings(gamma=1, max_new_tokens=30, sampling=SamplingConfig(temperature=1.3)),
}
# The shipped net (it fuses layers 4, 8, 12) with every setting; a random net without fusion (it drafts
# badly, so its runs are long) with two.
CASES = [(name, "shipped") for name in SETTINGS] + [(name, "plain") for name in list(SETTINGS)[:2]]


@pytest.mark.parametrize("name, net", CASES, ids=[f"{name}-{net}" for name, net in CASES])
def test_the_static_engine_equals_the_eager_features_drafter(bundled_cpu, name, net):
    settings = SETTINGS[name]
    feature_net = random_net(bundled_cpu.target, seed=3) if net == "plain" else None
    eager, static = on(bundled_cpu, "eager", feature_net), on(bundled_cpu, "static", feature_net)
    # a prompt longer than γ + 1 (its elements fed in one eager forward), and a one-token one
    for prompt, seed in (("ROMEO.\nBut soft, what light", 0), ("A", 1)):
        s = settings.with_(seed=seed, drafter="features")
        a, b = speculative_generate(eager, prompt, s), speculative_generate(static, prompt, s)
        assert (a.models["engine"], b.models["engine"]) == ("eager", "static cache")
        assert b.rounds[0].positions == [] and len(b.rounds[1].positions) > 0   # round one is the prefill
        same_runs(a, b, bundled_cpu.vocab_size)
        assert load_trace(b.to_json()).token_ids == b.token_ids


def test_a_model_run_and_a_features_run_share_the_engine_and_each_equals_eager(bundled_cpu):
    """One engine serves both drafters in turn: a features run leaves nothing a model run reads."""
    eager, static = on(bundled_cpu, "eager"), on(bundled_cpu, "static")
    for drafter in ("features", "model", "features"):
        s = RunSettings(gamma=4, max_new_tokens=30, seed=5, drafter=drafter)
        same_runs(speculative_generate(eager, "KING HENRY.\n", s), speculative_generate(static, "KING HENRY.\n", s),
                  bundled_cpu.vocab_size)


def test_a_stop_inside_a_features_round_drops_it_and_the_next_run_is_unharmed(bundled_cpu):
    static, eager = on(bundled_cpu, "static"), on(bundled_cpu, "eager")
    s = RunSettings(gamma=4, max_new_tokens=30, seed=2, drafter="features")
    cut = speculative_generate(static, "ROMEO.\n", s, stop=StopAfter(12))
    assert cut.stats.stopped == "stopped" and len(cut.token_ids) < 30
    same_runs(speculative_generate(eager, "ROMEO.\n", s), speculative_generate(static, "ROMEO.\n", s),
              bundled_cpu.vocab_size)


@pytest.fixture(scope="module")
def emulator():
    emu = Emulator()
    yield emu
    print(f"\nfeatures graph emulation: {emu.captures} captures, {emu.replays} replays, "
          f"{len(emu.problems)} host reads")


@pytest.mark.slow   # ~15 s of CPU
def test_the_graph_path_equals_eager_for_every_rule_sampling_and_gamma(emulator):
    """Two samplings with a net without fusion, two with a net fusing the tiny target's middle layer
    (each pair has its own engine, so each captures its own steps)."""
    pair = tiny_pair(vocab=8, seed=2)
    twins = {}
    for layers in ((), (1,)):
        net = random_net(pair.target, seed=7, layers=layers)
        twins[layers] = on(pair, "eager", net), on(pair, "static", net, emulator)
    prompts = itertools.cycle([[1, 2, 3], [5, 1], [4, 6, 1, 7, 2, 3, 5, 1, 6, 2, 4, 7]])
    combos = itertools.product(SAMPLINGS.items(), list(Rule), (1, 3, 8))
    for k, ((kind, sampling), rule, gamma) in enumerate(combos):
        eager, graphed = twins[() if kind in ("greedy", "top-k") else (1,)]
        s = RunSettings(gamma=gamma, max_new_tokens=14, sampling=sampling, rule=rule, seed=gamma, drafter="features")
        # Traced and untraced verify steps are captured apart; γ = 3 always traced, since its run is the
        # first to capture a sampling shape's chained draft step (a capture's mistakes show on the q rows).
        prompt, trace = next(prompts), gamma == 3 or k % 2 == 0
        a = speculative_generate(graphed, prompt, s, trace=trace)
        assert a.models["engine"] == "emulated graphs"
        b = speculative_generate(eager, prompt, s)
        assert a.token_ids == b.token_ids, (kind, rule, gamma, trace)
        if trace:   # every draft, its q and beta: the output alone would hide a wrong q (it is exact anyway)
            same_runs(b, a, pair.vocab_size)
    assert emulator.replays > emulator.captures > 0
    assert not emulator.problems, emulator.problems[:5]


@pytest.mark.slow
def test_the_graph_path_on_the_bundled_pair_with_the_shipped_drafter(emulator, bundled_cpu):
    eager, graphed = on(bundled_cpu, "eager"), on(bundled_cpu, "static", emulator=emulator)
    for sampling, seed in ((SamplingConfig(), 1), (SamplingConfig(temperature=0), 2)):
        s = RunSettings(gamma=4, max_new_tokens=24, sampling=sampling, seed=seed, drafter="features")
        prompt = "ROMEO.\nBut soft,"
        a, b = speculative_generate(graphed, prompt, s), speculative_generate(eager, prompt, s)
        assert a.models["engine"] == "emulated graphs"
        same_runs(b, a, bundled_cpu.vocab_size)
    assert not emulator.problems, emulator.problems[:5]


def test_control_a_features_step_that_reads_its_start_on_the_host_is_caught(monkeypatch):
    """The features step must read where to write from the device: one that takes its positions from
    a Python int freezes them at capture, and its replays then write the wrong cache slots."""
    from specdec.engine import static_cache

    real = static_cache._causal

    def frozen(start, slots, n):
        k = int(start)   # a host read: the emulator flags it, and a graph would freeze it
        return real(torch.tensor(k), slots, n)
    monkeypatch.setattr(static_cache, "_causal", frozen)
    emu = Emulator()
    pair = tiny_pair(vocab=8, seed=2)
    net = random_net(pair.target, seed=7)
    graphed = on(pair, "static", net, emu)
    speculative_generate(graphed, [1, 2, 3], RunSettings(gamma=3, max_new_tokens=10, seed=1, drafter="features"))
    assert any("_local_scalar_dense" in p or "item" in p for p in emu.problems), emu.problems[:3]
