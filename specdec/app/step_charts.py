"""The step viewer's figures and tables: one round of a trace, one drafted position of it.

p against q at the position (`pq_figure`), its acceptance test (`acceptance_figure`) and how the
round ended (`end_figure`), each with its table. Pure: every number comes from the trace.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..looks import LOOKS, tail_labels, token_label
from ..outcomes import Ending, Status
from ..trace import Generation
from .charts import (
    FADED,
    HIGHLIGHT,
    P_COLOUR,
    Q_COLOUR,
    empty_figure,
    fixed,
    plotly_text,
    show_token,
    sig3,
    unique_labels,
)

ACCEPT_HEADERS = ["quantity", "value"]


def _position(gen: Generation, round_index: int, position: int | None):
    r = gen.rounds[round_index]
    if position is None or not 0 <= position < len(r.positions):
        return r, None
    return r, r.positions[position]


def _scale_buttons(log: bool, axes: tuple[str, ...]) -> list[dict]:
    """Two buttons on the figure itself that switch its probability axes (no server round trip)."""
    def args(kind):
        return [{f"{a}.type": kind for a in axes}]
    return [dict(type="buttons", direction="right", x=1.0, xanchor="right", y=1.18, yanchor="bottom",
                 showactive=True, active=1 if log else 0, pad=dict(r=2, t=2), font=dict(size=11),
                 buttons=[dict(label="linear", method="relayout", args=args("linear")),
                          dict(label="log", method="relayout", args=args("log"))])]


def _needs_log(values: list[float], marked: list[float]) -> bool:
    """Start on a log scale when a marked bar (the drafted or the drawn token) would be under 2 %
    of the tallest bar: on a linear axis it would not be seen."""
    top = max(values, default=0.0)
    shown = [v for v in marked if v > 0]
    return bool(shown) and top > 0 and min(shown) < 0.02 * top


def pq_figure(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> go.Figure:
    """p and q side by side over the stored top tokens (left), and the rest of the vocabulary in
    its own panel (right: the two tail parts, split by the sign of p − q, with their exact mass).
    The drafted token is outlined and labelled with its p and q; the axis starts on a log scale
    when its bars would be too small to see, and two buttons switch the scale."""
    if gen is None or not gen.rounds:
        return empty_figure(go.Figure(), "No run yet")
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return empty_figure(go.Figure(), f"Round {r.index + 1} drafted nothing (the drafter had no proposal): "
                                   "see how the round ended")
    labels = unique_labels(gen, pos.p.ids)
    drafted = pos.p.ids.index(pos.draft_token)
    tails = tail_labels(pos.p)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.82, 0.18], horizontal_spacing=0.06,
                        subplot_titles=("top tokens", "rest of the vocabulary"))
    widths = [3 if k == drafted else 0 for k in range(len(labels))]
    for name, d, colour, shape in (("p (target)", pos.p, P_COLOUR, ""), ("q (draft)", pos.q, Q_COLOUR, "/")):
        fig.add_trace(go.Bar(
            x=labels, y=list(d.probs), name=name, legendgroup=name, offsetgroup=name,
            marker=dict(color=colour, line=dict(color=HIGHLIGHT, width=widths), pattern=dict(shape=shape)),
            hovertemplate="%{x}<br>" + name.split()[0] + " = %{y:.4g}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(
            x=list(tails), y=d.buckets(), name=name, legendgroup=name, offsetgroup=name, showlegend=False,
            marker=dict(color=colour, pattern=dict(shape=shape)),
            hovertemplate="%{x}<br>" + name.split()[0] + " = %{y:.4g}<extra></extra>"), row=1, col=2)
    log = _needs_log(pos.p.probs + pos.q.probs, [pos.p_draft, pos.q_draft])
    axis_type = "log" if log else "linear"
    fig.update_yaxes(type=axis_type, title_text="probability", row=1, col=1)
    fig.update_yaxes(type=axis_type, row=1, col=2)
    fig.update_xaxes(tickangle=-45, row=1, col=1)
    # On a log axis the arrow points down from the top of the panel (bar heights are exponents there).
    fig.add_annotation(x=labels[drafted], xref="x", y=0.95 if log else max(pos.p_draft, pos.q_draft),
                       yref="y domain" if log else "y",
                       text=f"drafted: p = {sig3(pos.p_draft)}, q = {sig3(pos.q_draft)}",
                       showarrow=True, arrowhead=2, ay=-30, bgcolor="rgba(255,255,255,0.8)")
    title = (f"Round {r.index + 1}, draft {position + 1}: drafted <b>{show_token(gen, pos.draft_token)}</b>"
             f" — p(x) = {sig3(pos.p_draft)}, q(x) = {sig3(pos.q_draft)}, β = Σmin(p, q) = {pos.beta:.3f}")
    fig.update_layout(barmode="group", height=400, margin=dict(l=50, r=10, t=95, b=90),
                      title=dict(text=title, font=dict(size=13)), updatemenus=_scale_buttons(log, ("yaxis", "yaxis2")),
                      legend=dict(orientation="h", y=1.1, x=0, yanchor="bottom"))
    return fig


def pq_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    rows = [[token_label(gen, i), i, round(a, 6), round(b, 6), round(min(a, b), 6),
             "◀ drafted" if i == pos.draft_token else ""]
            for i, a, b in zip(pos.p.ids, pos.p.probs, pos.q.probs)]
    rows += [[name, None, round(a, 6), round(b, 6), round(min(a, b), 6), ""]
             for name, a, b in zip(tail_labels(pos.p), pos.p.buckets(), pos.q.buckets())]
    return rows


PQ_HEADERS = ["token", "id", "p (target)", "q (draft)", "min(p, q)", "note"]


def acceptance_figure(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> go.Figure:
    """The acceptance test at one drafted position: min(1, p(x)/q(x)) against the uniform draw u."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return empty_figure(fig, "No run yet", height=220)
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return empty_figure(fig, f"Round {r.index + 1} drafted nothing: no test", height=220)
    threshold = min(1.0, pos.ratio)
    symbol = LOOKS[pos.status].symbol
    verdict = {Status.ACCEPTED: f"ACCEPTED {symbol} (u = {pos.u:.3f} < {threshold:.3f})",
               Status.REJECTED: f"REJECTED {symbol} (u = {pos.u:.3f} ≥ {threshold:.3f})",
               Status.UNUSED: f"NOT TESTED {symbol} (an earlier draft was rejected; u = {pos.u:.3f} was drawn "
                              "but unused)"}[pos.status]
    fig.add_trace(go.Bar(x=[threshold], y=["test"], orientation="h", name="min(1, p(x)/q(x))",
                         marker=dict(color=LOOKS[Status.ACCEPTED].colour, pattern=dict(shape="/")),
                         hovertemplate="min(1, p/q) = %{x:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(x=[1.0 - threshold], y=["test"], orientation="h", name="rejection zone",
                         base=[threshold], marker=dict(color="rgba(213,94,0,0.25)"),
                         hovertemplate="reject if u ≥ %{base:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[pos.u], y=["test"], mode="markers+text", name="u (uniform draw)",
                             text=[f"u = {pos.u:.3f}"], textposition="middle right",
                             marker=dict(symbol="line-ns", size=40, line=dict(width=4, color=HIGHLIGHT)),
                             hovertemplate="u = %{x:.4f}<extra></extra>"))
    notes = [bias_note(gen, pos)]
    if gen.settings.sampling.greedy:
        notes.append("Temperature 0: p and q are one-hot, so min(1, p/q) is 0 or 1 and u, though drawn, "
                     "cannot change the outcome.")
    fig.add_annotation(text="<br>".join(plotly_text(n) for n in notes), xref="paper", yref="paper", x=0, y=-0.5,
                       xanchor="left", yanchor="top", align="left", showarrow=False, font=dict(size=11))
    fig.update_layout(
        barmode="overlay", height=270, margin=dict(l=50, r=10, t=60, b=100),
        title=dict(text=f"Test: p(x)/q(x) = {sig3(pos.p_draft)}/{sig3(pos.q_draft)} = {sig3(pos.ratio)} → {verdict}",
                   font=dict(size=13)),
        xaxis=dict(range=[0, 1.02]), yaxis=dict(visible=False), legend=dict(orientation="h", y=-0.3))
    return fig


def bias_note(gen: Generation, pos) -> str:
    """The bias of this run's rule at one position (closed form, from the trace), in words."""
    if pos.skip_tv is None:
        return "Bias at this position: not stored (a schema-1 trace)."
    if gen.settings.skip_adjustment:
        return (f"Output here vs p: TV = {pos.skip_tv:.4f}, biased, because the adjustment was skipped "
                "(closed form: min(p, q) + (1 − β) p).")
    return (f"Output here vs p: TV = 0 (the exact rule, closed form). Had the adjustment been skipped: "
            f"TV = {pos.skip_tv:.4f}.")


def acceptance_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    return [["drafted token", token_label(gen, pos.draft_token)], ["p(x)", round(pos.p_draft, 6)],
            ["q(x)", round(pos.q_draft, 6)], ["p(x)/q(x)", round(pos.ratio, 6)],
            ["min(1, p/q): chance this draft passes", round(min(1.0, pos.ratio), 6)], ["u", round(pos.u, 6)],
            ["β = Σ min(p, q): chance a draft from q passes here", round(pos.beta, 6)], ["verdict", pos.status.value],
            ["TV(output here, p) under this run's rule", 0.0 if not gen.settings.skip_adjustment else _r(pos.skip_tv)],
            ["TV(output here, p) if the adjustment were skipped", _r(pos.skip_tv)]]


def end_figure(gen: Generation | None, round_index: int = 0) -> go.Figure:
    """How the round's last token was drawn, over the stored ids and the tail (its two parts when
    a draft was rejected).

    residual: p − q with the negative part clamped (faded), the normalised residual (= end_dist);
    biased p (adjustment skipped): p used as-is, with a warning that this is biased;
    bonus / plain step / greedy: the distribution used. The drawn token is outlined and labelled
    (the decoder always keeps it among the stored ids).
    """
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return empty_figure(fig, "No run yet", height=360)
    r = gen.rounds[round_index]
    d = r.end_dist
    tails = list(tail_labels(d))
    labels = unique_labels(gen, d.ids) + tails
    drawn = d.ids.index(r.end_token)
    widths = [3 if k == drawn else 0 for k in range(len(labels))]
    token = show_token(gen, r.end_token)
    look = LOOKS[r.ending]
    values = list(d.probs) + d.buckets()
    if r.ending is Ending.RESIDUAL:
        diff = [a - b for a, b in zip(r.end_p.probs + r.end_p.buckets(), r.end_q.probs + r.end_q.buckets())]
        fig.add_trace(go.Bar(x=labels, y=[max(0.0, v) for v in diff], name="max(0, p − q)",
                             marker=dict(color=LOOKS[Status.REJECTED].colour),
                             hovertemplate="%{x}<br>max(0, p − q) = %{y:.4f}<extra></extra>"))
        fig.add_trace(go.Bar(x=labels, y=[min(0.0, v) for v in diff], name="p − q < 0 (clamped to 0)",
                             marker=dict(color=FADED), hovertemplate="%{x}<br>p − q = %{y:.4f} → 0<extra></extra>"))
        fig.add_trace(go.Bar(x=labels, y=values, name="normalised residual (sampled)",
                             marker=dict(color=look.colour, line=dict(color=HIGHLIGHT, width=widths),
                                         pattern=dict(shape="x")),
                             hovertemplate="%{x}<br>residual = %{y:.4f}<extra></extra>"))
        title = (f"Round {r.index + 1}: draft {r.n_accepted + 1} rejected → resampled <b>{token}</b> from "
                 f"norm(max(0, p − q)); mass of max(0, p − q) = {fixed(r.residual_mass, 3)}")
    elif r.ending is Ending.BIASED_P:
        fig.add_trace(go.Bar(x=labels, y=values, name="p (used instead of the residual: biased)",
                             marker=dict(color=look.colour, line=dict(color=HIGHLIGHT, width=widths),
                                         pattern=dict(shape="\\")),
                             hovertemplate="%{x}<br>p = %{y:.4f}<extra></extra>"))
        fig.add_trace(go.Bar(x=labels, y=list(r.end_q.probs) + r.end_q.buckets(), name="q (ignored)",
                             marker=dict(color=FADED), hovertemplate="%{x}<br>q = %{y:.4f}<extra></extra>"))
        title = (f"{look.symbol} BIASED: round {r.index + 1}: draft {r.n_accepted + 1} rejected → sampled "
                 f"<b>{token}</b> from p, not from the residual (adjustment skipped)")
        fig.add_annotation(text=f"{look.symbol} Adjustment skipped: tokens q over-proposes are now too likely. "
                                "The output no longer follows p.", xref="paper", yref="paper", x=0, y=1.02,
                           xanchor="left", yanchor="bottom", showarrow=False, bgcolor=look.colour,
                           font=dict(color="white", size=12))
    else:
        name = {Ending.BONUS: "p at position γ+1 (bonus)", Ending.PLAIN: "p (plain target step)",
                Ending.GREEDY: "argmax of p (greedy match)"}[r.ending]
        fig.add_trace(go.Bar(x=labels, y=values, name=name,
                             marker=dict(color=look.colour, line=dict(color=HIGHLIGHT, width=widths),
                                         pattern=dict(shape=".")),
                             hovertemplate="%{x}<br>p = %{y:.4f}<extra></extra>"))
        title = {Ending.BONUS: f"Round {r.index + 1}: all {len(r.positions)} drafts accepted → bonus token "
                               f"<b>{token}</b> drawn from p at position {len(r.positions) + 1}",
                 Ending.PLAIN: f"Round {r.index + 1}: nothing was drafted → one plain target step drew "
                               f"<b>{token}</b> from p",
                 Ending.GREEDY: f"Round {r.index + 1}: draft {r.n_accepted + 1} did not match → "
                                f"<b>{token}</b>, the argmax of p"}[r.ending]
    log = _needs_log(values, [d.probs[drawn]])
    fig.add_annotation(x=labels[drawn], y=d.probs[drawn] if not log else 0.95, yref="y" if not log else "y domain",
                       text=f"drawn: {sig3(d.probs[drawn])}", showarrow=True, arrowhead=2, ay=-30,
                       bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(barmode="group", height=440, margin=dict(l=50, r=10, t=95, b=40),
                      title=dict(text=title, font=dict(size=13)),
                      yaxis=dict(title="probability", type="log" if log else "linear"),
                      updatemenus=_scale_buttons(log, ("yaxis",)),
                      xaxis=dict(tickangle=-45), legend=dict(orientation="h", y=-0.45, x=0))
    return fig


def end_rows(gen: Generation | None, round_index: int = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r = gen.rounds[round_index]
    rows = []
    for k, i in enumerate(r.end_dist.ids):
        p = r.end_p.prob(i)
        q = r.end_q.prob(i) if r.end_q is not None else None
        rows.append([token_label(gen, i), i, _r(p), _r(q), _r(None if q is None or p is None else p - q),
                     round(r.end_dist.probs[k], 6), "◀ drawn" if i == r.end_token else ""])
    q_tail = r.end_q.buckets() if r.end_q is not None else [None] * len(r.end_dist.buckets())
    for name, d, p, q in zip(tail_labels(r.end_dist), r.end_dist.buckets(), r.end_p.buckets(), q_tail):
        rows.append([name, None, _r(p), _r(q), _r(None if q is None else p - q), round(d, 6), ""])
    return rows


END_HEADERS = ["token", "id", "p", "q", "p − q", "sampled from", "note"]


def _r(x):
    return None if x is None else round(x, 6)

