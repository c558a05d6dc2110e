"""The speed explorer: Leviathan et al.'s speedup against α with measured costs.

The curves are checked against the closed form written out here (not through `specdec.explain.speed`),
with c and v computed from the committed profile file's milliseconds; a run's measured point lies
on its own curve within α's noise; the profiles are read at each request."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specdec import RunSettings, SamplingConfig, autoregressive_generate, speculative_generate
from specdec.app.page import speed_tab
from specdec.app.shows import speed_charts
from specdec.explain.speed import alpha_band, leviathan_speedup, profile_from_dict, profiles_from_json, run_point

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "assets" / "bench" / "cost-profiles.json"


def closed_form(alpha: float, gamma: int, c: float, v: float) -> float:
    """(1 − α^(γ+1)) / ((1 − α)(γ c + v)); at α = 1 the limit (γ + 1) / (γ c + v)."""
    tokens = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens / (gamma * c + v)


def raw_profiles() -> list[dict]:
    return json.loads(PROFILES.read_text(encoding="utf-8"))


def test_the_committed_profiles_say_where_when_and_how():
    raw = raw_profiles()
    names = [d["name"] for d in raw]
    assert any("CPU" in n for n in names) and "H100, eager, fp32" in names and "H100, CUDA graphs, fp32" in names
    for d in raw:
        assert d["where"] and d["when"] and d["source"] and d["engine"] in ("eager", "cuda graphs")
        assert d["verify_ms_by_width"]["1"] == pytest.approx(d["target_step_ms"])
    bench = json.loads((ROOT / "assets" / "bench" / "results.json").read_text())["costs"]
    cpu = next(d for d in raw if "bench" in d["name"])
    assert cpu["target_step_ms"] == pytest.approx(bench["target_step_ms"], abs=1e-4)
    assert {int(k): v for k, v in cpu["verify_ms_by_width"].items()} == pytest.approx(
        {int(k): v for k, v in bench["target_ms_by_width"].items()}, abs=1e-4)
    graphed = next(d for d in raw if d["name"] == "H100, CUDA graphs, fp32")
    assert (graphed["target_step_ms"], graphed["draft_step_ms"]) == (1.47, 0.12)   # the 2026-11-23 notes
    assert "H100 measurements of 2026-11-23" in graphed["source"]
    for d in raw:   # a visitor cannot open a path outside the project
        assert "/work/" not in d["source"] and "NOTES-" not in d["source"], d["name"]


@pytest.mark.parametrize("gamma", range(1, 9))
def test_plotted_curves_are_the_closed_form(gamma):
    profiles = profiles_from_json(raw_profiles())
    for raw, prof in zip(raw_profiles(), profiles):
        c = raw["draft_step_ms"] / raw["target_step_ms"]
        widths = {int(k): v for k, v in raw["verify_ms_by_width"].items()}
        fig = speed_charts.curves_figure(prof, gamma, 0.5)
        curves = {t.meta["gamma"]: t for t in fig.data if t.meta and "gamma" in t.meta}
        assert sorted(curves) == list(range(1, 9))
        for g, t in curves.items():
            near = g + 1 if g + 1 in widths else min((w for w in widths if w >= 2), key=lambda w: (abs(w - g - 1), w))
            v = widths[near] / raw["target_step_ms"]
            assert t.meta["measured_width"] == (g + 1 in widths)
            assert list(t.y) == pytest.approx([closed_form(a, g, c, v) for a in t.x], rel=1e-12)
            assert t.x[0] == 0 and t.x[-1] == 1
        compare = speed_charts.compare_figure(profiles, gamma, 0.5, None)
        mine = next(t for t in compare.data if t.meta and t.meta.get("profile") == prof.name)
        v = mine.meta["v"]
        assert list(mine.y) == pytest.approx([closed_form(a, gamma, c, v) for a in mine.x], rel=1e-12)


def test_leviathan_speedup_with_a_verify_cost_and_alpha_band():
    assert leviathan_speedup(0.6, 4, 0.2) == pytest.approx(closed_form(0.6, 4, 0.2, 1.0))
    assert leviathan_speedup(0.6, 4, 0.2, verify=1.3) == pytest.approx(closed_form(0.6, 4, 0.2, 1.3))
    assert leviathan_speedup(1.0, 3, 0.1, 1.2) == pytest.approx(4 / 1.5)
    lo, hi = alpha_band(0.7, 100)
    assert (lo, hi) == pytest.approx((0.7 - 2 * math.sqrt(0.21 / 100), 0.7 + 2 * math.sqrt(0.21 / 100)))
    assert alpha_band(0.99, 4) == (pytest.approx(0.99 - 2 * math.sqrt(0.99 * 0.01 / 4)), 1.0)


def test_a_profile_missing_a_field_or_with_a_bad_width_is_refused_by_name():
    good = raw_profiles()[0]
    with pytest.raises(ValueError, match="lacks draft_step_ms"):
        profile_from_dict({k: v for k, v in good.items() if k != "draft_step_ms"})
    with pytest.raises(ValueError, match="verify_ms_by_width"):
        profile_from_dict({**good, "verify_ms_by_width": {"0": 1.0}})
    with pytest.raises(ValueError, match="target_step_ms"):
        profile_from_dict({**good, "target_step_ms": -1})


@pytest.fixture(scope="module")
def compared(bundled):
    """Default runs (γ 4, T 1) of seeds 0–3, each against the target alone: (run, point)."""
    out = []
    for seed in range(4):
        s = RunSettings(gamma=4, max_new_tokens=64, seed=seed, sampling=SamplingConfig(temperature=1.0))
        spec = speculative_generate(bundled, "To be, or not to be", s)
        ar = autoregressive_generate(bundled, "To be, or not to be", s)
        out.append((spec, run_point(spec.stats, 4, ar.stats)))
    return out


def test_the_measured_point_lies_on_its_own_curve_within_its_noise(compared):
    for spec, point in compared:
        prof = point.whole_loop
        c, v = prof.c, prof.verify(4)
        at = closed_form(point.alpha, 4, c, v)
        # gamma c + v is the run's time per round over the baseline's time per token, so the
        # point differs from its curve only by the tokens a round gave against what alpha predicts.
        rounds = spec.stats.rounds
        assert point.measured == pytest.approx(at * (spec.stats.new_tokens / rounds) /
                                               closed_form(point.alpha, 4, 0, 1), rel=1e-9)
        lo, hi = alpha_band(point.alpha, point.tested)
        assert closed_form(lo, 4, c, v) <= point.measured <= closed_form(hi, 4, c, v), (point, lo, hi)
        assert "**within its noise**" in speed_tab.note_markdown(point, prof, None)


def test_the_tab_draws_the_run_on_its_curve_and_says_so(compared, tmp_path):
    spec, point = compared[0]
    out = speed_tab.for_run(point)
    assert out["profile"]["value"] == "this run (whole loop)" and out["gamma"] == 4
    assert out["alpha"] == round(point.alpha, 3)
    measured = next(t for t in out["curves"].data if (t.meta or {}).get("role") == "measured")
    assert list(measured.x) == [point.alpha] and list(measured.y) == [point.measured]
    assert f"Measured speedup **{point.measured:.2f}×**" in out["note"]
    assert "σ = √(α(1 − α) / " in out["note"]          # how the band is computed
    names = list(out["table"]["profile"])
    assert names[:2] == ["this run (whole loop)", "this run (forwards only)"] and "H100, eager, fp32" in names


def test_without_a_comparison_there_is_no_measured_target_step(compared):
    spec, _ = compared[0]
    point = run_point(spec.stats, 4)
    out = speed_tab.for_run(point)
    assert "no measured target step" in out["note"]
    assert not [t for t in out["curves"].data if (t.meta or {}).get("role") == "measured"]
    assert "this run" not in " ".join(out["table"]["profile"])


def test_what_if_c_redraws_the_curves_with_that_c():
    out = speed_tab.explore(None, "H100, CUDA graphs, fp32", 4, 0.653, 0.89)
    curves = [t for t in out["curves"].data if t.meta and "gamma" in t.meta]
    assert {t.meta["c"] for t in curves} == {0.89}
    assert "what if c = 0.890" in out["curves"].layout.title.text
    graphed = next(p for p in profiles_from_json(raw_profiles()) if p.name == "H100, CUDA graphs, fp32")
    v = graphed.verify(4)
    four = next(t for t in curves if t.meta["gamma"] == 4)
    k = four.x.index(0.65)
    assert four.y[k] == pytest.approx(closed_form(0.65, 4, 0.89, v))
    assert four.y[four.x.index(0.95)] < 1       # a draft as costly as its target pays only if α is near 1
    what_if = next(t for t in out["compare"].data if t.name.startswith("what if"))
    assert what_if.meta["c"] == 0.89 and "**What if** c = 0.890" in out["note"]


def test_profiles_are_read_at_each_request(tmp_path):
    path = tmp_path / "profiles.json"
    extra = {**raw_profiles()[0], "name": "a GPU measured later", "when": "2026-12-01"}
    path.write_text(json.dumps(raw_profiles() + [extra]))
    out = speed_tab.explore(None, "a GPU measured later", 4, 0.6, None, path=path)
    assert "a GPU measured later" in list(out["table"]["profile"])
    assert out["profile"]["value"] == "a GPU measured later"
    path.write_text("not json")
    out = speed_tab.explore(None, None, 4, 0.6, None, path=path)
    assert "could not be read" in out["note"]


def test_the_depth_story_reads_the_runs_own_costs_per_layer():
    from specdec.explain.speed import depth_story
    from specdec.trace.spine import Stats

    models = {"target_layers": 16, "draft_layers": 1, "target_params": 4_460_672, "draft_params": 475_520,
              "device": "cpu", "engine": "eager"}
    text = depth_story(Stats(drafted=100, draft_seconds=0.059), Stats(target_forwards=100, verify_seconds=0.37), models)
    assert "3.70 ms" in text and "0.59 ms" in text and "c = 0.16" in text
    assert "0.38 ms + 0.207 ms a layer" in text          # (3.70 - 0.59) / 15 a layer, the rest fixed
    gpu = depth_story(Stats(drafted=10, draft_seconds=0.0012), Stats(target_forwards=10, verify_seconds=0.0147),
                      {**models, "device": "cuda", "engine": "cuda graphs"})
    assert "CUDA graphs" in gpu and "shallow" in gpu
    assert depth_story(Stats(), Stats(), models) == ""   # no comparison: nothing to say


def test_the_rates_chart_labels_its_log_axis_1_2_5_around_the_data():
    """Plotly labels every digit of a log axis that spans about a decade ('7', '8', '9', '100'),
    and those labels overlapped at 800 px: the axis gets 1-2-5 ticks that bracket the data."""
    from specdec.app.page import speed_tab
    from specdec.app.shows.speed_charts import log_ticks, rates_figure

    profiles, _ = speed_tab.load_profiles()
    fig = rates_figure(profiles, 4, 0.7)
    ys = [y for trace in fig.data for y in trace.y]
    ticks = list(fig.layout.yaxis.tickvals)
    assert ticks[0] <= min(ys) and ticks[-1] >= max(ys)
    assert all({round(t / 10 ** math.floor(math.log10(t)), 9)} <= {1, 2, 5} for t in ticks)
    assert list(fig.layout.yaxis.ticktext) == [f"{t:g}" for t in ticks]
    assert log_ticks(65, 1400) == [50, 100, 200, 500, 1000, 2000]


def test_the_features_drafter_s_card_is_a_profile_with_its_measured_c_and_alpha(tmp_path):
    """The speed explorer carries the features drafter's costs and α as its model card measured
    them: c is its time per draft over the target's step, read from the card's file;
    a card that cannot be read gives no profile, and no error."""
    import json

    from specdec.app.page import speed_tab

    card = json.loads(speed_tab.FEATURES_MEASUREMENTS.read_text())
    row = next(r for r in card["acceptance"] if r["drafter"] == "features" and r["temperature"] == 1.0)
    prof = speed_tab.features_card_profile()
    # the same float64 division the card made, on numbers JSON carries exactly: equal, not close
    assert prof.c == row["draft_ms_per_draft"] / card["cost"]["target_step_ms"] == row["c"]
    assert f"α {row['alpha']:.2f}" in prof.name and prof.verify(card["cost"]["gamma"]) is not None
    profiles, _ = speed_tab.all_profiles(None)
    assert [p.name for p in profiles[-2:]] == [prof.name, speed_tab.real_features_card_profile().name]
    out = speed_tab.explore(None, prof.name, 4, row["alpha"], None)
    assert out["c"] == round(prof.c, 3) and prof.name in out["profile"]["choices"]
    assert speed_tab.features_card_profile(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text('{"cost": {}}')
    assert speed_tab.features_card_profile(tmp_path / "bad.json") is None


def test_the_pair_s_card_is_read_from_the_card_and_the_costs_are_explained_side_by_side(tmp_path):
    """Issue 38: a copy of the model card's costs in the profiles file went stale (3.71 ms a target
    step there, 7.78 in the card); the profile is read from the card now, and the table's note
    says why the bench's, the card's and this run's target steps differ, and why an eager H100
    has v < 1. The INTRO's sentence on CUDA graphs uses the committed profiles' own numbers."""
    card = json.loads(speed_tab.PAIR_MEASUREMENTS.read_text())["cost"]
    prof = speed_tab.model_card_profile()
    assert prof.target_step_ms == card["target_step_ms"] and prof.c == card["draft_step_ms"] / card["target_step_ms"]
    assert prof.verify(card["gamma"]) == card["verify_ms"] / card["target_step_ms"]
    assert speed_tab.CARD_PROFILE not in [d["name"] for d in raw_profiles()]   # one source, not two
    assert speed_tab.model_card_profile(tmp_path / "missing.json") is None
    profiles, _ = speed_tab.all_profiles(None)
    note = speed_tab.costs_markdown(profiles, None)
    bench = next(p for p in profiles if "bench" in p.name)
    assert f"{bench.target_step_ms:.2f} ms" in note and f"{prof.target_step_ms:.2f} ms" in note
    assert "v = 0.87 < 1" in note and "launches" in note
    eager, graphed = (next(p for p in profiles if p.name == n)
                      for n in ("H100, eager, fp32", "H100, CUDA graphs, fp32"))
    said = (f"v = {eager.verify(4):.2f} eager, {graphed.verify(4):.2f} graphed", f"c stays small ({eager.c:.3f}, "
            f"{graphed.c:.3f})", f"from {eager.speedup(0.65, 4):.2f}× to {graphed.speedup(0.65, 4):.2f}×",
            f"from {4 * eager.c + eager.verify(4):.2f} to {4 * graphed.c + graphed.verify(4):.2f}")
    intro = " ".join(speed_tab.INTRO.split())
    assert all(s in intro for s in said), said


def test_the_rates_legend_has_one_row_per_entry_under_the_plot():
    """Issue 38: a legend that wraps as the width allows could not be sized on the server; one
    taller than its margin covered the lines under 200 tokens/s. One entry per profile (its two
    lines toggle together), one row each, and the bottom margin holds every row."""
    profiles, _ = speed_tab.all_profiles(None)
    fig = speed_charts.rates_figure(profiles, 4, 0.7)
    shown = [t for t in fig.data if t.showlegend is not False]
    assert len(shown) == len(profiles) and fig.layout.legend.orientation == "v"
    assert {t.legendgroup for t in fig.data} == {p.name for p in profiles}
    assert fig.layout.margin.b >= 48 + 20 * len(shown)


def test_at_a_speedup_of_1_both_measured_rates_show_on_the_rates_chart(compared):
    """Issue 53: at a speedup near 1 the run's two measured rates (target alone, speculative) sit on
    one spot, and the target alone's filled square, as large as the speculative X drawn over it,
    was hidden under it. Its square is open and larger: the X shows inside it."""
    import dataclasses

    _, point = compared[0]
    profiles, _ = speed_tab.all_profiles(None)
    fig = speed_charts.rates_figure(profiles, 4, point.alpha, dataclasses.replace(point, measured=1.0))
    alone, spec = ([t for t in fig.data if (t.meta or {}).get("role") == role][0]
                   for role in ("measured alone", "measured"))
    assert (list(alone.x), list(alone.y)) == (list(spec.x), list(spec.y))       # one spot
    assert list(fig.data).index(spec) > list(fig.data).index(alone)             # the X is drawn over it
    assert alone.marker.symbol.endswith("-open") and alone.marker.size >= spec.marker.size + 4


@pytest.mark.parametrize("gamma", [1, 4])
def test_the_profile_tables_best_gamma_is_never_slower_than_the_figure_beside_it(gamma, tmp_path):
    """Every committed profile's row: its best γ at α is at least its speedup at the chosen γ (the
    same curves give both); a v or best γ read from the nearest measured width is starred, a short
    mark that never breaks over lines ("(nearest)" broke as "neare st" at 800 px)."""
    profiles, _ = speed_tab.all_profiles(None, PROFILES)
    alpha = 0.65
    at, best_at = speed_charts.PROFILE_HEADERS.index("speedup at α"), speed_charts.PROFILE_HEADERS.index("best γ at α")
    for row in speed_charts.profile_rows(profiles, gamma, alpha):
        shown, best = float(row[at].rstrip("×")), float(row[best_at].split(": ")[1].split("×")[0])
        assert best >= shown, row
        assert "nearest" not in row[4] and "nearest" not in row[best_at], row
    card = next(p for p in profiles if p.name == speed_tab.CARD_PROFILE)   # widths 1 and 5 only
    row = next(r for r in speed_charts.profile_rows(profiles, gamma, alpha) if r[0] == card.name)
    assert row[4].endswith(" *") == (card.verify(gamma) is None), row


def test_the_rates_chart_tells_every_profile_apart_hovers_its_flat_lines_and_marks_the_chosen():
    """Two GPUs of one speed drew one line over the other (H100 graphs under the H200's): each
    profile's speculative line has markers of its own shape at α of its own. The dashed target-
    alone lines answer a hover anywhere (they had points only at their two ends). The profile
    the controls are set to is drawn thicker, on top, and its legend entry says so."""
    profiles, _ = speed_tab.all_profiles(None)
    chosen = profiles[1].name
    fig = speed_charts.rates_figure(profiles, 4, 0.7, chosen=chosen)
    spec = [t for t in fig.data if (t.meta or {}).get("role") == "speculative"]
    shown_at = {(t.marker.symbol, next(k for k, size in enumerate(t.marker.size) if size)) for t in spec}
    assert len(shown_at) == len(spec) == len(profiles)   # no two profiles share a shape and a place
    assert all(len(t.x) == len(speed_charts.ALPHAS) for t in fig.data if (t.meta or {}).get("role") == "alone")
    marked = [t for t in spec if speed_charts.CHOSEN_MARK in t.name]
    assert [t.meta["profile"] for t in marked] == [chosen] and spec[-1] is marked[0]
    assert marked[0].line.width > max(t.line.width for t in spec if t is not marked[0])


def test_before_a_run_the_explorer_opens_on_the_pair_in_use_on_this_kind_of_device(tmp_path):
    """It opened on the bundled pair's CPU profile while the page ran the real pair: it opens on a
    profile of the pair in use on this kind of device; where there is none, on that pair's profile
    from another machine, and says which machine that is."""
    real, bundled = "smollm2-135m", "bundled"
    def opened(pair, device, path=PROFILES):
        out = speed_tab.explore(None, None, 4, 0.65, None, path, pair=pair, device=device)
        return out["profile"]["value"], out["note"]

    name, note = opened(real, "cpu")
    assert name == "this CPU, SmolLM2-135M-Instruct + features drafter, bench (every width)" and "⚠" not in note
    assert opened(real, "cuda")[0] == "NVIDIA H200, SmolLM2-135M-Instruct, graphs, float32"
    assert opened(bundled, "cpu")[0] == "this CPU, bench (every width)"
    no_cpu = tmp_path / "profiles.json"
    no_cpu.write_text(json.dumps([d for d in raw_profiles() if not (d.get("pair") == real and d["device"] == "cpu")]))
    with_cards = speed_tab.real_features_card_profile
    speed_tab.real_features_card_profile = lambda: None   # the real drafter's CPU card: a CPU profile too
    try:
        name, note = opened(real, "cpu", no_cpu)
    finally:
        speed_tab.real_features_card_profile = with_cards
    assert name == "NVIDIA H200, SmolLM2-135M-Instruct, graphs, float32"
    assert "⚠" in note and "NVIDIA H200" in note and "on a cpu" in note, note


def test_the_tables_star_is_explained_as_a_star_not_a_list_mark():
    """The note on the table's stars began with "*", which Markdown read as a list item's mark: the
    star itself vanished from the note. It is written escaped, so the page shows it."""
    profiles, _ = speed_tab.all_profiles(None)
    assert speed_tab.costs_markdown(profiles, None).startswith("\\* v from the nearest measured verify width")


def test_a_profile_of_another_machine_picked_by_hand_is_said_so_without_denying_the_own_one():
    """Picking the H100's profile while the page runs the bundled pair on a CPU: the note says it is
    another machine's, and does not claim this pair has no profile here (it has)."""
    out = speed_tab.explore(None, "H100, eager, fp32", 4, 0.65, None, PROFILES, pair="bundled", device="cpu")
    assert "⚠" in out["note"] and "one NVIDIA H100" in out["note"] and "no profile is committed" not in out["note"]


def test_the_every_profile_chart_marks_the_chosen_profile_as_the_rates_chart_does():
    """The chart of every measured profile at one γ drew the profile picked in the dropdown like any
    other: it is drawn thicker (a cue that is not colour), on top, and its legend entry says so; the
    tab passes it the dropdown's profile."""
    profiles, _ = speed_tab.all_profiles(None)
    chosen = profiles[2].name
    fig = speed_charts.compare_figure(profiles, 4, 0.7, None, chosen=chosen)
    curves = [t for t in fig.data if (t.meta or {}).get("profile")]
    marked = [t for t in curves if speed_charts.CHOSEN_MARK in t.name]
    assert [t.meta["profile"] for t in marked] == [chosen] and curves[-1] is marked[0]
    assert marked[0].line.width > max(t.line.width for t in curves if t is not marked[0])
    out = speed_tab.explore(None, chosen, 4, 0.7, None, PROFILES)
    assert [t.meta["profile"] for t in out["compare"].data if speed_charts.CHOSEN_MARK in (t.name or "")] == [chosen]


def test_the_profile_table_gives_each_profile_s_predicted_tokens_per_second_as_the_rates_chart_draws_them():
    """Each row's tokens per second at (α, γ): the profile's target-alone rate (one token a target
    step) times its speedup there, named as a prediction in its header, the value the tokens-per-
    second chart's solid line has at that α; the column widths still add up to the panel."""
    profiles, _ = speed_tab.all_profiles(None, PROFILES)
    gamma, alpha = 4, 0.7
    column = speed_charts.PROFILE_HEADERS.index("predicted tok/s at α")
    fig = speed_charts.rates_figure(profiles, gamma, alpha)
    at = speed_charts.ALPHAS.index(alpha)
    drawn = {t.meta["profile"]: t.y[at] for t in fig.data if (t.meta or {}).get("role") == "speculative"}
    for prof, row in zip(profiles, speed_charts.profile_rows(profiles, gamma, alpha)):
        v, _ = prof.verify_nearest(gamma)
        rate = 1000 / prof.target_step_ms * closed_form(alpha, gamma, prof.c, v)
        assert float(row[column]) == pytest.approx(rate, rel=6e-3, abs=0.06), row
        assert float(row[column]) == pytest.approx(drawn[prof.name], rel=6e-3, abs=0.06), row
    assert len(speed_charts.PROFILE_WIDTHS) == len(speed_charts.PROFILE_HEADERS)
    assert sum(float(w.rstrip("%")) for w in speed_charts.PROFILE_WIDTHS) == 100
