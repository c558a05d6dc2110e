"""Chart builders as pure functions: a trace in, figure data out, every number from the trace."""

from __future__ import annotations

import html

import pytest

import bounds
from specdec import Rule, RunSettings, SamplingConfig, speculative_generate
from specdec.app.shows import charts, step_charts
from specdec.explain.looks import TAIL_LABELS
from specdec.explain.speed import expected_tokens_per_round
from specdec.trace.outcomes import Ending
from specdec.trace.spine import Generation
from specdec.trace.validate import load_trace
from tiny import tiny_pair

ENDINGS = {e.value for e in Ending}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=8, context=64)


@pytest.fixture(scope="module")
def gen(pair):
    return speculative_generate(pair, [1, 2, 3], RunSettings(gamma=4, max_new_tokens=40, seed=0,
                                                             sampling=SamplingConfig(temperature=1.0)))


@pytest.fixture(scope="module")
def skipped(pair):
    return speculative_generate(pair, [1, 2, 3], RunSettings(gamma=4, max_new_tokens=40, seed=0,
                                                             rule=Rule.SKIP_ADJUSTMENT))


def _round_with(gen: Generation, rule: str):
    for r in gen.rounds:
        if r.ending == rule:
            return r
    pytest.skip(f"no round ended by {rule}")


def test_fixture_has_rejections_and_bonus(gen, skipped):
    rules = {r.ending for r in gen.rounds}
    assert {"residual", "bonus"} <= rules
    assert "biased_p" in {r.ending for r in skipped.rounds}


def test_timeline_counts_match_the_trace(gen):
    fig = charts.timeline_figure(gen)
    by_kind = {t.meta: t for t in fig.data}
    for status in ("accepted", "rejected", "unused"):
        expected = sum(pos.status == status for r in gen.rounds for pos in r.positions)
        assert len(by_kind[status].x) == expected if expected else status not in by_kind
    ends = sum(len(by_kind[k].x) for k in ENDINGS if k in by_kind)
    assert ends == len(gen.rounds)
    # customdata points back to (round, position) and the cell sits in that column/row.
    for t in fig.data:
        for x, y, (r, i) in zip(t.x, t.y, t.customdata):
            assert x == r + 1
            assert y == (i + 1 if i >= 0 else max(len(r.positions) for r in gen.rounds) + 1)
            if i >= 0:
                assert gen.rounds[r].positions[i].status == t.meta


def test_timeline_table(gen):
    rows = charts.timeline_rows(gen)
    assert len(rows) == len(gen.rounds)
    for row, r in zip(rows, gen.rounds):
        assert row[0] == r.index + 1 and row[1] == len(r.positions) and row[2] == r.n_accepted
        assert row[3].count("✓") == r.n_accepted
        assert row[6] == "".join(gen.token(t) for t in r.emitted)


def test_timeline_highlights_selected_round(gen):
    fig = charts.timeline_figure(gen, selected=2)
    assert len(fig.layout.shapes) == 1
    assert fig.layout.shapes[0].x0 == pytest.approx(2.5)
    assert charts.timeline_figure(gen).layout.shapes == ()


def test_pq_bars_equal_the_trace(gen):
    r = _round_with(gen, "residual")
    i = r.n_accepted
    pos = r.positions[i]
    assert pos.draft_token in pos.p.ids   # vocab 8: every token is kept
    fig = step_charts.pq_figure(gen, r.index, i)
    p, p_tail, q, q_tail = fig.data   # top tokens and the tail's two parts, in their own panel
    assert p.name == p_tail.name == "p (target)" and q.name == q_tail.name == "q (draft)"
    assert list(p.y) == pos.p.probs and list(q.y) == pos.q.probs
    assert list(p_tail.y) == pos.p.split and list(q_tail.y) == pos.q.split
    assert list(p_tail.x) == list(TAIL_LABELS) and sum(p_tail.y) == pytest.approx(pos.p.rest)
    # the drafted token, and only it, is outlined
    k = pos.p.ids.index(pos.draft_token)
    widths = list(p.marker.line.width)
    assert widths[k] > 0 and sum(w > 0 for w in widths) == 1
    rows = step_charts.pq_rows(gen, r.index, i)
    assert [row[0] for row in rows[-2:]] == list(TAIL_LABELS)
    assert [row[2] for row in rows[-2:]] == [round(v, 6) for v in pos.p.split]
    assert [row[5] for row in rows].count("◀ drafted") == 1


def test_drafted_token_always_has_its_own_bar(gen):
    """The decoder keeps every drafted token among the stored ids, so its bars are its exact p(x),
    q(x); a trace with the drafted token moved into the tail is refused at import, not drawn."""
    for r in gen.rounds:
        for i, pos in enumerate(r.positions):
            p, p_tail, q, _ = step_charts.pq_figure(gen, r.index, i).data
            k = pos.p.ids.index(pos.draft_token)
            assert p.y[k] == pos.p_draft and q.y[k] == pos.q_draft
            assert list(p.marker.line.width)[k] > 0
            assert sum(p.y) + sum(p_tail.y) == pytest.approx(1, abs=bounds.rounding(8))   # float32, vocab 8
    d = gen.to_dict()
    pos = d["rounds"][0]["positions"][0]
    k = pos["p"]["ids"].index(pos["draft_token"])
    part = 0 if pos["p"]["probs"][k] >= pos["q"]["probs"][k] else 1   # the tail part of its sign
    for side in ("p", "q"):   # move the drafted token into the tail, masses kept consistent
        mass = pos[side]["probs"].pop(k)
        pos[side]["rest"] += mass
        pos[side]["split"][part] += mass
        pos[side]["ids"].pop(k)
    with pytest.raises(ValueError, match="draft_token .* not among the stored ids"):
        load_trace(d)


def test_acceptance_figure_shows_threshold_u_and_verdict(gen):
    r = _round_with(gen, "residual")
    pos = r.positions[r.n_accepted]
    fig = step_charts.acceptance_figure(gen, r.index, r.n_accepted)
    names = {t.name: t for t in fig.data}
    assert names["min(1, p(x)/q(x))"].x[0] == pytest.approx(min(1.0, pos.ratio))
    assert names["u (uniform draw)"].x[0] == pytest.approx(pos.u)
    assert "REJECTED" in fig.layout.title.text
    acc = next((r, k) for r in gen.rounds for k, p in enumerate(r.positions) if p.status == "accepted")
    assert "ACCEPTED" in step_charts.acceptance_figure(gen, acc[0].index, acc[1]).layout.title.text


def test_residual_figure(gen):
    """The normalised residual over max(0, p − q), on one probability axis: no bar below 0, and
    every token with q ≥ p marked as getting no residual."""
    r = _round_with(gen, "residual")
    fig = step_charts.end_figure(gen, r.index)
    names = [t.name for t in fig.data]
    assert names == [f"normalised residual = max(0, p − q) / {r.residual_mass:.3f} (sampled)", "max(0, p − q)",
                     "q ≥ p: residual 0 (its p was given at acceptance)"]
    res, pos_part, none = fig.data
    view = step_charts.end_view(gen, r.index)
    diff = [p - q for p, q in zip(view.p, view.q)]
    assert list(pos_part.y) == [max(0.0, d) for d in diff]
    assert min(pos_part.y) >= 0 and min(res.y) >= 0          # nothing below 0 on a probability axis
    assert list(res.y) == view.sampled
    for i, v in zip(r.end_dist.ids, r.end_dist.probs):       # the stored residual, as the decoder drew it
        assert view.sampled[view.ids.index(i)] == v
    assert sum(view.sampled) == pytest.approx(1, abs=bounds.rounding(8))   # float32 residual, vocab 8
    k = view.ids.index(r.end_token)
    assert list(res.marker.line.width)[k] > 0
    assert list(none.x) == [label for label, a, b in zip(view.labels, view.p, view.q) if b >= a and b > 0]
    # the residual is zero wherever p <= q
    for d, v in zip(diff, view.sampled):
        if d <= 0:
            assert v == pytest.approx(0, abs=bounds.rounding(8))


def test_skip_adjustment_figure_warns(skipped):
    r = _round_with(skipped, "biased_p")
    fig = step_charts.end_figure(skipped, r.index)
    assert fig.data[0].name == "p (used instead of the residual: biased)"
    assert list(fig.data[0].y) == r.end_dist.probs + r.end_dist.buckets()
    assert r.end_dist.probs == r.end_p.probs   # the distribution used is p itself
    assert "BIASED" in fig.layout.title.text and "Adjustment skipped" in fig.layout.title.text
    assert "biased" in charts.metrics_markdown(skipped).lower()


def test_bonus_figure(gen):
    r = _round_with(gen, "bonus")
    fig = step_charts.end_figure(gen, r.index)
    assert fig.data[0].name == "p at position γ+1 (bonus)"
    assert list(fig.data[0].y) == r.end_dist.probs + [r.end_dist.rest]
    assert f"position {len(r.positions) + 1}" in fig.layout.title.text


def test_text_html_marks_every_token(gen, skipped):
    out = charts.text_html(gen)
    emitted = sum(len(r.emitted) for r in gen.rounds)
    assert out.count('data-kind="accepted" data-round') + sum(
        out.count(f'data-kind="{k}" data-round') for k in ENDINGS) == emitted
    assert out.count('data-kind="rejected" data-round') == sum(r.ending == "residual" for r in gen.rounds)
    assert "line-through" in out and "✓" in out   # second cue besides colour
    assert 'data-kind="biased_p" data-round' in charts.text_html(skipped)
    assert 'data-kind="residual" data-round' not in charts.text_html(skipped)


def test_everything_is_escaped(gen):
    evil = "<script>alert(1)</script><b>x</b>"
    g = Generation.from_dict(gen.to_dict())
    g.prompt = evil
    tok = g.rounds[0].positions[0].draft_token
    g.token_text[tok] = "<img src=x onerror=alert(1)>"
    g.token_text[g.rounds[0].end_token] = "<b>"
    out = charts.text_html(g)
    assert "<script>" not in out and "<img" not in out and "<b>x" not in out
    assert html.escape(evil) in out
    fig = step_charts.pq_figure(g, 0, 0)
    assert all("<img" not in str(x) for x in fig.data[0].x)
    assert "&lt;img" in fig.layout.title.text
    assert all("<b>" not in str(x) for t in step_charts.end_figure(g, 0).data for x in t.x)
    assert "<img" not in "".join(t for tr in charts.timeline_figure(g).data for t in tr.hovertext)


def test_metrics_use_the_trace_numbers(gen):
    s = gen.stats
    text = charts.metrics_markdown(gen)
    assert f"{s.acceptance_rate:.3f}" in text and f"{s.expected_acceptance:.3f}" in text
    assert f"{expected_tokens_per_round(s.acceptance_rate, 4):.2f}" in text
    assert f"target **{s.target_forwards}**" in text


def test_import_round_trip_gives_identical_figures(gen):
    back = load_trace(gen.to_json())
    for r in range(len(gen.rounds)):
        assert step_charts.end_figure(back, r).to_json() == step_charts.end_figure(gen, r).to_json()
    assert charts.timeline_figure(back, 1).to_json() == charts.timeline_figure(gen, 1).to_json()


def test_empty_states():
    for fig in (charts.timeline_figure(None), step_charts.pq_figure(None), step_charts.acceptance_figure(None),
                step_charts.end_figure(None)):
        assert fig.data == ()
    assert "Run" in charts.text_html(None)


def test_round_without_drafts(pair):
    """The n-gram drafter may propose nothing: the round is a plain target step."""
    gen = speculative_generate(pair, [1, 2, 3, 4, 5, 6], RunSettings(gamma=3, max_new_tokens=12, seed=0,
                                                                     drafter="ngram"))
    empty = next((r for r in gen.rounds if not r.positions), None)
    if empty is None:
        pytest.skip("every round drafted something")
    assert step_charts.pq_figure(gen, empty.index, None).data == ()
    assert step_charts.acceptance_figure(gen, empty.index, 0).data == ()
    assert step_charts.end_figure(gen, empty.index).data[0].name == "p (plain target step)"
    assert empty.ending == "plain"
    assert step_charts.pq_rows(gen, empty.index, None) == []
    fig = charts.timeline_figure(gen)
    assert sum(len(t.x) for t in fig.data if t.meta in ENDINGS) == len(gen.rounds)


def test_the_metrics_say_where_a_run_ran_and_what_half_precision_gives_up(gen):
    text = charts.metrics_markdown(gen)
    threads = gen.models["threads"]   # the torch threads the run took (`core.threads`)
    assert f"| where it ran | cpu, float32, eager engine, {threads} torch thread" in text
    assert "Half precision" not in text
    half = Generation.from_dict(gen.to_dict())
    half.models = {**half.models, "dtype": "bfloat16", "engine": "cuda graphs", "device": "cuda"}
    text = charts.metrics_markdown(half)
    assert "cuda, bfloat16, cuda graphs engine" in text
    assert "Half precision" in text and "not token for token" in text


def test_relaid_gives_the_layout_update_layout_gives():
    """`charts.relaid` (one layout assignment, cheaper) against Plotly's own update_layout called
    once per update: nested dicts merged key by key, lists replaced, later updates winning, and
    the default template kept, on a plain figure and on a make_subplots grid."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    updates = [dict(height=300, margin=dict(l=10, r=5), title=dict(text="a", font=dict(size=13)),
                    xaxis=dict(type="category", tickvals=["x", "y"], title=dict(text="t")),
                    annotations=[dict(text="one", x=0, y=0)]),
               dict(margin=dict(l=20), title=dict(x=0), yaxis2=dict(type="log"), barmode="group",
                    annotations=[dict(text="two", x=1, y=1)], updatemenus=[dict(type="buttons")])]
    for make in (lambda: go.Figure(go.Bar(x=[1], y=[2])),
                 lambda: make_subplots(rows=1, cols=2, shared_yaxes=True).add_trace(go.Bar(x=[1], y=[2]),
                                                                                     row=1, col=2)):
        plotly_way = make()
        for u in updates:
            plotly_way.update_layout(u)
        assert charts.relaid(make(), *updates).to_plotly_json() == plotly_way.to_plotly_json()


def test_a_rejected_newline_breaks_no_line_in_the_page_s_text():
    """Issue 38: a struck-through "↵" draft rendered as a real line break (the text sits in a
    pre-wrap box). Its ↵ stays, on the line; an accepted newline still breaks the line."""
    from specdec.trace.outcomes import Status

    rejected = charts._span(Status.REJECTED, "\n", "t", 1)
    assert "↵" in rejected and "\n" not in rejected
    assert "\n" not in charts._span(Status.REJECTED, " a\nb", "t", 1)
    accepted = charts._span(Status.ACCEPTED, "\n", "t", 1)
    assert accepted.endswith("\n") and "↵" in accepted   # negative control: the text's own newline


def test_the_beta_strip_has_a_cell_per_drafted_position_shaded_and_hatched_by_beta(gen):
    """Issue 38 (asked for by a learner): one cell per drafted position, in text order, its β from
    the trace, a lightness of one hue growing with β, hatched under LOW (a cue without colour),
    reachable by Tab and named for a screen reader. The side-by-side texts carry no strip."""
    import re

    from specdec.app.shows import beta_strip

    out = charts.text_html(gen)
    cells = re.findall(r'<span class="beta-cell"[^>]*>', out)
    positions = [(r.index, k, pos) for r in gen.rounds for k, pos in enumerate(r.positions)]
    assert len(cells) == len(positions) > 0
    for cell, (r, k, pos) in zip(cells, positions):
        assert f'data-round="{r}" data-position="{k}"' in cell and 'tabindex="0"' in cell
        assert float(re.search(r'data-beta="([0-9.]+)"', cell).group(1)) == pytest.approx(pos.beta, abs=5e-7)
        assert f"β = {pos.beta:.3f}" in html.unescape(re.search(r'aria-label="([^"]*)"', cell).group(1))
        assert ("repeating-linear-gradient" in cell) == (pos.beta < beta_strip.LOW)
    lightness = [sum(int(x) for x in re.findall(r"\d+", beta_strip.shade(b))) for b in (0, 0.25, 0.5, 0.75, 1)]
    assert lightness == sorted(lightness, reverse=True) and len(set(lightness)) == 5
    assert "beta-cell" not in charts.side_by_side_html(gen, gen, "the same")
