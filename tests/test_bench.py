"""The bench: its formulas against hand-computed values, its table, summary and chart on hand-made
results, and one quick real run on the bundled pair. No timing assertions (speed goals are
measured by `python -m specdec bench`, never by timed tests)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.bench import contenders, profiles, report, run
from specdec.bench.chart import speedup_figure
from specdec.bench.contenders import (
    HF_ASSISTED,
    HF_GENERATE,
    HF_LOOKUP,
    SPECDEC_AR,
    SPECDEC_FEATURES,
    SPECDEC_MODEL,
    SPECDEC_NGRAM,
    Contender,
    Run,
)
from specdec.explain import measure, speed

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}


# ---------------------------------------------------------------- formulas

@pytest.mark.parametrize("alpha, gamma, c, expected", [
    (0.0, 4, 0.1, 1 / 1.4),                              # nothing accepted: one token per round, paid 1 + 4c
    (1.0, 4, 0.0, 5.0),                                  # everything accepted, free drafts: gamma + 1
    (1.0, 3, 0.5, 4 / 2.5),
    (0.5, 2, 0.1, (1 - 0.125) / (0.5 * 1.2)),            # 0.875 / 0.6 = 1.4583
    (0.8, 4, 0.05, (1 - 0.8 ** 5) / (0.2 * 1.2)),        # 0.67232 / 0.24 = 2.8013
])
def test_leviathan_speedup_by_hand(alpha, gamma, c, expected):
    assert speed.leviathan_speedup(alpha, gamma, c) == pytest.approx(expected)


def test_leviathan_speedup_refuses_a_probability_outside_0_1():
    with pytest.raises(ValueError):
        speed.leviathan_speedup(1.2, 4, 0.1)


def test_predicted_speedup_by_hand():
    # 3 tokens per round; a round = 4 draft steps of 1 ms + a 5 ms verify; the target alone 4 ms a token.
    assert speed.predicted_speedup(3.0, 4, 0.001, 0.005, 0.004) == pytest.approx(12 / 9)
    # The target alone in this form: one token per round, no drafts, verify = one step.
    assert speed.predicted_speedup(1.0, 0, 0.001, 0.004, 0.004) == pytest.approx(1.0)


def test_quartiles():
    assert report.quartiles([5.0]) == (5.0, 5.0, 5.0)
    assert report.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)


def test_verify_cost_counts_each_forward_at_its_width():
    costs = {"1": 2.0, "2": 2.5, "3": 3.0}
    # two forwards of 3 tokens and one of 1: (3 + 3 + 2) / 3 ms = 2.667 ms = 1.333 steps
    assert report.verify_cost_steps({"3": 2, "1": 1}, costs) == pytest.approx(8 / 3 / 2)
    assert report.verify_cost_steps({"7": 1}, costs) == pytest.approx(1.5)   # wider than measured: the widest
    assert report.verify_cost_steps({}, costs) is None


# ---------------------------------------------------------------- options

@pytest.mark.parametrize("text, expected", [("1-8", list(range(1, 9))), ("1,2,4", [1, 2, 4]), ("4", [4]),
                                            ("3, 1-2", [1, 2, 3]), ("2,2", [2])])
def test_parse_gammas(text, expected):
    assert run.parse_gammas(text) == expected


@pytest.mark.parametrize("text", ["0", "17", "a", "8-1", "1-", ""])
def test_parse_gammas_refuses(text):
    with pytest.raises(ValueError, match="gamma"):
        run.parse_gammas(text)


def test_parse_temperatures():
    assert run.parse_temperatures("1, 0") == [0.0, 1.0]
    for bad in ("-1", "x", "0.0001"):
        with pytest.raises(ValueError, match="temperature"):
            run.parse_temperatures(bad)


def _args(*argv):
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_quick_and_defaults_resolve_and_explicit_options_win(tmp_path):
    quick = run.config_from_args(_args("--quick", "--out", str(tmp_path)))
    assert quick.gammas == run.parse_gammas(run.QUICK["gammas"]) and quick.threads == 1
    assert len(quick.prompts) == run.QUICK["prompts"] and quick.out == tmp_path
    default = run.config_from_args(_args())
    assert default.gammas == list(range(1, 9)) and default.temperatures == [0.0, 1.0]
    assert run.config_from_args(_args("--quick", "--gammas", "2")).gammas == [2]
    # A smoke run keeps to its own folder: it never replaces a full bench's results.
    assert run.config_from_args(_args("--quick")).out == Path("runs/bench-quick") and quick.quick
    assert default.out == Path("runs/bench") and not default.quick


@pytest.mark.parametrize("argv, words", [
    (["--gammas", "0"], "gamma"), (["--temperatures", "-1"], "temperature"),
    (["--max-new-tokens", "0"], "--max-new-tokens"), (["--prompts", "99"], "--prompts"),
    (["--seeds", "0"], "--seeds"), (["--threads", "-2"], "--threads"), (["--top-k", "-1"], "top-k"),
    (["--top-p", "0"], "top-p"),
])
def test_bad_values_raise_one_line_value_errors(argv, words):
    with pytest.raises(ValueError, match=words) as err:
        run.config_from_args(_args(*argv))
    assert "\n" not in str(err.value)


def test_main_turns_a_bad_value_into_exit_2_before_loading_models(capsys):
    assert run.main(["--gammas", "99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specdec: error:") and "gamma" in err[0]


# ---------------------------------------------------------------- contenders and transformers settings

def test_every_contender_once_per_temperature_and_gamma():
    lineup = contenders.contenders([1, 2], [0.0, 1.0])
    assert len(lineup) == 2 * (2 + 5 * 2) and len(set(lineup)) == len(lineup)   # 5 speculative kinds, one untraced
    assert Contender(SPECDEC_AR, 0.0) in lineup and Contender(HF_LOOKUP, 1.0, 2) in lineup
    assert not any(c.kind == SPECDEC_FEATURES for c in lineup)   # no features weights said: no features runs
    with_features = contenders.contenders([1, 2], [0.0, 1.0], features=True)
    assert len(with_features) == 2 * (2 + 6 * 2) and Contender(SPECDEC_FEATURES, 1.0, 2) in with_features


def test_a_pair_without_a_draft_model_has_no_draft_model_contenders():
    lineup = contenders.contenders([1, 2], [0.0], features=True, model=False)
    assert {c.kind for c in lineup} == {SPECDEC_AR, HF_GENERATE, SPECDEC_FEATURES, SPECDEC_NGRAM, HF_LOOKUP}


def test_rotation_runs_everyone_once_per_pass_from_different_starts():
    items = list(range(10))
    orders = [contenders.rotated(items, k, 4) for k in range(4)]
    assert all(sorted(o) == items for o in orders)
    assert len({o[0] for o in orders}) == 4


def test_transformers_settings_match_specdecs():
    sampled = contenders.transformers_kwargs(HF_ASSISTED, 1.0, 3, 64, 0, ngram=3)
    assert sampled["do_sample"] and sampled["temperature"] == 1.0
    assert sampled["top_k"] == 0 and sampled["top_p"] == 1.0          # not generate()'s default top-k 50
    assert sampled["num_assistant_tokens"] == 3 and sampled["num_assistant_tokens_schedule"] == "constant"
    assert sampled["assistant_confidence_threshold"] == 0
    assert sampled["eos_token_id"] == sampled["pad_token_id"] == 0 and sampled["max_new_tokens"] == 64
    greedy = contenders.transformers_kwargs(HF_LOOKUP, 0.0, 5, 64, 0, ngram=3)
    assert not greedy["do_sample"] and "temperature" not in greedy and "top_k" not in greedy
    assert greedy["prompt_lookup_num_tokens"] == 5 and greedy["max_matching_ngram_size"] == 3
    assert "prompt_lookup_num_tokens" not in contenders.transformers_kwargs(HF_GENERATE, 0.0, None, 64, 0, 3)
    # A pair's own sampling (smollm2-135m: T 0.2, top-k 50, top-p 0.9) reaches generate() as specdec's.
    own = contenders.transformers_kwargs(HF_LOOKUP, 0.2, 5, 64, 0, 3, top_k=50, top_p=0.9)
    assert (own["temperature"], own["top_k"], own["top_p"]) == (0.2, 50, 0.9)


def test_assistant_settings_are_set_for_the_call_and_restored():
    class Config:
        num_assistant_tokens = 20
        assistant_confidence_threshold = 0.4

    class Draft:
        generation_config = Config()

    draft = Draft()
    with contenders.assistant_settings(draft, 5):
        assert draft.generation_config.num_assistant_tokens == 5
        assert draft.generation_config.assistant_confidence_threshold == 0
        assert draft.generation_config.num_assistant_tokens_schedule == "constant"
    assert draft.generation_config.num_assistant_tokens == 20
    assert draft.generation_config.assistant_confidence_threshold == 0.4


# ---------------------------------------------------------------- from runs to rows, by hand

COSTS = {"draft_step_ms": 1.0, "target_step_ms": 4.0, "c": 0.25,
         "target_ms_by_width": {"1": 4.0, "2": 4.4, "3": 4.8, "4": 5.0}}


def _record(kind, t, gamma, seconds, tokens=12, widths=None, target_forwards=None, draft_forwards=0,
            accepted=0, tested=0, prompt=0, drafted=0, draft_seconds=0.0):
    widths = widths or {"1": tokens - 1}
    return dict(kind=kind, temperature=t, gamma=gamma, prompt=prompt, seed=0, seconds=seconds,
                new_tokens=tokens, target_forwards=target_forwards or 1 + sum(widths.values()),
                draft_forwards=draft_forwards, prefill_width=10, target_widths=widths,
                accepted=accepted, tested=tested, max_new_tokens=12, drafted=drafted, draft_seconds=draft_seconds)


def _hand_made_results():
    records = [
        _record(SPECDEC_AR, 0.0, None, 0.10), _record(SPECDEC_AR, 0.0, None, 0.14, prompt=1),
        _record(HF_GENERATE, 0.0, None, 0.15), _record(HF_GENERATE, 0.0, None, 0.15, prompt=1),
        # 12 tokens in 4 target forwards (prefill + three 4-wide verifies), 12 draft forwards,
        # 8 of 10 tested drafts accepted.
        _record(SPECDEC_MODEL, 0.0, 3, 0.06, widths={"4": 3}, draft_forwards=12, accepted=8, tested=10),
        _record(HF_ASSISTED, 0.0, 3, 0.08, widths={"4": 3}, draft_forwards=12),
        # The features drafter: 12 drafts in 6 ms of drafting (0.5 ms a draft: c = 0.125, from its
        # own runs, not from the draft model's step).
        _record(SPECDEC_FEATURES, 0.0, 3, 0.07, widths={"4": 3}, draft_forwards=12, accepted=9, tested=10,
                drafted=12, draft_seconds=0.006),
        _record(SPECDEC_NGRAM, 0.0, 3, 0.10, widths={"1": 5, "4": 2}, accepted=4, tested=6),
        _record(HF_LOOKUP, 0.0, 3, 0.12, widths={"1": 5, "4": 2}),
    ]
    rows = report.aggregate(records, COSTS)
    baselines = report.add_speedups(rows)
    greedy = {"checked": True, "agree": True, "compared": 5, "mismatches": [], "how": "a; b"}
    return {"rows": rows, "baselines": {f"{t:g}": b for t, b in baselines.items()}, "greedy": greedy,
            "summary": report.summarize(rows, baselines, greedy), "pair": {"label": "hand-made"},
            "settings": {"max_new_tokens": 12, "threads": 1}}


def test_paired_speedup_is_the_geometric_mean_of_same_prompt_ratios():
    """Each run against the baseline's run on the same prompt and seed (and pass): prompt 0 twice
    as fast (0.10 s against 0.05 s), prompt 1 slower (0.20 s against 0.25 s): sqrt(2 x 0.8); a
    second pass pairs with the baseline's second pass, not its first."""
    records = [_record(SPECDEC_AR, 1.0, None, 0.10), _record(SPECDEC_AR, 1.0, None, 0.20, prompt=1),
               _record(SPECDEC_MODEL, 1.0, 3, 0.05, widths={"4": 3}, draft_forwards=12, accepted=8, tested=10),
               _record(SPECDEC_MODEL, 1.0, 3, 0.25, widths={"4": 3}, draft_forwards=12, accepted=8, tested=10,
                       prompt=1)]
    rows = report.aggregate(records, COSTS)
    baselines = report.add_speedups(rows)
    report.add_paired_speedups(rows, records, baselines)
    model = next(r for r in rows if r["kind"] == SPECDEC_MODEL)
    assert model["paired_speedup"] == pytest.approx((2 * 0.8) ** 0.5)
    assert model["speedup"] == pytest.approx(144 / 90)     # the ratio of medians says 1.6x: (240 + 48) / (120 + 60)
    second_pass = [_record(SPECDEC_AR, 1.0, None, 0.40), _record(SPECDEC_MODEL, 1.0, 3, 0.10, widths={"4": 3})]
    records += second_pass
    report.add_paired_speedups(rows, records, baselines)
    assert model["paired_speedup"] == pytest.approx((2 * 0.8 * 4) ** (1 / 3))


def test_rows_by_hand():
    results = _hand_made_results()
    rows = {r["kind"]: r for r in results["rows"]}
    ar = rows[SPECDEC_AR]
    assert ar["tok_s"] == pytest.approx((120 + 12 / 0.14) / 2)        # median of two runs = their mean
    assert ar["speedup"] == pytest.approx(1.0) and ar["predicted"] == pytest.approx(1.0)
    assert results["baselines"]["0"]["kind"] == SPECDEC_AR            # 102.9 tok/s beats generate's 80
    assert ar["over_transformers"] == pytest.approx(80 / ar["tok_s"])  # specdec time / generate time

    model = rows[SPECDEC_MODEL]
    assert model["tok_s"] == pytest.approx(200.0)
    assert model["speedup"] == pytest.approx(200.0 / ar["tok_s"])
    assert model["alpha"] == pytest.approx(0.8) and model["c"] == 0.25
    assert model["target_forwards_per_token"] == pytest.approx(4 / 12)
    assert model["verify_steps"] == pytest.approx(5.0 / 4.0)
    assert model["leviathan"] == pytest.approx((1 - 0.8 ** 4) / (0.2 * 1.75))
    # 3 tokens a round; a round = 3 draft steps (1 ms) + a 5 ms verify; the target alone 4 ms a token.
    assert model["predicted"] == pytest.approx(3 * 4.0 / (3 * 1.0 + 5.0))
    assert model["over_transformers"] == pytest.approx(150.0 / 200.0)  # 0.06 s vs assisted's 0.08 s

    ngram = rows[SPECDEC_NGRAM]
    assert ngram["c"] == 0.0 and ngram["alpha"] == pytest.approx(4 / 6)
    assert ngram["verify_steps"] == pytest.approx((5 * 4.0 + 2 * 5.0) / 7 / 4.0)
    assert ngram["over_transformers"] == pytest.approx(0.10 / 0.12)
    assert rows[HF_ASSISTED]["alpha"] is None and rows[HF_ASSISTED]["leviathan"] is None

    best = results["summary"]["best"]["0"]
    assert best["specdec"]["kind"] == SPECDEC_MODEL and best["assisted"]["kind"] == HF_ASSISTED
    assert results["summary"]["specdec_over_assisted"]["min"]["over_transformers"] == pytest.approx(0.75)
    goals = {g["goal"]: g for g in results["summary"]["goals"]}
    assert any("1.4x" in k and v["met"] == (model["speedup"] >= 1.4) for k, v in goals.items())
    assert any("assisted" in k and v["met"] for k, v in goals.items())          # 0.75 <= 0.8

    features = rows[SPECDEC_FEATURES]
    assert features["c"] == pytest.approx(0.125) and features["alpha"] == pytest.approx(0.9)
    assert features["predicted"] == pytest.approx(3 * 4.0 / (3 * 0.5 + 5.0))
    assert features["over_transformers"] == pytest.approx(0.07 / 0.08)
    assert best["specdec_features"]["kind"] == SPECDEC_FEATURES
    assert goals["features drafter at T=0, best gamma >= 2.5x the faster target-alone loop"] == dict(
        goal="features drafter at T=0, best gamma >= 2.5x the faster target-alone loop",
        value=pytest.approx((12 / 0.07) / ar["tok_s"]), met=False)
    over = goals["features drafter time / assisted time <= 0.7 at every gamma and T"]
    assert over["value"] == pytest.approx(0.875) and not over["met"]


def test_assisted_rows_that_did_not_draft_gamma_are_flagged():
    row = dict(gamma=3, runs=1, target_widths={"4": 10, "2": 1, "1": 1})
    assert report.drafted_gamma(row)                                    # only end-of-run rounds are short
    assert not report.drafted_gamma(dict(row, target_widths={"4": 3, "2": 6, "1": 4}))   # stopped early
    assert not report.drafted_gamma(dict(row, target_widths={"21": 3}))                  # drafted 20


def _run(kind, tokens, gamma=None, t=0.0, prompt=0):
    return Run(Contender(kind, t, gamma), prompt, 0, 0.1, tokens, [5] + [1] * len(tokens), 0)


def test_greedy_check_compares_whole_outputs_with_specdecs_loop():
    same = [_run(SPECDEC_AR, [1, 2, 3]), _run(HF_GENERATE, [1, 2, 3]), _run(SPECDEC_MODEL, [1, 2, 3], 2),
            _run(SPECDEC_MODEL, [9, 9], 2, t=1.0)]                      # T = 1 is not compared
    verdict = report.check_greedy(same)
    assert verdict["checked"] and verdict["agree"] and verdict["compared"] == 2
    differ = same + [_run(HF_ASSISTED, [1, 2, 4], 2), _run(HF_LOOKUP, [1, 2], 2)]
    verdict = report.check_greedy(differ)
    assert not verdict["agree"]
    assert [(m["kind"], m["first_difference"], m["lengths"]) for m in verdict["mismatches"]] == [
        (HF_ASSISTED, 2, [3, 3]), (HF_LOOKUP, 2, [3, 2])]
    assert not report.check_greedy([_run(SPECDEC_MODEL, [1], 2, t=1.0)])["checked"]


def test_table_and_summary_read_back_the_rows():
    results = _hand_made_results()
    table = report.format_table(results["rows"])
    lines = table.splitlines()
    assert "Leviathan" in lines[0] and "predicted" in lines[0] and "÷HF" in lines[0]
    assert len({len(line) for line in lines if line and not line.startswith("-")}) == 1   # fixed width
    model_line = next(line for line in lines if line.startswith("specdec + draft model"))
    assert "200" in model_line and "0.80" in model_line and "0.75" in model_line
    summary = report.format_summary(results)
    assert "greedy agreement: OK" in summary and "specdec + draft model γ=3" in summary
    results["greedy"] = {"checked": True, "agree": False, "compared": 5, "how": "a; b", "mismatches": [
        dict(label="transformers assisted", gamma=3, prompt=0, seed=0, first_difference=7, lengths=[12, 12])]}
    summary = report.format_summary(results)
    assert "FAILED" in summary and "first difference at token 7" in summary


def test_a_smoke_run_holds_no_goal_against_its_numbers():
    """bench --quick: a dozen tokens per run say nothing about the goals, so the summary says it
    checked none, instead of printing "NOT met" beside them."""
    results = _hand_made_results()
    assert "goal: specdec speculative at T=0" in report.format_summary(results)   # a full bench: checked
    rows, greedy = results["rows"], results["greedy"]
    baselines = {float(t): b for t, b in results["baselines"].items()}
    results["summary"] = report.summarize(rows, baselines, greedy, smoke=True)
    summary = report.format_summary(results)
    assert results["summary"]["goals"] == [] and "goal: " not in summary and "met" not in summary
    assert "goals: not checked: a smoke run (--quick)" in summary


# ---------------------------------------------------------------- the chart

def test_speedup_figure_from_hand_made_results():
    results = _hand_made_results()
    fig = speedup_figure(results)
    traces = {(t.meta["kind"], t.meta["series"]): t for t in fig.data}
    assert set(traces) == {(SPECDEC_MODEL, "measured"), (SPECDEC_MODEL, "predicted"), (SPECDEC_MODEL, "leviathan"),
                           (SPECDEC_FEATURES, "measured"), (SPECDEC_FEATURES, "predicted"),
                           (SPECDEC_FEATURES, "leviathan"),
                           (SPECDEC_NGRAM, "measured"), (SPECDEC_NGRAM, "predicted"),
                           (HF_ASSISTED, "measured"), (HF_LOOKUP, "measured")}
    rows = {r["kind"]: r for r in results["rows"]}
    assert list(traces[(SPECDEC_MODEL, "measured")].y) == [pytest.approx(rows[SPECDEC_MODEL]["speedup"])]
    assert list(traces[(SPECDEC_MODEL, "measured")].customdata) == [3]           # gamma (x is nudged)
    assert abs(traces[(SPECDEC_MODEL, "measured")].x[0] - 3) < 0.25
    assert list(traces[(SPECDEC_MODEL, "predicted")].y) == [pytest.approx(rows[SPECDEC_MODEL]["predicted"])]
    measured = [traces[(k, "measured")] for k in (SPECDEC_MODEL, SPECDEC_FEATURES, SPECDEC_NGRAM, HF_ASSISTED,
                                                  HF_LOOKUP)]
    assert len({t.line.color for t in measured}) == 5 and len({t.marker.symbol for t in measured}) == 5
    assert {t.line.dash for t in fig.data} == {"solid", "dash", "dot"}
    assert "1x = specdec autoregressive" in fig.layout.annotations[0].text


def test_speedup_figure_has_one_panel_per_temperature():
    results = _hand_made_results()
    hot = [dict(r, temperature=1.0) for r in results["rows"]]
    results["rows"] += hot
    results["baselines"]["1"] = dict(results["baselines"]["0"])
    fig = speedup_figure(results)
    assert {t.meta["temperature"] for t in fig.data} == {0.0, 1.0}
    assert len(fig.layout.annotations) == 2
    assert sum(t.showlegend is not False for t in fig.data) == 10         # each series once in the legend


# ---------------------------------------------------------------- on the bundled pair

@pytest.fixture(scope="module")
def pair():
    from specdec import load_pair
    return load_pair(device="cpu")


def test_cost_and_acceptance_keep_the_keys_the_model_cards_read(pair, monkeypatch):
    c = measure.cost(pair, gamma=3)
    assert set(c) >= {"draft_step_ms", "target_step_ms", "c", "verify_ms", "verify_over_step", "gamma"}
    assert c["c"] == pytest.approx(c["draft_step_ms"] / c["target_step_ms"]) and c["gamma"] == 3
    monkeypatch.setattr(measure, "PROMPTS", measure.PROMPTS[:1])
    monkeypatch.setattr(measure, "SEEDS", [0])
    a = measure.acceptance(pair, gamma=3, max_new_tokens=8)
    assert set(a) >= {"alpha", "tested", "runs", "tokens_per_target_forward", "gamma", "temperature"}
    assert 0 <= a["alpha"] <= 1 and a["runs"] == 1


@pytest.mark.slow
def test_quick_bench_on_the_bundled_pair(tmp_path):
    r = subprocess.run([sys.executable, "-m", "specdec", "bench", "--quick", "--out", str(tmp_path)], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "greedy agreement: OK" in r.stdout and "Leviathan" in r.stdout and "elapsed" in r.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["schema"] == "specdec.bench"
    settings = results["settings"]
    assert settings["threads"] == 1
    assert settings["features"]   # the bundled target has features weights: the features drafter runs
    expected = {(c.kind, c.temperature, c.gamma)
                for c in contenders.contenders(settings["gammas"], settings["temperatures"], features=True)}
    assert {(r["kind"], r["temperature"], r["gamma"]) for r in results["rows"]} == expected
    for row in results["rows"]:
        assert row["tok_s"] > 0 and row["speedup"] > 0 and row["predicted"] > 0
        if row["kind"] in (SPECDEC_MODEL, SPECDEC_FEATURES):
            assert 0 <= row["alpha"] <= 1 and row["leviathan"] > 0 and row["over_transformers"] > 0
            assert 0 < row["c"] < 1
    greedy = results["greedy"]
    assert greedy["checked"] and greedy["agree"] and not greedy["mismatches"]
    assert greedy["compared"] == len([c for c in expected if c[1] == 0]) - 1   # all but the reference
    assert not results["warnings"]                                  # assisted drafted gamma tokens a round
    # A smoke run: marked as one, no goals held against its numbers (it says so, instead of
    # printing "NOT met" beside them), no 5 MB chart.
    assert settings["quick"] and results["summary"]["goals"] == [] and results["summary"]["smoke_run"]
    assert r.stdout.startswith("smoke run (--quick)") and "goals: not checked: a smoke run" in r.stdout
    assert "NOT met" not in r.stdout and "goal: " not in r.stdout
    assert not (tmp_path / "speedup.html").exists()


@pytest.mark.slow
def test_a_quick_bench_of_a_target_alone_runs_its_drafters_and_agrees_greedily(tmp_path):
    """A pair with no draft model (the real model's kind; here the bundled target, whose features
    drafter exists): no draft-model contenders, no draft cost, the greedy outputs all the same."""
    from specdec import load_pair
    from specdec.models.pair import ASSETS

    pair = load_pair(target=str(ASSETS / "specdec-target"), device="cpu")
    cfg = run.config_from_args(_args("--quick", "--out", str(tmp_path), "--top-k", "5", "--top-p", "0.9"))
    results = run.benchmark(pair, cfg)
    assert {r["kind"] for r in results["rows"]} == {SPECDEC_AR, HF_GENERATE, SPECDEC_FEATURES, SPECDEC_NGRAM, HF_LOOKUP}
    assert results["costs"]["draft_step_ms"] is None and results["costs"]["c"] is None
    assert (results["settings"]["top_k"], results["settings"]["top_p"]) == (5, 0.9)
    # --save-profile: such a pair is profiled with its features drafter, named, for explain.gamma's pick.
    entry = profiles.bench_profile(results, pair, "some-pair", tmp_path / "results.json")
    cs = sorted(r["c"] for r in results["rows"] if r["kind"] == SPECDEC_FEATURES)
    assert (entry["pair"], entry["drafter"]) == ("some-pair", "features") and "features drafter" in entry["name"]
    median = cs[len(cs) // 2] if len(cs) % 2 else (cs[len(cs) // 2 - 1] + cs[len(cs) // 2]) / 2
    assert entry["draft_step_ms"] == round(median * results["costs"]["target_step_ms"], 4)
    assert profiles.bench_profile(results, pair, None, tmp_path) is None   # no preset to name it by
    assert all(r["tok_s"] > 0 and r["predicted"] > 0 for r in results["rows"])
    assert results["greedy"]["checked"] and results["greedy"]["agree"]
    assert "specdec + n-gram" in report.format_table(results["rows"]) and "greedy" in report.format_summary(results)


def test_saving_a_profile_replaces_the_one_of_its_name_where_it_stands(tmp_path):
    """The explorer lists profiles in the file's order: a re-measured profile keeps its place."""
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps([{"name": "a", "v": 1}, {"name": "b", "v": 1}, {"name": "c", "v": 1}]))
    profiles.save({"name": "a", "v": 2}, path)
    profiles.save({"name": "d", "v": 1}, path)
    assert [(p["name"], p["v"]) for p in json.loads(path.read_text())] == [("a", 2), ("b", 1), ("c", 1), ("d", 1)]
