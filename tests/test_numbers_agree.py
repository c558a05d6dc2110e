"""Every number the page shows twice comes from one value.

A greedy run compared with the target alone, as the Decode tab's "compare with autoregressive"
makes it (`measure.timed_repeats`), is drawn by every view that shows its timings: the
status line, the metrics table, the "where the time went" chart and the speed explorer. Each
number two of them show must be printed from the same value, and the chart's parts must add up to
the wall time the headline uses."""

from __future__ import annotations

import pytest

from bounds import display, rounding
from specdec import RunSettings, SamplingConfig
from specdec.app.page import speed_tab
from specdec.app.server.runs import COMPARE_REPEATS
from specdec.app.shows import charts, views
from specdec.explain.measure import mean_timings, timed_repeats
from specdec.explain.speed import depth_story, expected_tokens_per_round, explain, run_point, time_split
from specdec.trace.spine import Stats

# The figures are float64 arithmetic of a handful of terms (a sum of three parts, a product and a
# quotient): relative rounding well inside rounding(8, float64) ~ 2.5e-15.
F64 = rounding(8, "float64")
PROMPT = "To be, or not to be"


@pytest.fixture(scope="module")
def greedy(bundled):
    """(streamed run, timed run, target alone) at T = 0, γ 4, as the Decode tab makes them."""
    settings = RunSettings(gamma=4, max_new_tokens=32, seed=0, sampling=SamplingConfig(temperature=0.0))
    repeats = timed_repeats(bundled, PROMPT, settings, repeats=COMPARE_REPEATS)
    return repeats.spec, repeats.spec, repeats.ar, repeats.speedups


def test_two_runs_timings_are_averaged_together_so_the_parts_fit_the_whole():
    # The second run's parts (1.20 s of target forwards) exceed the two runs' mean wall time (1.0 s):
    # a mean wall beside one run's parts drew a target step longer than the target alone's token.
    first = Stats(new_tokens=64, wall_seconds=0.8, draft_seconds=0.0, verify_seconds=0.7)
    second = Stats(new_tokens=64, wall_seconds=1.2, draft_seconds=0.0, verify_seconds=1.18)
    mean_timings(first, second)
    assert (second.wall_seconds, second.verify_seconds) == (pytest.approx(1.0), pytest.approx(0.94))
    assert time_split(second).total == pytest.approx(second.wall_seconds)


def _fig_values(fig, run: str) -> dict:
    out = {}
    for trace in fig.data:
        row = list(trace.y).index(run)
        out[trace.meta] = trace.x[row]
    return out


def test_every_number_shown_twice_comes_from_one_value(greedy):
    gen, timed, ar, speedups = greedy
    gamma = gen.settings.gamma
    story = explain(timed.stats, ar.stats, gamma)
    point = run_point(timed.stats, gamma, ar.stats)
    status = views.done_status(gen, ar, timed)
    metrics = charts.metrics_markdown(gen, ar, timed=timed, speedups=speedups)
    fig = charts.time_figure(timed, ar)
    speed = speed_tab.for_run(point)
    title = fig.layout.title.text

    measured = f"{story.measured:.2f}×"
    assert story.measured == point.measured
    for shown in (status, metrics, title, speed["note"]):
        assert measured in shown, shown
    predicted = f"{story.predicted:.2f}×"   # the whole-loop curve at α, on both tabs
    assert f"**{predicted}**" in metrics and f"predicted {predicted}" in title
    assert f"Its curve gives **{predicted}** at α" in speed["note"]
    marker = next(t for t in speed["curves"].data if (t.meta or {}).get("role") == "predicted")
    assert f"{marker.y[0]:.2f}×" == predicted
    assert f"{story.predicted_forwards:.2f}× (*this run (forwards only)*)" in metrics
    # The repeats: each one's speedup and their spread beside the pooled figure, which lies
    # inside it (the run's wall times weight the repeats' ratios); the costs the prediction used.
    assert len(speedups) == COMPARE_REPEATS and f"spread {min(speedups):.2f}–{max(speedups):.2f}×" in metrics
    assert all(f"{x:.2f}×" in metrics for x in speedups)
    assert min(speedups) * (1 - F64) <= story.measured <= max(speedups) * (1 + F64)
    assert f"target step {point.whole_loop.target_step_ms:.2f} ms, c = {point.whole_loop.c:.3f}" in metrics

    # The chart's bars are the headline's timings: each run's parts add up to its wall time per token.
    for name, stats in (("speculative", timed.stats), ("autoregressive", ar.stats)):
        parts = _fig_values(fig, name)
        assert min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(1000 * stats.wall_seconds / stats.new_tokens, rel=F64)
    assert _fig_values(fig, "autoregressive")["target"] == pytest.approx(
        point.forwards_only.target_step_ms * ar.stats.target_forwards / ar.stats.new_tokens, rel=F64)
    # The target step and c: the Decode tab's depth story and the speed explorer's note.
    forwards, whole = point.forwards_only, point.whole_loop
    step_words = f"{forwards.target_step_ms:.2f} ms"
    assert f"One target forward took {step_words}" in depth_story(timed.stats, ar.stats, gen.models)
    assert f"c = {forwards.c:.2f}" in depth_story(timed.stats, ar.stats, gen.models)
    assert f"one target forward {step_words}, against which c = {forwards.c:.2f}" in speed["note"]
    assert whole.target_step_ms >= forwards.target_step_ms   # a token alone costs at least its forward
    assert f"a target step {whole.target_step_ms:.2f} ms" in speed["note"]
    assert f"{ar.stats.wall_seconds:.2f} s" in metrics and f"{ar.stats.wall_seconds:.2f} s" in status
    # The one-line result beside Run: α and tokens per forward as the metrics table prints them.
    s = gen.stats
    assert f"α = {s.acceptance_rate:.3f}" in status and f"**{s.acceptance_rate:.3f}**" in metrics
    assert f"{s.tokens_per_target_forward:.2f} tokens per target forward" in status
    assert f"**{s.tokens_per_target_forward:.2f}**" in metrics
    predicted = f"α predicts {expected_tokens_per_round(s.acceptance_rate, gamma):.2f}"
    assert predicted in status
    assert f"predicts {predicted.split()[-1]} from r = α" in metrics


def test_the_wall_time_names_every_part_and_they_add_up(greedy):
    gen, timed, ar, _ = greedy
    metrics = charts.metrics_markdown(gen, ar, timed=timed)
    split = time_split(timed.stats)
    assert f"everything else (sampling the output, bookkeeping, the trace) {split.other:.2f} s" in metrics
    assert split.total == pytest.approx(timed.stats.wall_seconds)


def test_greedy_runs_say_why_alpha_has_no_noise_and_why_tokens_differ(greedy):
    gen, _, _, _ = greedy
    metrics = charts.metrics_markdown(gen)
    assert charts.alpha_noise(gen) == 0.0            # T = 0: every β is 0 or 1
    assert "±2σ = 0.000" not in metrics and "no noise to weigh it against" in metrics
    assert "the formula gives every position one rate r" in metrics


@pytest.fixture(scope="module")
def sampled(bundled):
    from specdec import speculative_generate
    return speculative_generate(bundled, PROMPT, RunSettings(gamma=4, max_new_tokens=32, seed=0,
                                                             sampling=SamplingConfig(temperature=1.0)))


def test_the_lab_names_its_skip_tv_and_the_decode_tabs_apart(sampled):
    from specdec.app.page import lab_tab
    from specdec.explain import lab

    differ = 0
    for r, i in lab.drafted_positions(sampled):
        pos = sampled.rounds[r].positions[i]
        out = lab_tab.take_from_run(sampled, (r, i))
        tokens, p, q = lab.from_position(sampled, r, i)
        here = lab.bias(p, q, lab.Rule.SKIP_ADJUSTMENT)
        assert "every rule's closed form" not in out["status"]
        assert f"on these rows it is {here:.4f}, on the model's full rows {pos.skip_tv:.4f}" in out["status"]
        differ += f"{here:.4f}" != f"{pos.skip_tv:.4f}"
        folded = len(pos.p.ids) - sum(1 for t in tokens if t not in lab.TAIL_NAMES)
        assert (f"{folded} more of the step viewer's tokens joined those rows" in out["status"]) == (folded > 0)
    assert differ, "no position where the two figures differ: the test shows nothing"


def test_the_speed_explorer_speaks_in_tokens_per_second_with_the_runs_own_rates(greedy):
    gen, timed, ar, _ = greedy
    point = run_point(timed.stats, gen.settings.gamma, ar.stats)
    out = speed_tab.for_run(point)
    rates = out["rates"]
    by_role = {}
    for t in rates.data:
        by_role.setdefault(t.meta["role"], []).append(t)
    # The run's two measured points are its own token rates, the ones the headline divides.
    alone = by_role["measured alone"][0].y[0]
    spec = by_role["measured"][0].y[0]
    assert alone == pytest.approx(ar.stats.new_tokens / ar.stats.wall_seconds, rel=F64)
    assert spec == pytest.approx(timed.stats.new_tokens / timed.stats.wall_seconds, rel=F64)
    profiles, _ = speed_tab.all_profiles(point)
    for prof in profiles:   # each profile: a flat line at 1000 / its step, and the speedup curve times it
        flat = next(t for t in by_role["alone"] if t.meta["profile"] == prof.name)
        curve = next(t for t in by_role["speculative"] if t.meta["profile"] == prof.name)
        assert list(flat.y) == [pytest.approx(1000 / prof.target_step_ms)] * len(flat.x)
        v, _ = prof.verify_nearest(4)
        for a, y in zip(curve.x, curve.y):
            tokens = 5.0 if a == 1 else (1 - a ** 5) / (1 - a)
            assert y == pytest.approx(1000 / prof.target_step_ms * tokens / (4 * prof.c + v), rel=F64)


def test_a_profile_keeps_its_colour_whether_or_not_the_run_is_drawn(greedy):
    gen, timed, ar, _ = greedy
    point = run_point(timed.stats, gen.settings.gamma, ar.stats)

    def colours(p):
        fig = speed_tab.for_run(p)["compare"]
        return {t.meta["profile"]: t.line.color for t in fig.data if (t.meta or {}).get("profile")}

    with_run, without = colours(point), colours(None)
    assert without and all(with_run[name] == colour for name, colour in without.items())
    assert len(set(with_run.values())) == len(with_run)   # and no two profiles share one


def test_the_intro_names_the_c_its_profile_has():
    import re

    from specdec.app.shows.speed_charts import curve

    profiles, _ = speed_tab.load_profiles()
    graphed = next(p for p in profiles if p.name == "H100, CUDA graphs, fp32")
    intro = " ".join(speed_tab.INTRO.split())   # as the page reads it: a line break is a space
    said = float(re.search(r"CUDA graphs\* profile has c ≈ ([0-9.]+)", intro).group(1))
    assert said == pytest.approx(graphed.c, abs=display(2, 1))   # the intro gives c to 2 decimals
    # "set c to 0.89: drafting pays only if nearly every draft is accepted"
    v = graphed.verify(4)
    assert curve(0.95, 4, 0.89, v) < 1 < curve(1.0, 4, 0.89, v)


def test_one_pair_of_runs_has_no_spread_and_is_refused(bundled):
    with pytest.raises(ValueError, match="repeats must be at least 2"):
        timed_repeats(bundled, PROMPT, RunSettings(max_new_tokens=4), repeats=1)


def test_where_the_time_went_writes_its_labels_level_or_not_at_all(greedy):
    """The bars' numbers were turned on their side and shrunk in a narrow part: each is level, at
    one size, and a part too narrow for its number shows none (Plotly's uniformtext "hide")."""
    gen, timed, ar, _ = greedy
    fig = charts.time_figure(timed, ar)
    assert all(trace.textangle == 0 for trace in fig.data)
    assert fig.layout.uniformtext.mode == "hide" and fig.layout.uniformtext.minsize >= 10


@pytest.mark.parametrize("speedups, said", [
    ((0.30, 0.52, 0.73), "every repeat slower than the target alone: a loss"),
    ((1.10, 1.30, 1.20), "every repeat faster than the target alone: a win"),
    ((0.79, 1.01, 0.81), "a difference inside it is noise"),
])
def test_a_spread_wholly_below_or_above_1_is_called_a_loss_or_a_win(speedups, said):
    """"Spread 0.30–0.73×, and a difference inside it is noise" read as no verdict when every
    repeat lost: a spread on one side of 1× is a loss (or a win); only one across 1× is noise."""
    from specdec.app.shows.charts import _repeats_cell

    cell = _repeats_cell(speedups)
    assert cell.endswith(said) and f"spread {min(speedups):.2f}–{max(speedups):.2f}×" in cell
