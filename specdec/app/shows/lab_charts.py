"""Plotly figures of the exactness lab: pure functions, a `lab.LabResult` in, a Figure out.

Colours come from `looks.PALETTE` (Okabe–Ito, colour-blind safe) and every rule also has its own
marker, dash and bar pattern, so the charts read in greyscale too. Every number drawn is read from
the `LabResult` (frequencies, intervals, noise floor, closed forms), never recomputed here.
Every trace of a rule carries `meta={"rule": <rule value>, "role": ...}` so tests (and the
browser) can find it.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...core.sampling import Rule
from ...explain.lab import EXACT_TOLERANCE, OTHER, RULE_NAMES, TAIL_NAMES, LabResult, closed_form_text
from ...explain.looks import PALETTE

STYLE = {
    Rule.EXACT: dict(color=PALETTE["blue"], symbol="circle", dash="solid", pattern=""),
    Rule.SKIP_ADJUSTMENT: dict(color=PALETTE["vermillion"], symbol="square", dash="dash", pattern="/"),
    Rule.ACCEPT_ALL: dict(color=PALETTE["green"], symbol="diamond", dash="dot", pattern="x"),
    Rule.GREEDY_MATCH: dict(color=PALETTE["purple"], symbol="triangle-up", dash="dashdot", pattern="."),
}
TARGET = dict(color=PALETTE["black"], symbol="line-ew-open")
# Legends sit below the plot area (a wrapped legend on top would cover the title).
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=60, b=60),
              legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))


def decomposition_figure(lab: LabResult) -> go.Figure:
    """The proof, per rule: P[emitted as accepted draft] = q·min(1, p/q) stacked with
    P[emitted after a rejection] = (1 − β)·(what the rule samples on rejection), against p.
    For the exact rule the bars reach p exactly; for the others they visibly miss."""
    rules = list(lab.results)
    cols = 2 if len(rules) > 1 else 1
    rows = (len(rules) + cols - 1) // cols
    ticks = [tick_text(t) for t in lab.tokens]
    upright = max(len(t) for t in ticks) * len(ticks) <= 40     # short labels fit side by side
    label_px = 22 if upright else 8 + 7 * max(len(t) for t in ticks)   # room the tick labels take
    panel, gap, top, bottom = 250, label_px + 48, 80, label_px + 70
    height = rows * panel + (rows - 1) * gap + top + bottom
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True, vertical_spacing=gap / (height - top - bottom),
                        horizontal_spacing=0.06,
                        # the short names: a long one ran out of a half-width panel at 800 px
                        subplot_titles=[f"{RULE_NAMES[r].short}: TV to p = {closed_form_text(lab.results[r].bias)}"
                                        for r in rules])
    for k, rule in enumerate(rules):
        r, st = lab.results[rule], STYLE[rule]
        row, col = k // cols + 1, k % cols + 1
        fig.add_bar(x=lab.tokens, y=r.accepted_part, name="emitted as accepted draft: q·min(1, p/q)",
                    marker=dict(color=st["color"], line=dict(color=st["color"], width=1)),
                    legendgroup="accepted", showlegend=k == 0, row=row, col=col,
                    meta={"rule": rule.value, "role": "accepted"},
                    hovertemplate="%{x}: %{y:.4f} as accepted draft<extra>" + RULE_NAMES[rule].short + "</extra>")
        fig.add_bar(x=lab.tokens, y=r.rejected_part, name="emitted after a rejection: (1 − β)·resample",
                    marker=dict(color="white", line=dict(color=st["color"], width=1.5),
                                pattern=dict(shape="/", fgcolor=st["color"])),
                    legendgroup="rejected", showlegend=k == 0, row=row, col=col,
                    meta={"rule": rule.value, "role": "rejected"},
                    hovertemplate="%{x}: %{y:.4f} after a rejection<extra>" + RULE_NAMES[rule].short + "</extra>")
        fig.add_scatter(x=lab.tokens, y=lab.p, mode="markers", name="target p",
                        marker=dict(symbol=TARGET["symbol"], size=22, color=TARGET["color"],
                                    line=dict(width=3, color=TARGET["color"])),
                        legendgroup="p", showlegend=k == 0, row=row, col=col, meta={"role": "p"},
                        hovertemplate="%{x}: p = %{y:.4f}<extra></extra>")
    legend = dict(orientation="h", yanchor="top", y=-(label_px + 30) / (height - top - bottom), x=0)
    fig.update_layout(barmode="stack", title="Where each emitted token comes from (closed form)", height=height,
                      **{**LAYOUT, "margin": dict(l=60, r=20, t=top, b=bottom), "legend": legend})
    fig.update_yaxes(title_text="probability", col=1)
    # Every token labelled: upright when the labels are short, else read bottom to top, cut at 10
    # characters (the hover and the table give them whole).
    fig.update_xaxes(tickangle=0 if upright else -90, tickfont=dict(size=11), tickmode="array",
                     ticktext=ticks, tickvals=lab.tokens)
    return fig


TICK_LIMIT = 10   # characters of a tick label (the hover and the table give a token whole)
# The rest of the vocabulary, in as few characters: cut at the limit, both tails read "(rest whe…".
SHORT_TAILS = {**dict(zip(TAIL_NAMES, ("(rest p≥q)", "(rest p<q)"))), OTHER: "(the rest)"}


def tick_text(label: str) -> str:
    """A token's tick label: a tail by its short name, a long token cut at `TICK_LIMIT` with "…"."""
    label = SHORT_TAILS.get(label, label)
    return label if len(label) <= TICK_LIMIT else label[:TICK_LIMIT - 1] + "…"


def histogram_figure(lab: LabResult) -> go.Figure:
    """Monte Carlo frequency of each emitted token, one bar trace per rule with 95% (Wilson)
    intervals, against p (black markers)."""
    fig = go.Figure()
    for rule, r in lab.results.items():
        st = STYLE[rule]
        fig.add_bar(x=lab.tokens, y=r.frequencies, name=RULE_NAMES[rule].long,
                    marker=dict(color=st["color"], pattern=dict(shape=st["pattern"], fgcolor="white")),
                    error_y=dict(type="data", symmetric=False, array=np.maximum(r.high - r.frequencies, 0),
                                 arrayminus=np.maximum(r.frequencies - r.low, 0), color="#333333", thickness=1),
                    meta={"rule": rule.value, "role": "observed"},
                    hovertemplate="%{x}: %{y:.4f}<extra>" + RULE_NAMES[rule].short + "</extra>")
    fig.add_scatter(x=lab.tokens, y=lab.p, mode="markers", name="target p",
                    marker=dict(symbol=TARGET["symbol"], size=28, color=TARGET["color"],
                                line=dict(width=3, color=TARGET["color"])),
                    meta={"role": "p"}, hovertemplate="%{x}: p = %{y:.4f}<extra></extra>")
    fig.update_layout(barmode="group", title=f"Emitted tokens over {lab.n:,} trials (95% intervals) against p",
                      yaxis_title="frequency", height=470, **{**LAYOUT, "margin": dict(l=60, r=20, t=60, b=130)})
    return fig


def convergence_figure(lab: LabResult) -> go.Figure:
    """TV(empirical, p) against the number of samples, log-log, one line per rule. An exact
    sampler follows the noise floor (∝ 1/√N); a biased rule levels off at its bias
    TV(output distribution, p), drawn dashed in the rule's colour."""
    fig = go.Figure()
    ns = np.asarray(lab.curve_n, dtype=float)
    fig.add_scatter(x=ns, y=lab.noise_floor, mode="lines", name="noise floor of an exact sampler (∝ 1/√N)",
                    line=dict(color=PALETTE["grey"], width=2, dash="longdash"), meta={"role": "noise"})
    for rule, r in lab.results.items():
        st = STYLE[rule]
        y = np.maximum(np.asarray(r.curve_tv, dtype=float), 1e-12)     # log axis: no zeros
        fig.add_scatter(x=ns, y=y, mode="lines+markers", name=RULE_NAMES[rule].long,
                        line=dict(color=st["color"], width=2), marker=dict(symbol=st["symbol"], size=8),
                        legendgroup=rule.value, meta={"rule": rule.value, "role": "observed"},
                        hovertemplate="N = %{x:,}: TV = %{y:.4g}<extra>" + RULE_NAMES[rule].short + "</extra>")
    for rule, r in lab.results.items():
        if r.bias >= EXACT_TOLERANCE:      # exact (bias 0) has no level to draw on a log axis
            st = STYLE[rule]
            fig.add_scatter(x=[ns[0], ns[-1]], y=[r.bias, r.bias], mode="lines",
                            name=f"{RULE_NAMES[rule].short}: bias {closed_form_text(r.bias)} (closed form)",
                            line=dict(color=st["color"], dash="dash", width=1.5), legendgroup=rule.value,
                            meta={"rule": rule.value, "role": "bias"},
                            hovertemplate="bias = %{y:.4f}<extra>" + RULE_NAMES[rule].short + "</extra>")
    fig.update_layout(title="Convergence: TV(empirical, p) against samples", height=560,
                      **{**LAYOUT, "margin": dict(l=60, r=20, t=60, b=170)})
    fig.update_xaxes(type="log", title_text="samples N")
    fig.update_yaxes(type="log", title_text="TV distance to p")
    return fig


def acceptance_figure(lab: LabResult) -> go.Figure:
    """Acceptance rate per rule: predicted (closed form; β = Σ min(p, q) = 1 − TV(p, q) for the
    ratio test) as an outlined bar, observed as a marker with its 95% interval."""
    rules = list(lab.results)
    names = [RULE_NAMES[r].short for r in rules]
    pred = [lab.results[r].acceptance_predicted for r in rules]
    obs = np.array([lab.results[r].acceptance_observed for r in rules])
    lo = np.array([lab.results[r].acceptance_low for r in rules])
    hi = np.array([lab.results[r].acceptance_high for r in rules])
    fig = go.Figure()
    fig.add_bar(x=names, y=pred, name="predicted (closed form)",
                marker=dict(color=[STYLE[r]["color"] for r in rules], opacity=0.35,
                            line=dict(color=[STYLE[r]["color"] for r in rules], width=2)),
                meta={"role": "predicted"}, hovertemplate="%{x}: predicted %{y:.4f}<extra></extra>")
    fig.add_scatter(x=names, y=obs, mode="markers", name="observed (95% interval)",
                    marker=dict(color=PALETTE["black"], symbol="x-thin-open", size=14, line=dict(width=3)),
                    error_y=dict(type="data", symmetric=False, array=np.maximum(hi - obs, 0),
                                 arrayminus=np.maximum(obs - lo, 0)),
                    meta={"role": "observed"}, hovertemplate="%{x}: observed %{y:.4f}<extra></extra>")
    # The β line's label sits outside the plot, on the right, where no tick or marker is.
    fig.add_hline(y=lab.beta, line=dict(color=PALETTE["grey"], dash="dash"))
    fig.add_annotation(text=f"β = Σ min(p, q)<br>= 1 − TV(p, q)<br>= {lab.beta:.4f}", xref="paper", x=1.01,
                       xanchor="left", y=lab.beta, yref="y", showarrow=False, align="left", font=dict(size=11))
    fig.update_layout(title="Acceptance rate: observed against predicted", yaxis=dict(range=[0, 1.08]),
                      yaxis_title="P[draft accepted]", height=420,
                      **{**LAYOUT, "margin": dict(l=60, r=130, t=60, b=110)})
    return fig
