"""Pure figure and text builders: a `Generation` trace in, a Plotly figure / HTML / table out.

Nothing here holds state, runs a model or recomputes model outputs: every number shown is read
from the trace (see `specdec.trace`). Colours follow the Okabe-Ito palette (colour-blind safe)
and every outcome also has a second cue (a symbol, a line style or a marker shape), so colour is
never the only signal. All token text is HTML-escaped before it reaches HTML or Plotly labels.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..looks import LOOKS, PALETTE, tail_labels, token_label, visible_token
from ..outcomes import Ending, Status, events
from ..speed import expected_tokens_per_round, explain, time_split
from ..trace import Generation

HIGHLIGHT = PALETTE["black"]
FADED = "rgba(153,153,153,0.35)"
P_COLOUR, Q_COLOUR = PALETTE["blue"], PALETTE["orange"]


def plotly_text(text: str) -> str:
    """Text for a Plotly label. Plotly reads <tags> and only a few entities (&amp; &lt; &gt;, not
    &quot;), so escape exactly those three: quotes stay quotes."""
    return html.escape(text, quote=False)


def show_token(gen: Generation, token_id: int) -> str:
    """A token as a Plotly label: whitespace and EOS made visible, markup escaped."""
    return plotly_text(token_label(gen, token_id))


def _labels(gen: Generation, ids: list[int]) -> list[str]:
    """Unique escaped labels for ids (two ids can decode to the same text)."""
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        label = show_token(gen, i)
        if label in seen:
            label = f"{label} #{i}"
        seen[label] = i
        out.append(label)
    return out


def _g(x: float) -> str:
    """Three significant digits: small probabilities stay readable."""
    return f"{x:.3g}"


def _fmt(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


# ---------------------------------------------------------------- generated text (HTML)

def _span(outcome, text: str, title: str, round_index: int | None) -> str:
    look = LOOKS[outcome]
    where = f' data-round="{round_index}"' if round_index is not None else ""
    return (f'<span class="tok tok-{outcome.value}" data-kind="{outcome.value}"{where} '
            f'title="{html.escape(title, quote=True)}" style="{look.css}">{html.escape(text)}'
            f'<sup aria-hidden="true" style="font-size:.65em;color:#333">{look.symbol}</sup></span>')


LEGEND = (Status.ACCEPTED, Status.REJECTED, Ending.RESIDUAL, Ending.BIASED_P, Ending.BONUS, Ending.PLAIN)


def legend_html(outcomes=LEGEND) -> str:
    items = [f'<span style="margin-right:1.2em;white-space:nowrap">{_span(o, "tok", LOOKS[o].label, None)} '
             f'{html.escape(LOOKS[o].label)}</span>' for o in outcomes]
    return '<div class="legend" style="font-size:.85em;margin-bottom:.5em">' + "".join(items) + "</div>"


def event_title(gen: Generation, ev) -> str:
    """What a token's tooltip (and the timeline's hover) says about it, read from the trace."""
    r = gen.rounds[ev.round]
    if ev.position is None:
        prob = r.end_dist.prob(ev.token)
        return f"round {ev.round + 1}, last token: {LOOKS[ev.outcome].label} (probability {_fmt(prob, 4)})"
    pos = r.positions[ev.position]
    test = {Status.ACCEPTED: "<", Status.REJECTED: "≥", Status.UNUSED: "(not tested)"}[pos.status]
    return (f"round {ev.round + 1}, draft {ev.position + 1}: {pos.status.value} "
            f"(p={pos.p_draft:.4f}, q={pos.q_draft:.4f}, u={pos.u:.4f} {test} min(1, p/q)={min(1.0, pos.ratio):.4f})")


def text_html(gen: Generation | None, selected_round: int | None = None) -> str:
    """The prompt, then every generated token marked by its fate; rejected drafts struck through
    where they were proposed. Every piece of text is escaped."""
    if gen is None:
        return '<div class="specdec-text" style="color:#666">Run a generation, or import a trace, to see it here.</div>'
    parts = [f'<span class="prompt" style="color:#555">{html.escape(gen.prompt)}</span>']
    if not gen.settings.speculative:   # an autoregressive trace has no rounds
        parts.append(html.escape(gen.text))
    chunks: dict[int, list[str]] = {}
    for ev in events(gen):
        if ev.in_text:
            span = _span(ev.outcome, gen.token(ev.token), event_title(gen, ev), ev.round)
            chunks.setdefault(ev.round, []).append(span)
    for r, chunk in chunks.items():
        outline = "outline:2px solid #000;outline-offset:1px;" if r == selected_round else ""
        parts.append(f'<span class="round" data-round="{r}" style="{outline}">{"".join(chunk)}</span>')
    body = "".join(parts)
    return (legend_html() + '<div class="specdec-text" style="white-space:pre-wrap;line-height:1.9;'
            f'font-family:ui-monospace,monospace;font-size:0.95em">{body}</div>')


def md_text(text: str) -> str:
    """User text (a title, a note) inside Markdown: HTML-escaped, Markdown's own marks defused."""
    out = html.escape(text)
    for mark in "\\`*_[]#|<>!~":
        out = out.replace(mark, "\\" + mark)
    return out


def run_summary(gen: Generation) -> str:
    """One line of a run's numbers, for the side-by-side view."""
    s = gen.stats
    if not gen.settings.speculative:
        return (f"the target alone: {s.new_tokens} tokens, {s.target_forwards} target forwards, "
                f"{s.wall_seconds:.2f} s")
    rule = "adjustment skipped (biased)" if gen.settings.skip_adjustment else "exact rule"
    bias = s.skip_tv_mean if gen.settings.skip_adjustment else 0.0
    return (f"{rule}: α = {s.acceptance_rate:.3f}, mean β = {s.expected_acceptance:.3f}, "
            f"{s.tokens_per_target_forward:.2f} tokens per target forward, mean TV to p = {bias:.4f}, "
            f"{s.new_tokens} tokens in {s.wall_seconds:.2f} s")


def side_by_side_html(gen: Generation | None, other: Generation | None, label: str) -> str:
    """This run above the same prompt, seed and settings re-run with `label` (the other rule, or
    the target alone), each with its token fates and its numbers."""
    if gen is None or other is None:
        return ('<div class="side-by-side" style="color:#666">Re-run this prompt and seed with the other rule or '
                "with the target alone to compare the two texts here.</div>")
    same = 0
    for a, b in zip(gen.token_ids, other.token_ids):
        if a != b:
            break
        same += 1
    blocks = []
    for head, g in (("This run", gen), (f"The same prompt, seed and settings with {label}", other)):
        blocks.append(f'<div class="side-run" style="margin-bottom:1em"><div style="font-weight:600">'
                      f"{html.escape(head)}: {html.escape(run_summary(g))}</div>{text_html(g)}</div>")
    agree = (f"The two texts agree on their first {same} generated tokens"
             + ("." if same < min(len(gen.token_ids), len(other.token_ids)) else " (all of them)."))
    why = ("Same seed and the same draws up to the first rejection; from there the two rules draw the round's "
           "last token from different distributions." if other.settings.speculative else
           "The target alone spends the seed's random draws one per token, the speculative run spends them on "
           "drafts and tests too, so the texts part early: both follow p, not the same sequence.")
    return (f'<div class="side-by-side"><p>{html.escape(agree)} {html.escape(why)}</p>{"".join(blocks)}</div>')


# ---------------------------------------------------------------- the timeline

def timeline_figure(gen: Generation | None, selected: int | None = None) -> go.Figure:
    """One column per round, one cell per drafted position (rows 1..γ), the round's last token in
    the top row. One trace per outcome; customdata = [round, position (or -1 for the end token)]."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return _empty(fig, "No run yet", height=260)
    top = max([len(r.positions) for r in gen.rounds] + [gen.settings.gamma]) + 1
    cells: dict = {o: {"x": [], "y": [], "text": [], "custom": []} for o in LOOKS}
    for ev in events(gen):
        c = cells[ev.outcome]
        c["x"].append(ev.round + 1)
        c["y"].append(top if ev.position is None else ev.position + 1)
        c["custom"].append([ev.round, -1 if ev.position is None else ev.position])
        c["text"].append(f"<b>{show_token(gen, ev.token)}</b><br>" + plotly_text(event_title(gen, ev)))
    for outcome, c in cells.items():
        if not c["x"]:
            continue
        look = LOOKS[outcome]
        fig.add_trace(go.Scatter(
            x=c["x"], y=c["y"], mode="markers", name=look.label, customdata=c["custom"],
            hovertext=c["text"], hoverinfo="text", meta=outcome.value,
            marker=dict(symbol=look.marker, size=15, color=look.colour, line=dict(width=1.5, color=look.colour))))
    n = len(gen.rounds)
    if selected is not None and 0 <= selected < n:
        fig.add_shape(type="rect", x0=selected + 0.5, x1=selected + 1.5, y0=0.4, y1=top + 0.6,
                      line=dict(color=HIGHLIGHT, width=2), fillcolor="rgba(0,0,0,0.06)")
    fig.update_layout(
        height=300, margin=dict(l=50, r=10, t=40, b=40), clickmode="event",
        title=dict(text=f"Timeline: {n} rounds, {gen.stats.new_tokens} tokens", font=dict(size=14)),
        legend=dict(orientation="h", y=-0.25, x=0, font=dict(size=11)),
        xaxis=dict(title="round", range=[0.4, max(n, 1) + 0.6], dtick=1 if n <= 40 else None),
        yaxis=dict(title="", tickmode="array", tickvals=list(range(1, top + 1)),
                   ticktext=[f"draft {i}" for i in range(1, top)] + ["end"], range=[0.4, top + 0.6]))
    return fig


TIMELINE_HEADERS = ["round", "drafted", "accepted", "drafts", "ended by", "end token",
                    "emitted text", "draft s", "verify s"]


def timeline_rows(gen: Generation | None) -> list[list]:
    """The timeline as a table: one row per round, each draft shown with its outcome's symbol."""
    if gen is None:
        return []
    drafts: dict[int, list[str]] = {}
    for ev in events(gen):
        if ev.position is not None:
            drafts.setdefault(ev.round, []).append(LOOKS[ev.outcome].symbol + token_label(gen, ev.token))
    return [[r.index + 1, len(r.positions), r.n_accepted, " ".join(drafts.get(r.index, [])),
             f"{LOOKS[r.ending].symbol} {LOOKS[r.ending].label}", token_label(gen, r.end_token),
             visible_token("".join(gen.token(t) for t in r.emitted)), round(r.draft_seconds, 4),
             round(r.verify_seconds, 4)]
            for r in gen.rounds]


# ---------------------------------------------------------------- the step viewer

def _empty(fig: go.Figure, message: str, height: int = 320) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=20, r=20, t=40, b=20),
                      xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=html.escape(message), showarrow=False, x=0.5, y=0.5,
                                        xref="paper", yref="paper", font=dict(size=14))])
    return fig


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
        return _empty(go.Figure(), "No run yet")
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return _empty(go.Figure(), f"Round {r.index + 1} drafted nothing (the drafter had no proposal): "
                                   "see how the round ended")
    labels = _labels(gen, pos.p.ids)
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
                       yref="y domain" if log else "y", text=f"drafted: p = {_g(pos.p_draft)}, q = {_g(pos.q_draft)}",
                       showarrow=True, arrowhead=2, ay=-30, bgcolor="rgba(255,255,255,0.8)")
    title = (f"Round {r.index + 1}, draft {position + 1}: drafted <b>{show_token(gen, pos.draft_token)}</b>"
             f" — p(x) = {_g(pos.p_draft)}, q(x) = {_g(pos.q_draft)}, β = Σmin(p, q) = {pos.beta:.3f}")
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
        return _empty(fig, "No run yet", height=220)
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return _empty(fig, f"Round {r.index + 1} drafted nothing: no test", height=220)
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
        title=dict(text=f"Test: p(x)/q(x) = {_g(pos.p_draft)}/{_g(pos.q_draft)} = {_g(pos.ratio)} → {verdict}",
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
        return _empty(fig, "No run yet", height=360)
    r = gen.rounds[round_index]
    d = r.end_dist
    tails = list(tail_labels(d))
    labels = _labels(gen, d.ids) + tails
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
                 f"norm(max(0, p − q)); mass of max(0, p − q) = {_fmt(r.residual_mass, 3)}")
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
                       text=f"drawn: {_g(d.probs[drawn])}", showarrow=True, arrowhead=2, ay=-30,
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


# ---------------------------------------------------------------- run metrics

def alpha_noise(gen: Generation) -> float:
    """Standard deviation of alpha around mean beta on this run: each tested draft passes with its
    own probability beta_i, so alpha - mean(beta) has sd sqrt(sum beta_i (1 - beta_i)) / n."""
    betas = [pos.beta for r in gen.rounds for pos in r.positions if pos.status is not Status.UNUSED]
    return (sum(b * (1 - b) for b in betas) ** 0.5) / len(betas) if betas else 0.0


def metrics_markdown(gen: Generation | None, ar: Generation | None = None, running: bool = False,
                     timed: Generation | None = None) -> str:
    """The run's numbers, each named once with a line that says what it answers."""
    if gen is None:
        return "_No run yet._"
    s = gen.stats
    gamma = gen.settings.gamma
    predicted = expected_tokens_per_round(s.acceptance_rate, gamma)
    noise = alpha_noise(gen)
    gap = s.acceptance_rate - s.expected_acceptance
    within = "within" if abs(gap) <= 2 * noise else "outside"
    bias = ("0: the exact rule's output follows p (closed form); had the adjustment been skipped, "
            f"mean TV {s.skip_tv_mean:.4f}" if not gen.settings.skip_adjustment
            else f"**{s.skip_tv_mean:.4f}**, biased: the adjustment was skipped")
    lines = [
        "| number | this run | what it answers |", "|---|---|---|",
        f"| **acceptance rate α** | **{s.acceptance_rate:.3f}** ({s.accepted} of {s.tested} tested drafts) | "
        "How often did a tested draft pass u < p(x)/q(x)? |",
        f"| **expected acceptance, mean β** | **{s.expected_acceptance:.3f}** | How often should it pass? "
        f"β = Σ min(p, q) is each position's chance, averaged over the tested ones. α − mean β = {gap:+.3f}, "
        f"{within} the noise of {s.tested} tests (±2σ = {2 * noise:.3f}). |",
        f"| draft yield | {s.accepted_per_drafted:.3f} ({s.accepted} of {s.drafted} drafted) | How many drafts "
        "ended in the text? Drafts after a rejection are never tested (some call this ratio the acceptance rate). |",
        f"| tokens per target forward | **{s.tokens_per_target_forward:.2f}** | How many tokens did one target forward "
        f"give? (1 − α^(γ+1)) / (1 − α) = {predicted:.2f} if every position had α (γ = {gamma}). |",
        f"| forward passes | target **{s.target_forwards}**, draft **{s.draft_forwards}** | Autoregressive decoding "
        f"would need {s.new_tokens} target forwards. |",
        f"| bias (mean TV to p per tested position) | {bias} | Does the output follow p? |",
        f"| tokens / rounds | {s.new_tokens} / {s.rounds} | |",
        f"| wall time | {s.wall_seconds:.2f} s (drafting {s.draft_seconds:.2f} s, target and verify "
        f"{s.verify_seconds:.2f} s) | |",
    ]
    if ar is not None:
        t = (timed or gen).stats
        story = explain(t, ar.stats)
        lines += [
            f"| timed again, unstreamed (same seed, same tokens) | {t.new_tokens} tokens in {t.wall_seconds:.2f} s | "
            "the streamed run above shares the CPU with drawing the page, so both sides of the speedup are "
            "timed again, back to back, the same way |",
            f"| autoregressive run (same settings) | {ar.stats.new_tokens} tokens in {ar.stats.wall_seconds:.2f} s, "
            f"{ar.stats.target_forwards} target forwards | |",
            f"| speedup over the target alone (tokens per second, one run each) | measured speedup "
            f"**{story.measured:.2f}×** | predicted from this run's costs and α: **{story.predicted:.2f}×** |",
        ]
        lines.append("")
        lines.append(story.sentence)
    head = "**Running…** " if running else ""
    if gen.settings.skip_adjustment:
        head += "⚠ **Residual adjustment skipped: this run is biased** (its output does not follow p). "
    return head + "\n" + "\n".join(lines)


# ---------------------------------------------------------------- where the time went

TIME_PARTS = (("drafting", "draft forwards (and drafting)", PALETTE["orange"], "/"),
              ("target", "target forwards (verify)", PALETTE["blue"], ""),
              ("other", "everything else (sampling, bookkeeping, trace)", PALETTE["grey"], "."))


def time_figure(gen: Generation | None, ar: Generation | None) -> go.Figure:
    """Where the time went: one stacked bar per run (speculative, autoregressive), milliseconds per
    generated token, split into drafting, target forwards and everything else."""
    fig = go.Figure()
    if gen is None or ar is None:
        return _empty(fig, "Tick “compare with autoregressive” and Run to see where the time went", height=220)
    runs = [("speculative", gen.stats), ("autoregressive", ar.stats)]
    splits = [(name, time_split(st), max(st.new_tokens, 1)) for name, st in runs]
    for key, label, colour, shape in TIME_PARTS:
        values = [1000 * getattr(split, key) / n for _, split, n in splits]
        fig.add_trace(go.Bar(y=[name for name, _, _ in splits], x=values, name=label, orientation="h",
                             marker=dict(color=colour, pattern=dict(shape=shape)), meta=key,
                             text=[f"{v:.2f}" for v in values], textposition="inside",
                             hovertemplate="%{y}: " + label + " %{x:.3f} ms per token<extra></extra>"))
    story = explain(gen.stats, ar.stats)
    fig.update_layout(
        barmode="stack", height=240, margin=dict(l=110, r=20, t=50, b=70),
        title=dict(text=f"Where the time went (ms per token): measured speedup {story.measured:.2f}×, "
                        f"predicted {story.predicted:.2f}×", font=dict(size=13)),
        xaxis=dict(title="milliseconds per generated token"), yaxis=dict(autorange="reversed"),
        legend=dict(orientation="h", y=-0.45, x=0))
    return fig
