"""The tokens at one drafted position that lie outside the drafter's vocabulary (a features drafter
whose q reads a subset of the ids: SmolLM2-135M-Instruct's reads 16,384 of 49,152): which of the
tokens the p/q chart shows, and p's mass outside in all. The chart marks them, its title and its
table name them. No draft can be such a token: q is 0 there by construction, not by
chance, and only the residual gives it. A drafter that reads every id marks nothing.
"""

from __future__ import annotations

from ...explain.looks import prob_text, token_label
from ...trace.spine import Generation

MARK = "✕"
NAME = "outside the drafter's vocabulary"
LEGEND = f"{MARK} p {NAME} (q = 0)"
NOTE = f"{MARK} {NAME}"   # the p/q table's note for such a token
LISTED = 6   # tokens named in the chart's title; the table names every one


def outside_of(pos) -> set[int]:
    """The stored ids of a position outside the drafter's vocabulary (empty when it reads every
    id, or the trace does not say)."""
    return set(pos.outside_ids or ())


def outside_places(gen: Generation) -> list[tuple[int, int]]:
    """(round, position), 0-based, of each rejected draft whose place the run filled with a token
    outside the drafter's vocabulary: no draft could be it, only the residual (or p, when the
    adjustment is skipped) gave it. Known where that token is among the position's stored ids, as
    it is wherever it carried a fair share of p; empty for a drafter that reads every id."""
    return [(r.index, r.n_accepted) for r in gen.rounds
            if r.n_accepted < len(r.positions) and r.emitted[-1:] == [r.end_token]
            and r.end_token in outside_of(r.positions[r.n_accepted])]


def outside_line(gen: Generation, pos) -> str:
    """One plain-text line for the p/q chart: the shown tokens outside the drafter's vocabulary
    (the first `LISTED` named), p's mass on them, and p's mass outside in all (the tails'
    tokens too); '' where no shown token is outside (nothing is marked, so nothing is said) or the
    trace does not say which (a drafter reading every id, an older trace)."""
    ids = list(pos.outside_ids or ())
    if not ids:
        return ""
    total = "" if pos.p_outside_vocab is None else f"; p outside it in all = {prob_text(pos.p_outside_vocab)}"
    p = dict(zip(pos.p.ids, pos.p.probs))
    names = ", ".join(token_label(gen, i) for i in ids[:LISTED])
    more = f" and {len(ids) - LISTED} more" if len(ids) > LISTED else ""
    return (f"{MARK} {NAME}: {names}{more} ({len(ids)} of the {len(pos.p.ids)} shown, "
            f"p = {prob_text(sum(p[i] for i in ids))}){total}")


def outside_bars(pos, labels: list[str], colour: str, edge: str) -> list:
    """The p bars of the shown tokens outside the drafter's vocabulary again, cross-hatched, in
    p's place (`offsetgroup`): a pattern, not a colour, marks them, with a legend entry of its own.
    Nothing when there are none."""
    import plotly.graph_objects as go

    out = outside_of(pos)
    ks = [k for k, i in enumerate(pos.p.ids) if i in out]
    if not ks:
        return []
    return [go.Bar(x=[labels[k] for k in ks], y=[pos.p.probs[k] for k in ks], name=LEGEND, legendgroup="outside",
                   offsetgroup="p (target)", xaxis="x", yaxis="y",
                   marker=dict(color=colour, pattern=dict(shape="x", fillmode="overlay", fgcolor=edge, size=6,
                                                          solidity=0.35)),
                   hovertemplate="%{x}<br>p = %{y:.4g}, " + NAME + ": q = 0<extra></extra>")]
