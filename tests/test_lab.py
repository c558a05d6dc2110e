"""The exactness lab: closed forms against Monte Carlo through `sampling.verify`, statistics, CLI, tab.

Every threshold is stated where it is used; seeds are fixed, so a run is reproducible, and each
test can fail (the last tests check that the same machinery catches a broken rule).
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch
from scipy import stats

import bounds
from specdec.cli.main import main
from specdec.core import threads as core_threads
from specdec.core.sampling import Rule
from specdec.core.settings import RunSettings
from specdec.explain import lab, montecarlo
from specdec.trace.outcomes import Ending, Status
from specdec.trace.spine import Dist, Generation, Position, Round, Stats

N_RANDOM = 200
MC_SAMPLES = 10_000          # trials per (case, rule) in the closed-form vs Monte Carlo check
FAMILY_ALPHA = 0.001         # chance that the whole check fails by bad luck when the code is right


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: these small batched ops gain nothing from a second one, and lose a lot
    when the CPU is shared (measured 3.5x slower with 2 threads next to a training job)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_cases(n: int = N_RANDOM, seed: int = 0, v_max: int = lab.MAX_TOKENS):
    """n random (p, q) pairs, vocabulary 2..20, about a third of the entries zeroed (q and p keep
    at least one positive entry), zero-padded to v_max so they can run as one batch."""
    rng = np.random.default_rng(seed)
    P, Q, sizes = np.zeros((n, v_max)), np.zeros((n, v_max)), []
    for c in range(n):
        v = int(rng.integers(2, v_max + 1))
        for M in (P, Q):
            d = rng.dirichlet(np.full(v, rng.choice([0.3, 1.0, 3.0])))
            d[rng.random(v) < 0.33] = 0.0
            if d.sum() == 0:
                d[rng.integers(v)] = 1.0
            M[c, :v] = d / d.sum()
        sizes.append(v)
    return P, Q, sizes


def preset_cases():
    P, Q = np.zeros((len(lab.PRESETS), lab.MAX_TOKENS)), np.zeros((len(lab.PRESETS), lab.MAX_TOKENS))
    for c, name in enumerate(lab.PRESETS):
        _, p, q = lab.preset(name)
        P[c, :len(p)], Q[c, :len(q)] = p, q
    return P, Q


def test_exact_decomposition_sums_to_p():
    P, Q, _ = random_cases()
    P2, Q2 = preset_cases()
    for p, q in zip(np.vstack([P, P2]), np.vstack([Q, Q2])):
        a, r = lab.parts(p, q, Rule.EXACT)
        tol = bounds.rounding(lab.MAX_TOKENS, "float32")   # float32 sums over the padded row
        assert np.abs(a + r - p).max() < tol
        assert np.all(a >= 0) and np.all(r >= 0)
        assert abs(a.sum() - lab.beta(p, q)) < tol          # accepted mass is beta


@pytest.mark.slow
def test_closed_form_matches_monte_carlo_for_every_rule():
    """Per-token exact binomial acceptance regions around n * closed_form. Multiple comparisons:
    M = (cases) x (rules) x (tokens in each case's vocabulary) tests in all, each at level
    FAMILY_ALPHA / M (Bonferroni), so the whole check fails by chance with probability < 0.001."""
    P, Q, sizes = random_cases()
    P2, Q2 = preset_cases()
    P, Q = np.vstack([P, P2]), np.vstack([Q, Q2])
    sizes = sizes + [lab.MAX_TOKENS] * len(P2)
    rules = lab.RULES
    m_tests = len(rules) * sum(sizes)
    per_test = FAMILY_ALPHA / m_tests
    for k, rule in enumerate(rules):
        counts, accepted = montecarlo.simulate_many(P, Q, rule, MC_SAMPLES, seed=100 + k)
        counts = counts[:, -1]
        assert np.all(counts.sum(-1) == MC_SAMPLES)
        for c in range(len(P)):
            f = np.clip(lab.closed_form(P[c], Q[c], rule), 0, 1)
            lo = stats.binom.ppf(per_test / 2, MC_SAMPLES, f)
            hi = stats.binom.isf(per_test / 2, MC_SAMPLES, f)
            bad = (counts[c] < lo) | (counts[c] > hi)
            assert not bad.any(), (rule, c, P[c], Q[c], counts[c] / MC_SAMPLES, f)
            # The acceptance rate too (one more binomial test per case; same level).
            a = lab.predicted_acceptance(P[c], Q[c], rule)
            assert stats.binom.ppf(per_test / 2, MC_SAMPLES, a) <= accepted[c] <= \
                stats.binom.isf(per_test / 2, MC_SAMPLES, a), (rule, c, accepted[c], a)


def test_the_check_has_power():
    """The same binomial check rejects the claim "skip adjustment follows p" on the
    over-confident preset: the closed-form comparison is not vacuous."""
    _, p, q = lab.preset("over-confident")
    counts = montecarlo.simulate(p, q, Rule.SKIP_ADJUSTMENT, MC_SAMPLES, seed=3)
    hi = stats.binom.isf(1e-7, MC_SAMPLES, p)
    lo = stats.binom.ppf(1e-7, MC_SAMPLES, p)
    assert ((counts < lo) | (counts > hi)).any()


def test_chi_square_accepts_exact_and_rejects_biased_rules():
    """10^5 samples, alpha = 0.001, over-confident preset, fixed seed."""
    tokens, p, q = lab.preset("over-confident")
    res = lab.run(tokens, p, q, 100_000, seed=0)
    exact = res.results[Rule.EXACT]
    assert exact.pvalue > 0.001 and not exact.rejects_p
    tol = bounds.rounding(len(p), "float32")   # the closed form runs in float32 over the preset's row
    assert exact.bias < tol and exact.tv < 0.01
    for rule in (Rule.SKIP_ADJUSTMENT, Rule.ACCEPT_ALL):
        assert res.results[rule].pvalue < 0.001 and res.results[rule].rejects_p
        assert abs(res.results[rule].tv - res.results[rule].bias) < 0.01
    # beta = 1 - TV(p, q), and the observed acceptance matches it within 4 standard errors.
    assert abs(res.beta - (1 - lab.tv(p, q))) < tol
    se = np.sqrt(res.beta * (1 - res.beta) / res.n)
    assert abs(exact.acceptance_observed - res.beta) < 4 * se


def test_convergence_exact_falls_biased_levels_off():
    tokens, p, q = lab.preset("over-confident")
    res = lab.run(tokens, p, q, 100_000, seed=1)
    ex, skip = res.results[Rule.EXACT], res.results[Rule.SKIP_ADJUSTMENT]
    assert res.curve_n[-1] == 100_000 and res.curve_n == sorted(res.curve_n)
    # exact: at 10^5 samples within 3x the expected noise floor; falls by > 10x from N = 100.
    i100 = res.curve_n.index(100)
    assert ex.curve_tv[-1] < 3 * lab.noise_floor(p, 100_000)
    assert ex.curve_tv[-1] < ex.curve_tv[i100] / 10
    # skip adjustment: levels off at its closed-form bias (0.135), within 0.01.
    assert abs(skip.curve_tv[-1] - skip.bias) < 0.01 and skip.bias > 0.1


def test_simulation_is_reproducible_and_uses_no_global_rng():
    _, p, q = lab.preset("under-confident")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a = montecarlo.simulate(p, q, Rule.EXACT, 5000, seed=7)
    assert torch.equal(state, torch.get_rng_state())
    b = montecarlo.simulate(p, q, Rule.EXACT, 5000, seed=7)
    c = montecarlo.simulate(p, q, Rule.EXACT, 5000, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_never_emits_impossible_tokens():
    """Disjoint supports: the exact rule rejects every draft and never emits a token with p = 0."""
    tokens, p, q = lab.preset("disjoint")
    res = lab.run(tokens, p, q, 20_000, seed=0)
    ex = res.results[Rule.EXACT]
    assert ex.acceptance_observed == 0.0 and np.all(ex.counts[p == 0] == 0)
    acc_all = res.results[Rule.ACCEPT_ALL]
    assert acc_all.chi2 == float("inf") and acc_all.pvalue == 0.0


def test_chi_square_edge_cases():
    assert lab.chi_square([10, 0], [1.0, 0.0]) == (0.0, 1.0)
    assert lab.chi_square([10, 1], [1.0, 0.0]) == (float("inf"), 0.0)
    stat, pv = lab.chi_square([50, 50], [0.5, 0.5])
    assert stat == 0 and pv == 1


@pytest.mark.parametrize("tokens,p,q,msg", [
    (["a", "b"], [0.5, -0.1], [0.5, 0.5], "non-negative"),
    (["a", "b"], [0.5, 0.5], [0, 0], "q has no mass"),
    (["a", "a"], [0.5, 0.5], [0.5, 0.5], "unique"),
    (["a"], [1.0], [1.0], "2 to 20"),
    (["a", "b"], [0.5, float("nan")], [0.5, 0.5], "non-finite"),
    (["a", ""], [0.5, 0.5], [0.5, 0.5], "name"),
])
def test_validate_rejects_bad_input(tokens, p, q, msg):
    with pytest.raises(ValueError, match=msg):
        lab.validate(tokens, p, q)


def test_validate_normalises():
    _, p, q, notes = lab.validate(["a", "b"], [2, 2], [1, 3])
    assert np.allclose(p, [0.5, 0.5]) and np.allclose(q, [0.25, 0.75])
    assert any("p summed to 4" in n for n in notes)


def test_presets_are_valid():
    for name in lab.PRESETS:
        tokens, p, q = lab.preset(name)
        lab.validate(tokens, p, q, normalise=False)
    assert lab.beta(*lab.preset("disjoint")[1:]) == 0
    _, p, q = lab.preset("p == q")
    assert abs(lab.beta(p, q) - 1) < bounds.rounding(len(p), "float32")   # a float32 sum over the row


def _generation():
    ids = list(range(25))
    p_probs = [0.5, 0.2] + [0.01] * 23
    q_probs = [0.1, 0.6] + [0.005] * 23
    pos = Position(draft_token=1, p_draft=0.2, q_draft=0.6, ratio=1 / 3, u=0.5, status=Status.REJECTED, beta=0.4,
                   p=Dist(ids, p_probs, rest=1 - sum(p_probs)), q=Dist(ids, q_probs, rest=1 - sum(q_probs)))
    rnd = Round(index=0, start=0, gamma=1, positions=[pos], n_accepted=0, ending=Ending.RESIDUAL, end_token=0,
                end_dist=Dist([0], [1.0], 0.0), end_p=Dist([0], [0.5], 0.5), end_q=Dist([0], [0.1], 0.9),
                residual_mass=0.4, emitted=[0], draft_seconds=0.0, verify_seconds=0.0)
    return Generation(prompt="x", prompt_ids=[0], token_ids=[0], text=" the", rounds=[rnd], stats=Stats(),
                      settings=RunSettings(gamma=1), models={}, token_text={0: " the", 1: " the", 2: "\n"})


def test_from_position_keeps_exact_mass():
    gen = _generation()
    tokens, p, q = lab.from_position(gen, 0, 0)
    assert len(tokens) == lab.MAX_TOKENS and tokens[-1] == lab.OTHER
    # ordered by max(p, q): id 1 (q = 0.6), then id 0 (p = 0.5); duplicate texts made unique
    assert tokens[0] == "␣the" and tokens[1] == "␣the #0" and tokens[2] == "↵"
    tol = bounds.rounding(2 * lab.MAX_TOKENS, "float64")   # float64 sums and folds over the kept ids
    assert abs(p.sum() - 1) < tol and abs(q.sum() - 1) < tol
    assert p[1] == 0.5 and q[0] == 0.6
    # 25 kept ids: the 6 smallest fold into "(everything else)" with the rest mass
    assert abs(p[-1] - (1 - 0.7 - 0.01 * 23) - 6 * 0.01) < tol
    lab.validate(tokens, p, q, normalise=False)
    with pytest.raises(ValueError, match="no drafted position"):
        lab.from_position(gen, 3, 0)


def test_cli(capsys):
    """`specdec lab` through the one CLI: tables on success, one line and exit 2 on bad values."""
    assert main(["lab", "--preset", "over-confident", "--samples", "20000", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^exact +\S+ +\S+ +\S+ +\S+ +not rejected$", out, re.M) and "chi-square" in out   # short names
    assert re.search(r"^accept all +\S+ +\S+ +\S+ +\S+ +rejected$", out, re.M)
    assert main(["lab", "--p", "0.5,0.3,0.2", "--q", "0.2,0.3,0.5", "--samples", "1000"]) == 0
    for bad in (["--samples", "0"], ["--p", "0.5,0.5"], ["--preset", "nope"], ["--p", "1,x", "--q", "1,1"],
                ["--p", "1,1", "--q", "0,0"], ["--what"]):
        assert main(["lab", *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("specdec: error:"), (bad, err)


def test_cli_bench_prints_rate(capsys, monkeypatch):
    monkeypatch.setattr(montecarlo, "benchmark_vocab", lambda v, threads=1: 0.5)
    assert main(["lab", "--bench"]) == 0
    out = capsys.readouterr().out
    assert "V = 20: 1,000,000 samples in 0.500 s = 2,000,000 samples/s" in out


@pytest.mark.slow
def test_million_samples_speed(capsys):
    """Print the 10^6-sample figure (the CPU is shared in CI, so the bound is loose: 10 s)."""
    s = montecarlo.benchmark_vocab(20, repeats=1)
    with capsys.disabled():
        print(f"\n[lab bench] 10^6 samples, V = 20, exact rule: {s:.3f} s ({1e6 / s:,.0f} samples/s)")
    assert s < 10


def test_ui_callbacks_without_a_browser():
    """The tab's callbacks on plain values: table parsing, clear errors, taking a trace position."""
    gr = pytest.importorskip("gradio")
    import pandas as pd

    from specdec.app.page import lab_tab

    out = lab_tab.load_preset("disjoint")
    frame, msg = out["table"], out["status"]
    assert list(frame.columns) == lab_tab.COLUMNS and "Preset **disjoint**" in msg
    tokens, p, q = lab_tab.parse_frame(frame)
    assert tokens == list(lab.preset("disjoint")[0]) and sum(q) == pytest.approx(1)
    with pytest.raises(ValueError, match="q in row 2"):
        lab_tab.parse_frame(pd.DataFrame({"token": ["a", "b"], "p": [1, 0], "q": [1, "zz"]}))
    with pytest.raises(gr.Error, match="non-negative"):
        lab_tab.run_lab(pd.DataFrame({"token": ["a", "b"], "p": [1, -1], "q": [1, 1]}), 100, 0)
    with pytest.raises(gr.Error, match="Decode tab first"):
        lab_tab.take_from_run(None, (None, None))
    taken = lab_tab.take_from_run(_generation(), (None, None))   # falls back to the first position
    frame, msg = taken["table"], taken["status"]
    assert frame["token"].iloc[-1] == lab.OTHER and "round 1, drafted position 1" in msg
    assert "rejected, β = 0.4000" in msg and taken["preset"] == lab_tab.FROM_RUN   # never blank
    out = lab_tab.run_lab(frame, 2000, 0)
    assert "2,000 trials per rule" in out["status"] and len(out["summary"]) == len(lab.RULES)
    assert list(out) == lab_tab.RUN_OUTPUTS


def test_tab_handlers_return_component_dicts():
    """Each registered handler returns {component: value} for components among its outputs, in the
    order the API reports them."""
    gr = pytest.importorskip("gradio")
    from specdec.app.page import lab_tab

    with gr.Blocks() as demo:
        lab_tab.build_lab_tab(gr.State(None), gr.State((None, None)))
    handlers = {f.api_name: f for f in demo.fns.values()}
    assert set(handlers) == {"lab_preset", "lab_from_run", "lab_run"}
    preset = handlers["lab_preset"].fn("under-confident")
    assert list(preset) == handlers["lab_preset"].outputs
    taken = handlers["lab_from_run"].fn(_generation(), (0, 0))
    assert list(taken) == handlers["lab_from_run"].outputs
    ran = handlers["lab_run"].fn(next(iter(preset.values())), 1000, 0)
    assert list(ran) == handlers["lab_run"].outputs
    status = handlers["lab_run"].outputs[0]
    assert "1,000 trials per rule" in ran[status]


def _in_new_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


def test_a_lab_run_from_a_handler_thread_leaves_every_thread_count_alone(monkeypatch):
    """The app runs the lab in a request thread. torch.set_num_threads there (even restored
    afterwards) changes the count that every thread set up meanwhile takes, so the lab tab could
    override SPECDEC_THREADS for everyone. The lab limits only a worker thread of its own."""
    seen = {}
    simulate = montecarlo._simulate

    def spy(*args):
        seen["lab"] = torch.get_num_threads()
        seen["thread started during the run"] = _in_new_thread(torch.get_num_threads)
        return simulate(*args)

    monkeypatch.setattr(montecarlo, "_simulate", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)          # the app's process-wide count (SPECDEC_THREADS=2)
    try:
        def handler():
            seen["result"] = lab.run(*lab.preset("p == q"), 1000, seed=0)
            seen["handler after"] = torch.get_num_threads()

        _in_new_thread(handler)
        assert seen["result"].n == 1000
        assert torch.get_num_threads() == 2
        assert _in_new_thread(torch.get_num_threads) == 2
        assert seen["thread started during the run"] == 2 and seen["handler after"] == 2
        if core_threads._OMP_SET_NUM_THREADS is not None:      # OpenMP builds: the lab's own worker used 1
            assert seen["lab"] == 1
    finally:
        torch.set_num_threads(before)


def test_result_carries_what_charts_and_tables_show():
    """run() computes every number once with the tested functions; tables read them back."""
    tokens, p, q = lab.preset("over-confident")
    res = lab.run(tokens, p, q, 5000, seed=4)
    assert res.notes == [] and np.allclose(res.noise_floor, lab.noise_floor(p, res.curve_n))
    for rule, r in res.results.items():
        assert np.array_equal(r.output, lab.closed_form(p, q, rule))
        assert r.bias == lab.bias(p, q, rule)
        assert r.acceptance_predicted == lab.predicted_acceptance(p, q, rule)
        lo, hi = lab.proportion_interval(round(r.acceptance_observed * res.n), res.n)
        assert (r.acceptance_low, r.acceptance_high) == (float(lo), float(hi))
        assert r.acceptance_low <= r.acceptance_observed <= r.acceptance_high
        assert len(r.curve_tv) == len(res.curve_n)
    _, rows = lab.acceptance_table(res)
    exact = res.results[Rule.EXACT]
    assert rows[0][3] == f"[{lab._fmt(exact.acceptance_low)}, {lab._fmt(exact.acceptance_high)}]"
    _, rows = lab.convergence_table(res)
    assert rows[-2][1] == lab._fmt(float(res.noise_floor[-1]))
    assert lab.run(["a", "b"], [2, 2], [1, 3], 100, seed=0).notes[0].startswith("p summed to 4")


@pytest.mark.parametrize("drafter", ["model", "features"])
def test_take_from_run_is_exact_on_real_runs(bundled, drafter):
    """From a real trace, the lab's table has the position's beta (computed at decode time on the
    model's full rows), and the exact rule's closed form on it reproduces the stored p, both to
    float32 rounding: the stored rows come from a float32 softmax over the whole vocabulary (they
    add up to 1 only to that rounding), and the closed form runs in float32 over the lab's rows.
    With either drafter that has a q of its own (the draft model, the features drafter).
    The negative control: the skip rule's closed form misses p by far more than that bound."""
    from specdec import SamplingConfig, speculative_generate
    from specdec.core.sampling import Rule

    vocab = bundled.target.config.vocab_size   # 2,048 for the bundled pair
    checked, skip_miss = 0, 0.0
    for temperature, top_k in ((0.7, 0), (1.0, 0), (1.3, 40)):
        settings = RunSettings(gamma=4, max_new_tokens=32, seed=1, drafter=drafter,
                               sampling=SamplingConfig(temperature=temperature, top_k=top_k))
        gen = speculative_generate(bundled, "KING LEAR.\nBlow, winds,", settings)
        for r, i in lab.drafted_positions(gen):
            tokens, p, q = lab.from_position(gen, r, i)
            pos = gen.rounds[r].positions[i]
            assert len(tokens) <= lab.MAX_TOKENS
            # float32 work over the vocabulary's softmax row, then over the lab's rows
            bound = bounds.rounding(vocab + len(p), "float32")
            assert abs(lab.beta(p, q) - pos.beta) < bound, (lab.beta(p, q) - pos.beta, bound)
            assert np.abs(lab.closed_form(p, q, Rule.EXACT) - p).max() < bound
            skip_miss = max(skip_miss, np.abs(lab.closed_form(p, q, Rule.SKIP_ADJUSTMENT) - p).max())
            checked += 1
    assert checked > 20
    assert skip_miss > 100 * bounds.rounding(vocab + lab.MAX_TOKENS), skip_miss   # the bound can fail


def test_a_runs_rows_that_miss_1_say_why_before_the_lab_normalises_them():
    """A real model's float32 p over 49,152 ids sums to 1 +- 1.5e-5: taken into the lab, the status
    says why before the lab's own "p summed to ...; normalised to 1" can puzzle; rows within the
    lab's tolerance get no such sentence."""
    pytest.importorskip("gradio")
    from specdec.app.page import lab_tab

    q = np.array([0.5, 0.5])
    note = lab_tab.off_one_note(np.array([0.6, 0.4 + 1.5e-5]), q)
    # One sum, one way: the same number never reads two ways on one page.
    assert "p sums to 1.000015, not 1" in note and "float32" in note and "q sums" not in note
    assert lab.run(["a", "b"], [0.6, 0.4 + 1.5e-5], q, 100, seed=0).notes[0].startswith("p summed to 1.000015,")
    assert lab_tab.off_one_note(np.array([0.6, 0.4 + lab.SUM_TOLERANCE / 2]), q) == ""


def test_new_p_and_q_clear_the_last_lab_runs_results():
    """A preset or a position from the run replaces the table: the charts and tables of the last
    lab run described other p and q, so both empty them."""
    pytest.importorskip("gradio")
    from specdec.app.page import lab_tab

    for out in (lab_tab.load_preset("disjoint"), lab_tab.take_from_run(_generation(), (0, 0))):
        assert set(lab_tab.RESULT_OUTPUTS) <= set(out)
        assert all(out[name] is None for name in lab_tab.VIEWS)
        assert len(out["summary"]) == 0


def test_the_step_viewer_sends_its_position_to_the_lab_and_the_glossary_is_above_the_tabs():
    """The step viewer's button runs the lab's "take from the last run" on the shown position (the
    same outputs), then opens the lab's tab; the glossary sits above the tabs, so every tab reaches it."""
    gr = pytest.importorskip("gradio")
    from specdec.app.page import lab_tab, layout
    from specdec.app.shows.glossary import GLOSSARY

    demo = layout.build_app()
    blocks = demo.blocks.values()
    button = next(b for b in blocks if getattr(b, "elem_id", None) == "send-to-lab")
    sent = [f for f in demo.fns.values() if (button._id, "click") in [tuple(t) for t in f.targets]]
    assert len(sent) == 1
    ids = [getattr(o, "elem_id", None) for o in sent[0].outputs]
    assert ids[:3] == ["lab-dist", "lab-status", "lab-preset"] and len(ids) == len(lab_tab.FROM_RUN_OUTPUTS)
    glossary = next(b for b in blocks if getattr(b, "elem_id", None) == "glossary")
    tabs = [b for b in blocks if isinstance(b, gr.Tab)]
    assert all(glossary.parent is tab.parent.parent or glossary.parent is tab.parent for tab in tabs)
    for symbol in ("**γ**", "**α**", "**β**", "**TV**", "**c**", "**v(γ)**"):
        assert symbol in GLOSSARY


def test_the_decomposition_names_the_two_tails_apart_in_ten_characters():
    """Cut at 10 characters, both tails of a run's position read "(rest whe…": each tick label is
    now distinct and within the limit (a long token still cut with "…")."""
    from specdec.app.shows import lab_charts

    tokens = [" the", "an_unusually_long_token", *lab.TAIL_NAMES]
    p, q = np.array([0.4, 0.1, 0.3, 0.2]), np.array([0.2, 0.3, 0.1, 0.4])
    fig = lab_charts.decomposition_figure(lab.run(tokens, p, q, n=1000, seed=0))
    ticks = list(fig.layout.xaxis.ticktext)
    assert len(set(ticks)) == len(ticks) and all(len(t) <= lab_charts.TICK_LIMIT for t in ticks), ticks
    assert ticks[1].endswith("…") and "p≥q" in ticks[2] and "p<q" in ticks[3]


def test_the_observed_tv_column_says_its_sampling_noise():
    """A closed-form TV 0.0618 beside an observed 0.0632 read as a disagreement: the observed column
    names the sampling noise of its N (an exact sampler's expected TV), on the page and in a terminal."""
    result = lab.run(["a", "b", "c"], np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), n=20_000, seed=0)
    floor = f"{float(lab.noise_floor(result.p, result.n)):.4f}"
    for short in (False, True):
        headers, rows = lab.summary_table(result, short=short)
        assert headers[2].endswith(f"(noise ≈ {floor})"), headers
    exact = result.results[lab.Rule.EXACT].tv
    assert exact < 3 * float(floor)   # the exact rule's observed TV is that noise alone


def test_the_skip_tv_of_a_runs_position_is_one_number_with_its_reason_on_both_tabs(bundled):
    """The lab's skip TV (0.1848) and the Decode tab's (0.1917) for one position read as a
    contradiction. They differ by a sum's cancellation, checked here: the Decode tab's is over the
    model's full rows, the lab's over its rows, where the rest of the vocabulary is lumped into two
    and |min(p, q) − β p| changes sign inside each. So the lab's is never larger, and the two tabs
    say both numbers with that reason: the step viewer's note quotes the lab's figure exactly as a
    lab run of the taken position gives it, and the lab's run of such a table says why the Decode
    tab's can be larger. A position where the two agree says nothing more (the negative control)."""
    from specdec import SamplingConfig, speculative_generate
    from specdec.app.page import lab_tab
    from specdec.app.shows.step_notes import bias_note
    from specdec.explain.taken import lab_skip_tv

    gen = speculative_generate(bundled, "To be, or not to be", RunSettings(
        gamma=4, max_new_tokens=48, seed=0, sampling=SamplingConfig(temperature=1.0)))
    places = lab.drafted_positions(gen)
    figures = {(r, i): lab_skip_tv(gen, r, i) for r, i in places}
    full = {(r, i): gen.rounds[r].positions[i].skip_tv for r, i in places}
    table = 2 * lab.MAX_TOKENS * 5e-7   # what the table's six decimals can move it by, p's and q's values each
    assert all(figures[k] <= full[k] + table for k in places)   # a cancellation only lowers it
    apart = [k for k in places if f"{figures[k]:.4f}" != f"{full[k]:.4f}"]
    same = [k for k in places if k not in apart]
    assert apart and same
    r, i = apart[0]
    note = bias_note(gen, gen.rounds[r].positions[i])
    assert f"{full[(r, i)]:.4f}" in note and f"the exactness lab shows {figures[(r, i)]:.4f}" in note, note
    assert "lumps the rest of the vocabulary into two rows" in note
    out = lab_tab.run_lab(lab_tab.take_from_run(gen, (r, i))["table"], 1000, 0)
    skip = next(row for row in out["summary"].values.tolist() if row[0] == lab.RULE_NAMES[Rule.SKIP_ADJUSTMENT].long)
    assert skip[1] == lab.closed_form_text(figures[(r, i)])
    assert "the Decode tab's" in out["status"] and "lumped" in out["status"]
    assert "exactness lab" not in bias_note(gen, gen.rounds[same[0][0]].positions[same[0][1]])
    preset = lab_tab.run_lab(lab_tab.load_preset(lab_tab.DEFAULT_PRESET)["table"], 1000, 0)
    assert "the Decode tab's" not in preset["status"]   # no lumped rows, nothing to explain
