"""The CUDA-graph path proven on the CPU: every captured step recorded once and replayed with its
Python values frozen (tests/graph_emulation.py), against the static engine (the same steps run as
functions every time) and the eager decoder, token for token, with no host read inside a step.

Two negative controls must be caught: a step that reads `start` as a Python int (its positions
and mask freeze at capture), and a capture without warm-up on a one-token prompt (the cache's
lazy allocation is recorded into the tape, so each replay writes a fresh cache).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from graph_emulation import Emulator
from specdec import Rule, RunSettings, SamplingConfig, autoregressive_generate, load_pair, speculative_generate
from specdec.engine.engine import Engine
from specdec.engine.static_cache import StaticModel
from specdec.models.pair import ModelPair
from tiny import tiny_pair

SAMPLINGS = {"greedy": SamplingConfig(temperature=0), "T1": SamplingConfig(),
             "top-k": SamplingConfig(temperature=0.8, top_k=3), "top-p": SamplingConfig(temperature=1.2, top_p=0.8)}
RULES = list(Rule)
GAMMAS = (1, 3, 8)
TOTALS = {"runs": 0, "equal": 0, "controls caught": 0}


def twin(pair: ModelPair, emulator: Emulator | None = None) -> ModelPair:
    """The same models on the static engine; with an emulator, on the graph path it emulates."""
    out = ModelPair(pair.tokenizer, pair.target, pair.draft, pair.target_name, pair.draft_name,
                    pair.device, pair.dtype, pair.label, engine="static")
    if emulator is not None:
        out._engine = Engine(out, graphs=True, capture=emulator)
    return out


@pytest.fixture(scope="module")
def emulator():
    emu = Emulator()
    yield emu
    print(f"\ngraph emulation: {TOTALS['runs']} runs ({TOTALS['equal']} equal to the static engine and the eager "
          f"decoder), {emu.captures} captures, {emu.replays} replays, {len(emu.problems)} host reads; "
          f"controls caught {TOTALS['controls caught']} of 2")


def same_run(a, b) -> bool:
    """Same tokens, and the same decisions round by round (traced runs)."""
    return a.token_ids == b.token_ids and [(r.n_accepted, r.end_token) for r in a.rounds] == \
        [(r.n_accepted, r.end_token) for r in b.rounds]


def _rounds(gen) -> list[dict]:
    """A run's rounds without their wall-clock seconds."""
    return [{k: v for k, v in dataclasses.asdict(r).items() if not k.endswith("_seconds")} for r in gen.rounds]


def check(pair, graphed, static, prompt, settings: RunSettings, traces=(True, False)) -> None:
    """The graph path, traced and not, against one traced run of the static engine and of the
    eager decoder (tracing changes no token: test_engine checks it)."""
    eager_run = speculative_generate(pair, prompt, settings)
    static_run = speculative_generate(static, prompt, settings)
    for trace in traces:
        a = speculative_generate(graphed, prompt, settings, trace=trace)
        TOTALS["runs"] += 1
        assert a.models["engine"] == "emulated graphs"
        if trace:
            assert same_run(a, static_run) and same_run(a, eager_run), settings
            # The trace rows are reduced inside the captured verify step: a replay records the
            # same Rounds as the static engine's calls, every kept id and sum.
            assert _rounds(a) == _rounds(static_run), settings
        else:
            assert a.token_ids == static_run.token_ids == eager_run.token_ids, settings
        TOTALS["equal"] += 1


@pytest.mark.slow   # ~10 s of CPU each
@pytest.mark.parametrize("kind", list(SAMPLINGS))
def test_graph_path_equals_static_and_eager_for_every_rule_trace_and_gamma(emulator, kind):
    pair = tiny_pair(vocab=8, seed=2)
    graphed, static = twin(pair, emulator), twin(pair)
    prompts = itertools.cycle([[1, 2, 3], [5], [4, 6, 1, 7, 2]])   # one-token prompts feed nothing eagerly
    for rule, gamma in itertools.product(RULES, GAMMAS):
        s = RunSettings(gamma=gamma, max_new_tokens=12, sampling=SAMPLINGS[kind], rule=rule, seed=gamma)
        check(pair, graphed, static, next(prompts), s)
    s = RunSettings(max_new_tokens=20, sampling=SAMPLINGS[kind], seed=4)   # the target alone: graphed steps
    assert autoregressive_generate(graphed, [3, 1], s).token_ids == autoregressive_generate(pair, [3, 1], s).token_ids
    assert not emulator.problems, emulator.problems[:5]


def test_graph_path_on_the_bundled_pair(emulator):
    pair = load_pair(device="cpu")
    graphed, static = twin(pair, emulator), twin(pair)
    for kind, rule in (("T1", Rule.EXACT), ("top-p", Rule.SKIP_ADJUSTMENT)):
        s = RunSettings(gamma=4, max_new_tokens=20, sampling=SAMPLINGS[kind], rule=rule, seed=1)
        check(pair, graphed, static, "ROMEO.\nBut soft,", s, traces=(True,))
    assert not emulator.problems, emulator.problems[:5]


def diverges(pair, emu: Emulator, prompt, settings: list[RunSettings]) -> bool:
    graphed, static = twin(pair, emu), twin(pair)
    return any(speculative_generate(graphed, prompt, s).token_ids != speculative_generate(static, prompt, s).token_ids
               for s in settings)


SEEDS = [RunSettings(gamma=4, max_new_tokens=24, seed=k) for k in range(4)]


def test_control_a_step_that_reads_start_as_a_python_int_is_caught(monkeypatch):
    def forward_reading_start(self, ids, keep=0):   # the bug: positions from a host read of `start`
        n = ids.shape[-1]
        positions = int(self.start) + self.slots[:n]
        mask = (self.slots[None, :] <= positions[:, None])[None, None]
        if self.ready:
            for layer in self.cache.layers:
                layer.cumulative_length.copy_(self.start)
        out = self.model(input_ids=ids.reshape(1, n), position_ids=positions[None], attention_mask=mask,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=keep)
        self.ready = True
        return out.logits[0]

    monkeypatch.setattr(StaticModel, "forward", forward_reading_start)
    emu = Emulator()
    assert diverges(tiny_pair(vocab=8, seed=2), emu, [1, 2, 3], SEEDS)
    assert any("aten.item" in p or "_local_scalar_dense" in p for p in emu.problems), emu.problems[:3]
    TOTALS["controls caught"] += 1


def test_control_a_capture_without_warm_up_is_caught():
    pair = tiny_pair(vocab=8, seed=2)
    assert not diverges(pair, Emulator(), [5], SEEDS)          # warmed up: equal
    assert diverges(pair, Emulator(warmup=0), [5], SEEDS)      # not: the first step's lazy cache is taped
    TOTALS["controls caught"] += 1


def test_the_host_read_check_sees_python_level_reads():
    emu = Emulator()
    x = torch.arange(4.0)
    emu(lambda: x * 2)
    assert emu.problems == []
    for read in (lambda: x[x > 1], lambda: x.sum().item(), lambda: x.tolist(), lambda: x.nonzero(),
                 lambda: x.to("meta")):
        emu = Emulator(warmup=0)
        emu(read)
        assert emu.problems, read


# ---------------------------------------------------------------- the engine around its graphs

class FailingCapture(Emulator):
    """An emulated capture that fails for the steps `fails(key-less fn)` picks: as a step that
    cannot be captured on a GPU does."""

    def __init__(self, fail_first: int):
        super().__init__()
        self.fail_first = fail_first

    def __call__(self, fn):
        if self.fail_first > 0:
            self.fail_first -= 1
            raise RuntimeError("operation not permitted when stream is capturing")
        return super().__call__(fn)


def test_a_failed_capture_costs_only_its_own_step_and_the_run_says_what_ran():
    pair = tiny_pair(vocab=8, seed=2)
    emu = FailingCapture(fail_first=1)
    graphed = twin(pair, emu)
    s = RunSettings(gamma=3, max_new_tokens=12, seed=1)
    first = speculative_generate(graphed, [1, 2, 3], s)
    assert first.token_ids == speculative_generate(pair, [1, 2, 3], s).token_ids
    engine = graphed._engine
    assert engine.graphs and "stream is capturing" in engine.failure
    assert first.models["engine"] != "emulated graphs"     # recorded after the run: a step ran without its graph
    captures = emu.captures
    second = speculative_generate(graphed, [1, 2, 3], s.with_(sampling=SamplingConfig(temperature=0)))
    assert emu.captures > captures and second.models["engine"] == "emulated graphs"


def test_the_graph_cache_evicts_the_least_recently_used(monkeypatch):
    import specdec.engine.graphs as engine_module

    monkeypatch.setattr(engine_module, "MAX_GRAPHS", 2)
    emu = Emulator()
    engine = twin(tiny_pair(), emu)
    engine = Engine(engine, graphs=True, capture=emu)
    engine.start(8, 1)
    x = torch.zeros(1)
    for key in "ABACA":            # A is used again before C arrives: B is the one to go
        engine._run(key, lambda key: lambda: x + 1)
    assert emu.captures == 3


def test_a_run_whose_captures_all_failed_is_not_recorded_as_graphed():
    pair = tiny_pair(vocab=8, seed=2)
    gen = speculative_generate(twin(pair, FailingCapture(fail_first=10**6)), [1, 2, 3], RunSettings(max_new_tokens=8))
    assert gen.models["engine"] == "static cache (a graph capture failed)"


def test_moving_a_sampling_slider_captures_nothing_new():
    pair = tiny_pair(vocab=8, seed=2)
    emu = Emulator()
    graphed = twin(pair, emu)
    engine = graphed._engine
    first = [SamplingConfig(temperature=0.7), SamplingConfig(temperature=0.9, top_k=3),
             SamplingConfig(temperature=1.1, top_p=0.8)]
    moved = [SamplingConfig(temperature=1.6), SamplingConfig(temperature=0.5, top_k=5),
             SamplingConfig(temperature=0.8, top_p=0.6)]
    for sampling in first:   # the same steps every time: a draft step, a target step, verifies of 2 and 4
        engine.costs([1, 2, 3], [1, 2, 4], sampling, repeats=1)
    captures = emu.captures
    for sampling in moved:
        engine.costs([1, 2, 3], [1, 2, 4], sampling, repeats=1)
    assert captures == 3 * 4 and emu.captures == captures
    for sampling in moved:   # and the graphs read the moved numbers
        s = RunSettings(gamma=3, max_new_tokens=12, sampling=sampling, seed=5)
        want = speculative_generate(pair, [1, 2, 3], s).token_ids
        assert speculative_generate(graphed, [1, 2, 3], s).token_ids == want
