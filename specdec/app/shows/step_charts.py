"""The step viewer's figures and tables: one round of a trace, one drafted position of it.

p against q at the position (`pq_figure`), its acceptance test (`acceptance_figure`) and how the
round ended (`end_figure`), each with its table. Pure: every number comes from the trace.

Layout, in pixels, so that no text covers another: the title at the top (one or two lines), a row
under it with the legend on the left and the linear/log buttons on the right, then the plot; tick
labels of a category axis are all drawn (none is skipped when crowded), upright or rotated 90°.
"""

from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...explain.looks import LOOKS, PALETTE, TAIL_LABELS, table_number, tail_labels, token_label
from ...trace.outcomes import Ending, Status
from ...trace.spine import Generation
from .charts import (
    FADED,
    HIGHLIGHT,
    P_COLOUR,
    Q_COLOUR,
    empty_figure,
    fixed,
    merged_layout,
    plotly_text,
    relaid,
    show_token,
    sig3,
    unique_labels,
)
from .outside import NOTE, outside_bars, outside_line, outside_of
from .step_notes import bias_note, unreachable_note  # noqa: F401 (tests read them here)

ACCEPT_HEADERS = ["quantity", "value"]
PALETTE_GREY = PALETTE["grey"]
TICK_CHARS = 12    # a token label on an axis is cut to this many characters (the hover shows it whole)


def _position(gen: Generation, round_index: int, position: int | None):
    r = gen.rounds[round_index]
    if position is None or not 0 <= position < len(r.positions):
        return r, None
    return r, r.positions[position]


def wrap(text: str, width: int) -> str:
    """Plain text in lines of at most `width` characters, for a Plotly label (<br> between lines)."""
    return "<br>".join(plotly_text(line) for line in textwrap.wrap(text, width))


def _tick(label: str, upright: bool) -> str:
    # "rest where p ≥ q" stays on one line read bottom to top: on two lines the pair of them is too
    # wide for the narrow rest-of-vocabulary panel of a half-width chart (800 px window).
    return label if len(label) <= TICK_CHARS or label in TAIL_LABELS else label[:TICK_CHARS - 1] + "…"


def _category_axis(labels: list[str], angle: int = -90) -> dict:
    """Every category labelled (array ticks: Plotly never drops one), long labels cut short."""
    return dict(type="category", tickmode="array", tickvals=labels, ticktext=[_tick(s, angle == -90) for s in labels],
                tickangle=angle, tickfont=dict(size=10), automargin=True)


def _log_range(values: list[float]) -> list[float]:
    """A log axis range (in decades) that shows every positive value, with the tallest at most 3/4
    up, leaving room above it for a pointer's label (`_pointer`)."""
    shown = [v for v in values if v > 0]
    if not shown:
        return [-3.0, 0.0]
    low, high = math.floor(math.log10(min(shown))) - 0.2, math.log10(max(shown))
    return [low, high + max(0.6, (high - low) / 3)]


def _pointer_y(value: float, kind: str, rng: list[float]) -> float:
    """Where a pointer's tip goes for a bar of `value`, in the axis's own units (Plotly places an
    annotation on a log axis by the log of its value): the bar's top, or the axis's foot for 0."""
    if kind == "linear":
        return value
    return math.log10(value) if value > 0 else rng[0]


def _scale_buttons(log: bool, axes: tuple[str, ...], values: list[float], pointed: float | None = None) -> list[dict]:
    """Two buttons on the figure itself (no server round trip) that switch its probability axes,
    each with a range that shows every bar and leaves room for the label above the tallest, and
    (`pointed`: the value of the bar the first annotation points at) moving that pointer's tip to
    the bar's top on the new scale; they sit at the right of the row under the title, the legend
    at its left."""
    top = max(values, default=1.0) or 1.0

    def args(kind):
        rng = _log_range(values) if kind == "log" else [0, top * 1.45]
        axis = _axis_scale(kind, rng)
        moved = {} if pointed is None else {"annotations[0].y": _pointer_y(pointed, kind, rng)}
        return [{**{f"{a}.{key}": value for a in axes for key, value in axis.items()}, **moved}]
    return [dict(type="buttons", direction="right", x=1.0, xanchor="right", y=1.0, yanchor="bottom",
                 showactive=True, active=1 if log else 0, pad=dict(r=0, t=0, b=4), font=dict(size=11),
                 buttons=[dict(label="linear", method="relayout", args=args("linear")),
                          dict(label="log", method="relayout", args=args("log"))])]


def _axis_scale(kind: str, rng: list[float]) -> dict:
    """A probability axis on one scale: a log axis ticks every power of ten up to 1, none above
    (its range reaches past 1 to leave room for a pointer's label, and a probability of 10 or
    1000 on a tick would be nonsense)."""
    if kind == "linear":
        return dict(type="linear", range=rng, tickmode="auto")
    return dict(type="log", range=rng, tickmode="array",
                tickvals=[10.0 ** k for k in range(math.floor(rng[0]), 1) if k >= rng[0]])


def _scale_of(buttons: list[dict], log: bool, axis: str = "yaxis") -> dict:
    """The axis settings of the scale a chart opens on, as its scale button sets them."""
    chosen = buttons[0]["buttons"][1 if log else 0]["args"][0]
    return {key.split(".", 1)[1]: value for key, value in chosen.items() if key.startswith(axis + ".")}


def _needs_log(values: list[float], marked: list[float]) -> bool:
    """Start on a log scale when a marked bar (the drafted or the drawn token) would be under 2 %
    of the tallest bar: on a linear axis it would not be seen."""
    top = max(values, default=0.0)
    shown = [v for v in marked if v > 0]
    return bool(shown) and top > 0 and min(shown) < 0.02 * top


def _pointer(labels: list[str], k: int, text: str, buttons: list[dict], log: bool) -> dict:
    """A label with an arrow pointing down at the top of category k's bar (the first scale
    button's `annotations[0].y`, on the scale shown), leaning away from the nearer edge so it
    stays inside the plot. Placed high in the plot whatever the bar's height, it pointed at empty
    space over a short bar (the drawn token in skip mode)."""
    side = k / max(len(labels) - 1, 1)
    anchor, ax = ("left", 12) if side < 0.3 else ("right", -12) if side > 0.7 else ("center", 0)
    y = buttons[0]["buttons"][1 if log else 0]["args"][0]["annotations[0].y"]
    return dict(x=labels[k], xref="x", y=y, yref="y", text=text, showarrow=True, arrowhead=2, ax=ax, ay=-26,
                xanchor=anchor, bgcolor="rgba(255,255,255,0.9)", font=dict(size=11))


LABEL_PX = 40   # the page's label of a figure (Gradio's, top left) and Plotly's modebar (top right)


LEGEND_ROW_PX = 19   # one more row of a legend that wraps


def _frame(title: str, title_lines: int, height: int, legend: bool = True, legend_rows: int = 1) -> dict:
    """The layout that puts, under the page's label, the title, the legend row under it (left),
    and the plot under that. A legend that may wrap gets room for `legend_rows` rows: it grows
    upwards from the plot, and over the title when it had one row's room."""
    top = LABEL_PX + 8 + 18 * title_lines + (34 + LEGEND_ROW_PX * (legend_rows - 1) if legend else 8)
    return dict(height=height, margin=dict(l=55, r=12, t=top, b=10),
                title=dict(text=title, font=dict(size=13), x=0, xref="paper", xanchor="left",
                           y=1 - LABEL_PX / height, yref="container", yanchor="top"),
                legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom", font=dict(size=11)))


@functools.cache
def _pq_panels() -> dict:
    """The p/q chart's two panels side by side on one probability axis: make_subplots' layout,
    made once (a make_subplots call cost half of this chart's 40 ms, profiled); the traces name
    their axes (x, y: the top tokens; x2, y2: the rest of the vocabulary) as its add_trace would."""
    layout = make_subplots(rows=1, cols=2, column_widths=[0.84, 0.16], horizontal_spacing=0.03,
                           shared_yaxes=True).layout.to_plotly_json()
    layout.pop("template", None)
    return layout


def pq_figure(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> go.Figure:
    """p and q side by side over the stored top tokens (left), and the rest of the vocabulary in
    its own panel (right: the two tail parts, split by the sign of p − q, with their exact mass),
    on one shared probability axis. The drafted token is outlined and labelled with its p and q;
    the axis starts on a log scale when its bars would be too small to see, and two buttons
    switch the scale."""
    if gen is None or not gen.rounds:
        return empty_figure(go.Figure(), "No run yet")
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return empty_figure(go.Figure(), f"Round {r.index + 1} drafted nothing (the drafter had no proposal): "
                                   "see how the round ended")
    labels = unique_labels(gen, pos.p.ids)
    drafted = pos.p.ids.index(pos.draft_token)
    tails = list(tail_labels(pos.p))
    widths = [3 if k == drafted else 0 for k in range(len(labels))]
    traces = []
    for name, d, colour, shape in (("p (target)", pos.p, P_COLOUR, ""), ("q (draft)", pos.q, Q_COLOUR, "/")):
        traces.append(go.Bar(
            x=labels, y=list(d.probs), name=name, legendgroup=name, offsetgroup=name,
            marker=dict(color=colour, line=dict(color=HIGHLIGHT, width=widths), pattern=dict(shape=shape)),
            hovertemplate="%{x}<br>" + name.split()[0] + " = %{y:.4g}<extra></extra>", xaxis="x", yaxis="y"))
        traces.append(go.Bar(
            x=tails, y=d.buckets(), name=name, legendgroup=name, offsetgroup=name, showlegend=False,
            marker=dict(color=colour, pattern=dict(shape=shape)),
            hovertemplate="%{x}<br>" + name.split()[0] + " = %{y:.4g}<extra></extra>", xaxis="x2", yaxis="y2"))
    traces += outside_bars(pos, labels, P_COLOUR, HIGHLIGHT)   # cross-hatched over their p bars
    values = pos.p.probs + pos.q.probs + pos.p.buckets() + pos.q.buckets()
    log = _needs_log(values, [pos.p_draft, pos.q_draft])
    buttons = _scale_buttons(log, ("yaxis", "yaxis2"), values, pointed=max(pos.p_draft, pos.q_draft))
    scale = dict(_scale_of(buttons, log), tickformat="~g")
    title = (f"Round {r.index + 1}, draft {position + 1}: drafted <b>{show_token(gen, pos.draft_token)}</b><br>"
             f"p(x) = {sig3(pos.p_draft)}, q(x) = {sig3(pos.q_draft)}, β = Σ min(p, q) = {pos.beta:.3f}")
    outside = wrap(outside_line(gen, pos), OUTSIDE_CHARS)
    title += f"<br><span style='font-size:12px'>{outside}</span>" if outside else ""
    pointer = _pointer(labels, drafted, f"drafted: p = {sig3(pos.p_draft)}, q = {sig3(pos.q_draft)}", buttons, log)
    return go.Figure(data=traces, layout=merged_layout(_pq_panels(), dict(
        yaxis=dict(scale, title=dict(text="probability")), yaxis2=scale,
        xaxis=dict(_category_axis(labels), title=dict(text="top tokens", font=dict(size=11))),
        xaxis2=dict(_category_axis(tails), title=dict(text="rest of the<br>vocabulary", font=dict(size=11))),
        annotations=[pointer]),
        _frame(title, title.count("<br>") + 1, 470 + 18 * (title.count("<br>") - 1)),
        dict(barmode="group", updatemenus=buttons)))


def pq_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    out = outside_of(pos)
    rows = [[token_label(gen, i), i, table_number(a), table_number(b), table_number(min(a, b)),
             "◀ drafted" if i == pos.draft_token else NOTE if i in out else ""]
            for i, a, b in zip(pos.p.ids, pos.p.probs, pos.q.probs)]
    rows += [[name, None, table_number(a), table_number(b), table_number(min(a, b)), ""]
             for name, a, b in zip(tail_labels(pos.p), pos.p.buckets(), pos.q.buckets())]
    return rows


PQ_HEADERS = ["token", "id", "p (target)", "q (draft)", "min(p, q)", "note"]
OUTSIDE_CHARS = 84   # characters per line of the title's line on tokens outside the drafter's vocabulary

NOTE_CHARS = 56   # characters per line of the notes under the acceptance test (about 340 px at 11 px: a
                  # half-width chart in an 800 px window)
DETAIL_CHARS = 52   # characters per line of the test's verdict under its title (12 px)
LEGEND_ROWS_PX = 2 * 20   # the legend under the bar may wrap to two rows in a narrow chart


def _verdict(pos) -> tuple[str, str]:
    """The test's outcome in a few words, and a second line that says what it means."""
    symbol, threshold = LOOKS[pos.status].symbol, min(1.0, pos.ratio)
    if pos.status is Status.ACCEPTED:
        return (f"ACCEPTED {symbol}", f"u = {pos.u:.3f} < min(1, p/q) = {threshold:.3f}: the draft is kept")
    if pos.status is Status.REJECTED:
        return (f"REJECTED {symbol}", f"u = {pos.u:.3f} ≥ min(1, p/q) = {threshold:.3f}: this draft and the "
                                      "ones after it are thrown away")
    return (f"NOT TESTED {symbol}", f"thrown away untested: an earlier draft was rejected (its u = {pos.u:.3f} "
                                   "was drawn, never used)")


def acceptance_figure(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> go.Figure:
    """The acceptance test at one drafted position: min(1, p(x)/q(x)) against the uniform draw u."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return empty_figure(fig, "No run yet", height=220)
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return empty_figure(fig, f"Round {r.index + 1} drafted nothing: no test", height=220)
    threshold = min(1.0, pos.ratio)
    fig.add_trace(go.Bar(x=[threshold], y=["test"], orientation="h", name="min(1, p(x)/q(x))", width=0.6,
                         marker=dict(color=LOOKS[Status.ACCEPTED].colour, pattern=dict(shape="/")),
                         hovertemplate="min(1, p/q) = %{x:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(x=[1.0 - threshold], y=["test"], orientation="h", name="rejection zone", width=0.6,
                         base=[threshold], marker=dict(color="rgba(213,94,0,0.25)"),
                         hovertemplate="reject if u ≥ %{base:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[pos.u], y=["test"], mode="markers", name="u (uniform draw)",
                             marker=dict(symbol="line-ns", size=40, line=dict(width=4, color=HIGHLIGHT)),
                             hovertemplate="u = %{x:.4f}<extra></extra>"))
    # u's value above the bar, on white, leaning away from the nearer edge.
    anchor, ax = ("left", 10) if pos.u < 0.2 else ("right", -10) if pos.u > 0.8 else ("center", 0)
    u_label = dict(x=pos.u, y=0.3, text=f"u = {pos.u:.3f}", showarrow=True, arrowhead=2, ax=ax, ay=-24,
                   xanchor=anchor, bgcolor="white", bordercolor=HIGHLIGHT, borderwidth=1, font=dict(size=12))
    notes = [bias_note(gen, pos)] + [n for n in (unreachable_note(gen, pos),) if n]
    if gen.settings.sampling.greedy:
        notes.append("Temperature 0: p and q are one-hot, so min(1, p/q) is 0 or 1 and u, though drawn, "
                     "cannot change the outcome.")
    note = "<br>".join(wrap(n, NOTE_CHARS) for n in notes)
    lines = note.count("<br>") + 1
    verdict, detail = _verdict(pos)
    detail = wrap(detail, DETAIL_CHARS)
    title_lines = 2 + detail.count("<br>")
    note_at = 24 + LEGEND_ROWS_PX + 8   # px under the bar: the legend's rows first
    plot, top, bottom = 110, LABEL_PX + 8 + 18 * title_lines + 8, note_at + 2 + 15 * lines
    height = plot + top + bottom
    title = (f"Test: p(x)/q(x) = {sig3(pos.p_draft)}/{sig3(pos.q_draft)} = {sig3(pos.ratio)} → <b>{verdict}</b><br>"
             f"<span style='font-size:12px'>{detail}</span>")
    note_label = dict(text=note, xref="paper", yref="paper", x=0, y=-note_at / plot, xanchor="left", yanchor="top",
                      align="left", showarrow=False, font=dict(size=11))
    return relaid(fig, _frame(title, title_lines, height, legend=False), dict(
        annotations=[u_label, note_label], barmode="overlay", margin=dict(l=12, r=12, t=top, b=bottom),
        legend=dict(orientation="h", x=0, y=-24 / plot, yanchor="top", xanchor="left"),
        xaxis=dict(range=[0, 1.02]), yaxis=dict(visible=False, range=[-0.5, 1.0])))


def acceptance_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    untested = pos.status is Status.UNUSED
    here = "— (not tested: no output here)" if untested else \
        0.0 if not gen.settings.skip_adjustment else _r(pos.skip_tv)
    return [["drafted token", token_label(gen, pos.draft_token)], ["p(x)", table_number(pos.p_draft)],
            ["q(x)", table_number(pos.q_draft)], ["p(x)/q(x)", table_number(pos.ratio)],
            ["min(1, p(x)/q(x)): chance the drafted token x passes (known once x is drafted)",
             table_number(min(1.0, pos.ratio))],
            ["u" + (" (drawn, never used)" if untested else ""), table_number(pos.u)],
            ["β = Σ min(p, q): chance a draft passes here, before it is drawn from q (min(1, p/q) averaged over q)",
             table_number(pos.beta)], ["verdict", pos.status.value],
            ["TV(output here, p) under this run's rule", here],
            ["TV(output here, p) if the adjustment were skipped", "—" if untested else _r(pos.skip_tv)],
            ["p's mass where q is 0 (no draft can be those tokens; only the residual gives them)",
             "— (not stored)" if pos.p_where_q_is_0 is None else table_number(pos.p_where_q_is_0)]] + (
        [] if pos.p_outside_vocab is None else
        [["p's mass outside the drafter's vocabulary (part of where q is 0)", table_number(pos.p_outside_vocab)]])


# ---------------------------------------------------------------- how the round ended

@dataclass(frozen=True)
class EndView:
    """The round's last draw over one set of rows, shared by its chart and its table: the stored
    ids of the end distribution, joined (after a rejection) by every token stored at the rejected
    position (its p and q are the same rows), so the rejected draft and every token whose residual
    is 0 keep their own row; then the tail parts, less what those rows took out of them."""

    ids: list[int | None]        # None for a tail part
    labels: list[str]            # axis and table labels (token labels, then the tail names)
    p: list[float]
    q: list[float] | None        # None when no draft was rejected (bonus, plain step)
    sampled: list[float]         # the distribution the last token was drawn from
    drafted: int | None          # the rejected draft's token, if any


def _extra_value(r, p: float, q: float) -> float:
    """What the round's end distribution gives a token stored at the rejected position but not
    among the end distribution's ids: its residual share, p itself (skip), or 0 (greedy argmax)."""
    if r.ending is Ending.RESIDUAL:
        return max(0.0, p - q) / r.residual_mass if r.residual_mass else 0.0
    return p if r.ending is Ending.BIASED_P else 0.0


def end_view(gen: Generation, round_index: int) -> EndView:
    r = gen.rounds[round_index]
    d = r.end_dist
    p = dict(zip(d.ids, r.end_p.probs))
    q = dict(zip(d.ids, r.end_q.probs)) if r.end_q is not None else None
    sampled = dict(zip(d.ids, d.probs))
    tails = [d.buckets(), r.end_p.buckets(), r.end_q.buckets() if r.end_q is not None else None]
    rejected = r.positions[r.n_accepted] if q is not None and r.n_accepted < len(r.positions) else None
    if rejected is not None and None not in (d.split, r.end_p.split, r.end_q.split):
        for i, pi, qi in zip(rejected.p.ids, rejected.p.probs, rejected.q.probs):
            if i in p:
                continue
            si, part = _extra_value(r, pi, qi), 0 if pi >= qi else 1   # its tail part: by the sign of p - q
            for tail, v in zip(tails, (si, pi, qi)):
                tail[part] = max(0.0, tail[part] - v)
            p[i], q[i], sampled[i] = pi, qi, si
    order = sorted(p, key=lambda i: (-sampled[i], -p[i], i))
    names = list(tail_labels(d))
    return EndView(ids=[*order, *[None] * len(names)], labels=unique_labels(gen, order) + names,
                   p=[p[i] for i in order] + tails[1],
                   q=None if q is None else [q[i] for i in order] + tails[2],
                   sampled=[sampled[i] for i in order] + tails[0],
                   drafted=rejected.draft_token if rejected is not None else None)


def _end_title(gen: Generation, r, token: str) -> tuple[str, int]:
    look = LOOKS[r.ending]
    n = r.n_accepted + 1
    if r.ending is Ending.RESIDUAL:
        beta = r.positions[r.n_accepted].beta
        return (f"Round {r.index + 1}: draft {n} rejected → resampled <b>{token}</b> from the residual "
                f"norm(max(0, p − q))<br>mass of max(0, p − q) = 1 − β = {fixed(r.residual_mass, 3)} "
                f"(β = {beta:.3f} at this position): each bar of max(0, p − q) is divided by it", 2)
    if r.ending is Ending.BIASED_P:
        return (f"<b>{look.symbol} BIASED</b>: round {r.index + 1}: draft {n} rejected → sampled <b>{token}</b> "
                f"from p, not from the residual<br><span style='color:{look.colour}'><b>Adjustment skipped: tokens "
                "q over-proposes are now too likely. The output no longer follows p.</b></span>", 2)
    titles = {Ending.BONUS: f"Round {r.index + 1}: all {len(r.positions)} drafts accepted → bonus token "
                            f"<b>{token}</b> drawn from p at position {len(r.positions) + 1}",
              Ending.PLAIN: f"Round {r.index + 1}: nothing was drafted → one plain target step drew "
                            f"<b>{token}</b> from p",
              Ending.GREEDY: f"Round {r.index + 1}: draft {n} did not match → <b>{token}</b>, the argmax of p"}
    return titles[r.ending], 1


def end_figure(gen: Generation | None, round_index: int = 0) -> go.Figure:
    """How the round's last token was drawn, over `end_view`'s rows.

    residual: the normalised residual (= end_dist, wide, outlined) over max(0, p − q) (narrow,
    inside it); a token with q ≥ p gets no residual, marked at 0 (its full p was given at the
    acceptance step); biased p (adjustment skipped): p used as-is, q faded, with the warning;
    bonus / plain step / greedy: the distribution used. The drawn token is outlined and labelled.
    """
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return empty_figure(fig, "No run yet", height=360)
    r = gen.rounds[round_index]
    v = end_view(gen, round_index)
    drawn = v.ids.index(r.end_token)
    widths = [3 if k == drawn else 0 for k in range(len(v.labels))]
    look = LOOKS[r.ending]
    used = dict(color=look.colour, line=dict(color=HIGHLIGHT, width=widths))
    extra = {}
    if r.ending is Ending.RESIDUAL:
        mass = fixed(r.residual_mass, 3)
        fig.add_trace(go.Bar(x=v.labels, y=v.sampled, name=f"normalised residual = max(0, p − q) / {mass} (sampled)",
                             width=0.8, marker=dict(**used, pattern=dict(shape="x")),
                             hovertemplate="%{x}<br>residual = %{y:.4g}<extra></extra>"))
        fig.add_trace(go.Bar(x=v.labels, y=[max(0.0, a - b) for a, b in zip(v.p, v.q)], name="max(0, p − q)",
                             width=0.4, marker=dict(color=LOOKS[Status.REJECTED].colour),
                             hovertemplate="%{x}<br>max(0, p − q) = %{y:.4g}<extra></extra>"))
        none = [k for k, (a, b) in enumerate(zip(v.p, v.q)) if b >= a and b > 0]
        fig.add_trace(go.Scatter(
            x=[v.labels[k] for k in none], y=[0.0] * len(none), yaxis="y2", mode="markers", cliponaxis=False,
            name="q ≥ p: residual 0 (its p was given at acceptance)",
            marker=dict(symbol="line-ew", size=14, line=dict(width=3, color=PALETTE_GREY)),
            customdata=[[v.p[k], v.q[k]] for k in none],
            hovertemplate="%{x}<br>p = %{customdata[0]:.4g} ≤ q = %{customdata[1]:.4g}: residual 0<extra></extra>"))
        extra = dict(yaxis2=dict(overlaying="y", range=[0, 1], visible=False, fixedrange=True))
    elif r.ending is Ending.BIASED_P:
        fig.add_trace(go.Bar(x=v.labels, y=v.sampled, name="p (used instead of the residual: biased)", width=0.8,
                             marker=dict(**used, pattern=dict(shape="\\")),
                             hovertemplate="%{x}<br>p = %{y:.4g}<extra></extra>"))
        fig.add_trace(go.Bar(x=v.labels, y=v.q, name="q (ignored)", width=0.4, marker=dict(color=FADED),
                             hovertemplate="%{x}<br>q = %{y:.4g}<extra></extra>"))
    else:
        name = {Ending.BONUS: "p at position γ+1 (bonus)", Ending.PLAIN: "p (plain target step)",
                Ending.GREEDY: "argmax of p (greedy match)"}[r.ending]
        fig.add_trace(go.Bar(x=v.labels, y=v.sampled, name=name, marker=dict(**used, pattern=dict(shape=".")),
                             hovertemplate="%{x}<br>p = %{y:.4g}<extra></extra>"))
    values = v.sampled + (v.q or [])
    log = _needs_log(v.sampled, [x for x in v.sampled if x > 0])
    tallest = max(t.y[drawn] for t in fig.data if t.type == "bar")   # at the drawn token: its bar, or q's over it
    buttons = _scale_buttons(log, ("yaxis",), values, pointed=tallest)
    title, lines = _end_title(gen, r, show_token(gen, r.end_token))
    pointer = _pointer(v.labels, drawn, f"drawn: {sig3(v.sampled[drawn])}", buttons, log)
    return relaid(fig, extra, dict(annotations=[pointer]),
                  _frame(title, lines, 480 + LEGEND_ROW_PX * (len(fig.data) - 1), legend_rows=len(fig.data)),
                  dict(barmode="overlay", updatemenus=buttons,
                       xaxis=_category_axis(v.labels, _end_tick_angle(v.labels)),
                       yaxis=dict(_scale_of(buttons, log), title="probability", tickformat="~g")))


CROWDED = 24   # categories: beyond it, labels slanted at 45° overlap in a 650 px chart (800 px window)


def _end_tick_angle(labels: list[str]) -> int:
    """Slanted tick labels for a few categories; upright (read bottom to top) for many, which need
    only a line's height each: slanted, 37 of them overlapped at 800 px."""
    return -90 if len(labels) > CROWDED else -45


def end_rows(gen: Generation | None, round_index: int = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r = gen.rounds[round_index]
    v = end_view(gen, round_index)
    rows = []
    for k, (i, label) in enumerate(zip(v.ids, v.labels)):
        p, q = v.p[k], None if v.q is None else v.q[k]
        note = "◀ drawn" if i == r.end_token else "◀ rejected draft" if i is not None and i == v.drafted else ""
        rows.append([label if i is None else token_label(gen, i), i, _r(p), _r(q), _r(None if q is None else p - q),
                     table_number(v.sampled[k]), note])
    return rows


END_HEADERS = ["token", "id", "p", "q", "p − q", "chance of being drawn", "note"]


def _r(x):
    return None if x is None else table_number(x)
