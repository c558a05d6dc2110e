"""Pure figure and text builders: a `Generation` trace in, a Plotly figure / HTML / table out.

Nothing here holds state, runs a model or recomputes model outputs: every number shown is read
from the trace (see `specdec.trace`). Colours follow the Okabe-Ito palette (colour-blind safe)
and every outcome also has a second cue (a symbol, a line style or a marker shape), so colour is
never the only signal. All token text is HTML-escaped before it reaches HTML or Plotly labels.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from .trace import ACCEPTED, REJECTED, UNUSED, Generation, expected_tokens_per_round, visible_token

# ---------------------------------------------------------------- outcomes: colour + second cue

OKABE_ITO = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999"}

# kind -> (label, colour, symbol in text, plotly marker symbol)
OUTCOMES = {
    "accepted": ("accepted draft", OKABE_ITO["green"], "✓", "square"),
    "rejected": ("rejected draft", OKABE_ITO["vermillion"], "✗", "x"),
    "unused": ("unused draft (after a rejection)", OKABE_ITO["grey"], "·", "square-open"),
    "residual": ("resampled from the residual", OKABE_ITO["blue"], "↺", "circle"),
    "target": ("sampled from p (adjustment skipped: biased)", OKABE_ITO["purple"], "⚠", "triangle-up"),
    "greedy": ("argmax of p (greedy match)", OKABE_ITO["yellow"], "=", "diamond"),
    "bonus": ("bonus token (all drafts accepted)", OKABE_ITO["orange"], "★", "star"),
}
END_KINDS = ("residual", "target", "greedy", "bonus")
HIGHLIGHT = "#000000"
FADED = "rgba(153,153,153,0.35)"
P_COLOUR, Q_COLOUR = OKABE_ITO["blue"], OKABE_ITO["orange"]
OTHER_LABEL = "everything else"


def show_token(text: str) -> str:
    """A token as a readable, escaped label: spaces and newlines made visible."""
    return html.escape(visible_token(text), quote=True)


def _labels(gen: Generation, ids: list[int]) -> list[str]:
    """Unique escaped labels for ids (two ids can decode to the same text)."""
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        label = show_token(gen.token(i))
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

_STYLE = {
    "accepted": "background:#009E7326;border-bottom:2px solid #009E73;",
    "rejected": "color:#D55E00;text-decoration:line-through;text-decoration-thickness:2px;opacity:.85;",
    "residual": "background:#0072B226;border:1px dashed #0072B2;border-radius:3px;",
    "target": "background:#CC79A740;border-bottom:3px double #CC79A7;",
    "greedy": "background:#F0E44260;border-bottom:2px dotted #000;",
    "bonus": "background:#E69F0033;border-bottom:2px dotted #E69F00;",
}


def _span(kind: str, text: str, title: str, round_index: int) -> str:
    label, _, symbol, _ = OUTCOMES[kind]
    return (f'<span class="tok tok-{kind}" data-kind="{kind}" data-round="{round_index}" '
            f'title="{html.escape(title, quote=True)}" style="{_STYLE[kind]}">{html.escape(text)}'
            f'<sup aria-hidden="true" style="font-size:.65em;color:#333">{symbol}</sup></span>')


def legend_html(kinds=("accepted", "rejected", "residual", "target", "bonus")) -> str:
    items = []
    for kind in kinds:
        label, _, symbol, _ = OUTCOMES[kind]
        sample = _span(kind, "tok", label, -1).replace('data-round="-1" ', "")
        items.append(f'<span style="margin-right:1.2em;white-space:nowrap">{sample} {html.escape(label)}</span>')
    return '<div class="legend" style="font-size:.85em;margin-bottom:.5em">' + "".join(items) + "</div>"


def text_html(gen: Generation | None, selected_round: int | None = None) -> str:
    """The prompt, then every generated token marked by its fate; rejected drafts struck through
    where they were proposed. Every piece of text is escaped."""
    if gen is None:
        return '<div class="specdec-text" style="color:#666">Run a generation, or import a trace, to see it here.</div>'
    parts = [f'<span class="prompt" style="color:#555">{html.escape(gen.prompt)}</span>']
    speculative = gen.settings.get("mode", "speculative") == "speculative"
    if not speculative:   # an autoregressive trace has no rounds
        parts.append(html.escape(gen.text))
    for r in gen.rounds:
        chunk = []
        for k, tok in enumerate(r.emitted):
            text = gen.token(tok)
            if k < r.n_accepted:
                pos = r.positions[k]
                chunk.append(_span("accepted", text, f"round {r.index + 1}, draft {k + 1}: accepted "
                                   f"(p={pos.p_draft:.3f}, q={pos.q_draft:.3f}, u={pos.u:.3f})", r.index))
            else:
                if r.n_accepted < len(r.positions):
                    pos = r.positions[r.n_accepted]
                    chunk.append(_span("rejected", gen.token(pos.draft_token),
                                       f"round {r.index + 1}, draft {r.n_accepted + 1}: rejected "
                                       f"(p={pos.p_draft:.3f}, q={pos.q_draft:.3f}, u={pos.u:.3f} ≥ p/q)", r.index))
                kind = r.end_rule if r.end_rule in OUTCOMES else "residual"
                chunk.append(_span(kind, text, f"round {r.index + 1}: {OUTCOMES[kind][0]} "
                                   f"(probability {_fmt(r.end_dist.prob(tok), 3)})", r.index))
        outline = "outline:2px solid #000;outline-offset:1px;" if r.index == selected_round else ""
        parts.append(f'<span class="round" data-round="{r.index}" style="{outline}">{"".join(chunk)}</span>')
    body = "".join(parts)
    return (legend_html() + '<div class="specdec-text" style="white-space:pre-wrap;line-height:1.9;'
            f'font-family:ui-monospace,monospace;font-size:0.95em">{body}</div>')


# ---------------------------------------------------------------- the timeline

def _end_slot(gen: Generation) -> int:
    return max([len(r.positions) for r in gen.rounds] + [int(gen.settings.get("gamma", 1) or 1)]) + 1


def timeline_figure(gen: Generation | None, selected: int | None = None) -> go.Figure:
    """One column per round, one cell per drafted position (rows 1..γ), the round's last token in
    the top row. One trace per outcome; customdata = [round, position (or -1 for the end token)]."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return _empty(fig, "No run yet", height=260)
    top = _end_slot(gen)
    cells: dict[str, dict[str, list]] = {k: {"x": [], "y": [], "text": [], "custom": []} for k in OUTCOMES}
    for r in gen.rounds:
        for i, pos in enumerate(r.positions):
            c = cells[pos.status]
            c["x"].append(r.index + 1)
            c["y"].append(i + 1)
            c["custom"].append([r.index, i])
            c["text"].append(
                f"round {r.index + 1}, draft {i + 1}: <b>{show_token(gen.token(pos.draft_token))}</b><br>"
                f"{pos.status}<br>p(x) = {pos.p_draft:.4f}<br>q(x) = {pos.q_draft:.4f}<br>"
                f"min(1, p/q) = {min(1.0, pos.ratio):.4f}<br>u = {pos.u:.4f}")
        kind = r.end_rule if r.end_rule in OUTCOMES else "residual"
        c = cells[kind]
        c["x"].append(r.index + 1)
        c["y"].append(top)
        c["custom"].append([r.index, -1])
        c["text"].append(
            f"round {r.index + 1}, end token: <b>{show_token(gen.token(r.end_token))}</b><br>"
            f"{OUTCOMES[kind][0]}<br>probability {_fmt(r.end_dist.prob(r.end_token))}")
    for kind, c in cells.items():
        if not c["x"]:
            continue
        label, colour, _, symbol = OUTCOMES[kind]
        fig.add_trace(go.Scatter(
            x=c["x"], y=c["y"], mode="markers", name=label, customdata=c["custom"],
            hovertext=c["text"], hoverinfo="text", meta=kind,
            marker=dict(symbol=symbol, size=15, color=colour, line=dict(width=1.5, color=colour))))
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


TIMELINE_HEADERS = ["round", "drafted", "accepted", "tested statuses", "ended by", "end token",
                    "emitted text", "draft s", "verify s"]


def timeline_rows(gen: Generation | None) -> list[list]:
    """The timeline as a table: one row per round."""
    if gen is None:
        return []
    marks = {ACCEPTED: "✓", REJECTED: "✗", UNUSED: "·"}
    return [[r.index + 1, len(r.positions), r.n_accepted, " ".join(marks[p.status] for p in r.positions),
             OUTCOMES.get(r.end_rule, (r.end_rule,))[0], gen.token(r.end_token),
             "".join(gen.token(t) for t in r.emitted), round(r.draft_seconds, 4), round(r.verify_seconds, 4)]
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


def pq_view(pos) -> tuple[list[int], list[float], list[float], float, float]:
    """(ids, p, q, p_rest, q_rest) of a drafted position, always including the drafted token.

    The trace keeps the union of p's and q's top tokens; a draft sampled from q's tail may lie
    outside it. Its exact p(x), q(x) are in the trace, so it gets its own bar and is taken out of
    'everything else' (rest - p(x)), which keeps every bar equal to the trace's numbers."""
    ids, p, q = list(pos.p.ids), list(pos.p.probs), list(pos.q.probs)
    p_rest, q_rest = pos.p.rest, pos.q.rest
    if pos.draft_token not in ids:
        ids.append(pos.draft_token)
        p.append(pos.p_draft)
        q.append(pos.q_draft)
        p_rest, q_rest = max(0.0, p_rest - pos.p_draft), max(0.0, q_rest - pos.q_draft)
    return ids, p, q, p_rest, q_rest


def pq_figure(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> go.Figure:
    """p and q side by side over the union of their top tokens, plus an 'everything else' bar
    of exact height Dist.rest; the drafted token is outlined and named in the title."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return _empty(fig, "No run yet")
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return _empty(fig, f"Round {r.index + 1} drafted nothing (the drafter had no proposal): "
                           "see how the round ended")
    ids, p, q, p_rest, q_rest = pq_view(pos)
    labels = _labels(gen, ids) + [OTHER_LABEL]
    drafted = ids.index(pos.draft_token)
    widths = [3 if k == drafted else 0 for k in range(len(labels))]
    for name, values, colour, shape in (("p (target)", p + [p_rest], P_COLOUR, ""),
                                        ("q (draft)", q + [q_rest], Q_COLOUR, "/")):
        fig.add_trace(go.Bar(
            x=labels, y=values, name=name,
            marker=dict(color=colour, line=dict(color=HIGHLIGHT, width=widths), pattern=dict(shape=[shape] * len(labels))),
            hovertemplate="%{x}<br>" + name.split()[0] + " = %{y:.4g}<extra></extra>"))
    title = (f"Round {r.index + 1}, draft {position + 1}: drafted <b>{show_token(gen.token(pos.draft_token))}</b>"
             f" — p(x) = {_g(pos.p_draft)}, q(x) = {_g(pos.q_draft)}, β = Σmin(p, q) = {pos.beta:.3f}")
    fig.update_layout(barmode="group", height=360, margin=dict(l=50, r=10, t=50, b=90),
                      title=dict(text=title, font=dict(size=13)), yaxis=dict(title="probability", range=[0, 1.02]),
                      xaxis=dict(tickangle=-45), legend=dict(orientation="h", y=1.0, x=1, xanchor="right",
                                                             yanchor="bottom"))
    fig.add_annotation(x=labels[drafted], y=max(pos.p_draft, pos.q_draft), text="drafted",
                       showarrow=True, arrowhead=2, ay=-30)
    return fig


def pq_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    ids, p, q, p_rest, q_rest = pq_view(pos)
    rows = [[gen.token(i), i, round(a, 6), round(b, 6), round(min(a, b), 6), "◀ drafted" if i == pos.draft_token else ""]
            for i, a, b in zip(ids, p, q)]
    rows.append([OTHER_LABEL, None, round(p_rest, 6), round(q_rest, 6), None, ""])
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
    verdict = {ACCEPTED: f"ACCEPTED ✓ (u = {pos.u:.3f} < {threshold:.3f})",
               REJECTED: f"REJECTED ✗ (u = {pos.u:.3f} ≥ {threshold:.3f})",
               UNUSED: f"NOT TESTED · (an earlier draft was rejected; u = {pos.u:.3f} was drawn but unused)"}[pos.status]
    fig.add_trace(go.Bar(x=[threshold], y=["test"], orientation="h", name="min(1, p(x)/q(x))",
                         marker=dict(color=OKABE_ITO["green"], pattern=dict(shape="/")),
                         hovertemplate="min(1, p/q) = %{x:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(x=[1.0 - threshold], y=["test"], orientation="h", name="rejection zone",
                         base=[threshold], marker=dict(color="rgba(213,94,0,0.25)"),
                         hovertemplate="reject if u ≥ %{base:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[pos.u], y=["test"], mode="markers+text", name="u (uniform draw)",
                             text=[f"u = {pos.u:.3f}"], textposition="middle right",
                             marker=dict(symbol="line-ns", size=40, line=dict(width=4, color=HIGHLIGHT)),
                             hovertemplate="u = %{x:.4f}<extra></extra>"))
    fig.update_layout(
        barmode="overlay", height=220, margin=dict(l=50, r=10, t=60, b=40),
        title=dict(text=f"Test: p(x)/q(x) = {_g(pos.p_draft)}/{_g(pos.q_draft)} = {_g(pos.ratio)} → {verdict}",
                   font=dict(size=13)),
        xaxis=dict(range=[0, 1.02]), yaxis=dict(visible=False), legend=dict(orientation="h", y=-0.35))
    return fig


def acceptance_rows(gen: Generation | None, round_index: int = 0, position: int | None = 0) -> list[list]:
    if gen is None or not gen.rounds:
        return []
    r, pos = _position(gen, round_index, position)
    if pos is None:
        return []
    return [["drafted token", gen.token(pos.draft_token)], ["p(x)", round(pos.p_draft, 6)],
            ["q(x)", round(pos.q_draft, 6)], ["p(x)/q(x)", round(pos.ratio, 6)],
            ["min(1, p/q)", round(min(1.0, pos.ratio), 6)], ["u", round(pos.u, 6)],
            ["β = Σ min(p, q)", round(pos.beta, 6)], ["verdict", pos.status]]


def end_figure(gen: Generation | None, round_index: int = 0) -> go.Figure:
    """How the round's last token was drawn.

    residual: p − q with the negative part clamped (faded), the normalised residual (= end_dist);
    target (adjustment skipped): p used as-is, with a warning that this is biased;
    bonus: p at position γ+1. The drawn token is outlined in every case.
    """
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return _empty(fig, "No run yet", height=360)
    r = gen.rounds[round_index]
    d = r.end_dist
    labels = _labels(gen, d.ids) + [OTHER_LABEL]
    drawn = d.ids.index(r.end_token) if r.end_token in d.ids else None
    widths = [3 if k == drawn else 0 for k in range(len(labels))]
    token = show_token(gen.token(r.end_token))
    kind = r.end_rule
    if kind == "residual" and r.end_q is not None:
        diff = [p - q for p, q in zip(r.end_p.probs, r.end_q.probs)]
        fig.add_trace(go.Bar(x=labels[:-1], y=[max(0.0, v) for v in diff], name="max(0, p − q)",
                             marker=dict(color=OKABE_ITO["vermillion"]),
                             hovertemplate="%{x}<br>max(0, p − q) = %{y:.4f}<extra></extra>"))
        fig.add_trace(go.Bar(x=labels[:-1], y=[min(0.0, v) for v in diff], name="p − q < 0 (clamped to 0)",
                             marker=dict(color=FADED), hovertemplate="%{x}<br>p − q = %{y:.4f} → 0<extra></extra>"))
        fig.add_trace(go.Bar(x=labels, y=list(d.probs) + [d.rest], name="normalised residual (sampled)",
                             marker=dict(color=OKABE_ITO["blue"], line=dict(color=HIGHLIGHT, width=widths),
                                         pattern=dict(shape="x")),
                             hovertemplate="%{x}<br>residual = %{y:.4f}<extra></extra>"))
        title = (f"Round {r.index + 1}: draft {r.n_accepted + 1} rejected → resampled <b>{token}</b> from "
                 f"norm(max(0, p − q)); mass of max(0, p − q) = {_fmt(r.residual_mass, 3)}")
    elif kind == "target":
        fig.add_trace(go.Bar(x=labels, y=list(d.probs) + [d.rest], name="p (used instead of the residual: biased)",
                             marker=dict(color=OKABE_ITO["purple"], line=dict(color=HIGHLIGHT, width=widths),
                                         pattern=dict(shape="\\")),
                             hovertemplate="%{x}<br>p = %{y:.4f}<extra></extra>"))
        if r.end_q is not None:
            fig.add_trace(go.Bar(x=labels[:-1], y=list(r.end_q.probs), name="q (ignored)",
                                 marker=dict(color=FADED), hovertemplate="%{x}<br>q = %{y:.4f}<extra></extra>"))
        title = (f"⚠ BIASED: round {r.index + 1}: draft {r.n_accepted + 1} rejected → sampled <b>{token}</b> from p, "
                 "not from the residual (adjustment skipped)")
        fig.add_annotation(text="⚠ Adjustment skipped: tokens q over-proposes are now too likely. "
                                "The output no longer follows p.", xref="paper", yref="paper", x=0, y=1.02,
                           xanchor="left", yanchor="bottom", showarrow=False, bgcolor="#CC79A7", font=dict(color="white", size=12))
    else:
        name = "p at position γ+1 (bonus)" if kind == "bonus" else f"distribution used ({kind})"
        fig.add_trace(go.Bar(x=labels, y=list(d.probs) + [d.rest], name=name,
                             marker=dict(color=OUTCOMES.get(kind, OUTCOMES["bonus"])[1],
                                         line=dict(color=HIGHLIGHT, width=widths), pattern=dict(shape=".")),
                             hovertemplate="%{x}<br>p = %{y:.4f}<extra></extra>"))
        if kind == "bonus":
            title = (f"Round {r.index + 1}: all {len(r.positions)} drafts accepted → bonus token <b>{token}</b> "
                     f"drawn from p at position {len(r.positions) + 1}")
        else:
            title = f"Round {r.index + 1}: end token <b>{token}</b> ({kind})"
    if drawn is not None:
        fig.add_annotation(x=labels[drawn], y=d.probs[drawn], text="drawn", showarrow=True, arrowhead=2, ay=-30)
    else:   # drawn from the tail: the trace keeps only the top tokens, so it is inside "everything else"
        fig.add_annotation(x=OTHER_LABEL, y=d.rest, text=f"drawn: {token} (in the tail)", showarrow=True,
                           arrowhead=2, ay=-30)
    fig.update_layout(barmode="group", height=420, margin=dict(l=50, r=10, t=80, b=40),
                      title=dict(text=title, font=dict(size=13)), yaxis=dict(title="probability"),
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
        rows.append([gen.token(i), i, _r(p), _r(q), _r(None if q is None or p is None else p - q),
                     round(r.end_dist.probs[k], 6), "◀ drawn" if i == r.end_token else ""])
    rows.append([OTHER_LABEL, None, _r(r.end_p.rest), _r(r.end_q.rest if r.end_q else None), None,
                 round(r.end_dist.rest, 6), ""])
    return rows


END_HEADERS = ["token", "id", "p", "q", "p − q", "sampled from", "note"]


def _r(x):
    return None if x is None else round(x, 6)


# ---------------------------------------------------------------- run metrics

def metrics_markdown(gen: Generation | None, ar: Generation | None = None, running: bool = False) -> str:
    if gen is None:
        return "_No run yet._"
    s = gen.stats
    gamma = int(gen.settings.get("gamma") or 1)
    predicted = expected_tokens_per_round(s.acceptance_rate, gamma)
    lines = [
        "| metric | measured | theory |", "|---|---|---|",
        f"| acceptance rate α (accepted / tested) | **{s.acceptance_rate:.3f}** | "
        f"mean β = Σmin(p, q): **{s.expected_acceptance:.3f}** |",
        f"| tokens per target forward | **{s.tokens_per_target_forward:.2f}** | "
        f"(1 − α^(γ+1)) / (1 − α) = **{predicted:.2f}** (γ = {gamma}) |",
        f"| accepted / drafted | {s.accepted_per_drafted:.3f} | {s.accepted} of {s.drafted} drafts |",
        f"| forward passes | target **{s.target_forwards}**, draft **{s.draft_forwards}** | "
        f"autoregressive would need {s.new_tokens} target forwards |",
        f"| tokens / rounds | {s.new_tokens} / {s.rounds} | |",
        f"| wall time | {s.wall_seconds:.2f} s (draft {s.draft_seconds:.2f} s, verify {s.verify_seconds:.2f} s) | |",
    ]
    if ar is not None:
        speedup = ar.stats.wall_seconds / s.wall_seconds if s.wall_seconds else 0.0
        lines.append(f"| autoregressive run (same settings) | {ar.stats.wall_seconds:.2f} s, "
                     f"{ar.stats.target_forwards} target forwards | measured speedup **{speedup:.2f}×** |")
    head = "**Running…** " if running else ""
    if gen.settings.get("skip_adjustment"):
        head += "⚠ **Residual adjustment skipped: this run is biased** (its output does not follow p). "
    return head + "\n" + "\n".join(lines)
