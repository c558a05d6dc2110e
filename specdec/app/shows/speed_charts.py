"""The speed explorer's figures and table: Leviathan et al.'s expected speedup against α, with the
costs of a device measured by the project (`speed.CostProfile`) or by the current run.

speedup(α, γ) = (1 − α^(γ+1)) / ((1 − α)(γ c + v(γ))), c = a draft step in target steps,
v(γ) = a verify over γ + 1 tokens in target steps. Pure: profiles and a `speed.RunPoint` in,
figures out; every curve's trace carries meta {profile, gamma, c, v, measured_width} so a test
can check it against the closed form.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from ...explain.looks import PALETTE
from ...explain.speed import CostProfile, RunPoint, alpha_band, expected_tokens_per_round
from .charts import empty_figure, legend_below, plotly_text

GAMMAS = tuple(range(1, 9))
ALPHAS = [k / 100 for k in range(101)]
# Eight γ, told apart by colour and by dash (colour is never the only cue).
GAMMA_STYLE = {g: (c, d) for g, c, d in zip(GAMMAS, ("#56B4E9", "#009E73", "#E69F00", "#0072B2", "#D55E00",
                                                      "#CC79A7", "#999999", "#000000"),
                                            ("solid", "dot", "dash", "solid", "longdash", "dashdot", "dot", "dash"))}
# The committed profiles take these in file order; a run's own two profiles take RUN_COLOURS, so a
# profile keeps its colour whether or not "this run" is drawn beside it.
# Okabe & Ito's six left after the run's two, then five of Paul Tol's "muted" scheme (also told apart
# by colour-blind readers, and from these), as many as there are committed profiles.
PROFILE_COLOURS = [PALETTE[k] for k in ("blue", "green", "purple", "sky", "grey", "yellow")] + [
    "#332288", "#882255", "#44AA99", "#999933", "#CC6677"]   # Tol's indigo, wine, teal, olive and rose
CHOSEN_MARK = "◀ chosen"   # the legend entry of the profile the controls above are set to
RUN_COLOURS = {"this run (whole loop)": PALETTE["vermillion"], "this run (forwards only)": PALETTE["orange"]}


def profile_colours(profiles: list[CostProfile]) -> dict[str, str]:
    """A colour for each profile's name, the same whichever other profiles are drawn."""
    committed = [p.name for p in profiles if p.name not in RUN_COLOURS]
    return {name: RUN_COLOURS.get(name) or PROFILE_COLOURS[committed.index(name) % len(PROFILE_COLOURS)]
            for name in (p.name for p in profiles)}


def curve(alpha: float, gamma: int, c: float, v: float) -> float:
    """The closed form (the one `speed.leviathan_speedup` computes), without its range check."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + v)


def _curve_trace(profile: CostProfile, gamma: int, c: float, name: str, colour: str, dash: str,
                 width: float) -> go.Scatter:
    """One curve; faded, its name starred, where the verify width γ + 1 was not measured."""
    v, measured = profile.verify_nearest(gamma)
    return go.Scatter(
        x=ALPHAS, y=[curve(a, gamma, c, v) for a in ALPHAS], mode="lines", name=name + ("" if measured else " *"),
        line=dict(color=colour, dash=dash, width=width), opacity=1.0 if measured else 0.5,
        meta={"profile": profile.name, "gamma": gamma, "c": c, "v": v, "measured_width": measured},
        hovertemplate=f"{plotly_text(name)}<br>α = %{{x:.2f}}: %{{y:.2f}}×<extra></extra>")


def _guides(fig: go.Figure, alpha: float, label: str) -> None:
    """Break-even (1×) and the chosen α, each with its label where nothing else is written."""
    fig.add_hline(y=1, line=dict(color=PALETTE["grey"], width=1))
    fig.add_annotation(text="break-even (1×)", x=0.01, xref="x", y=1, yref="y", xanchor="left", yanchor="bottom",
                       showarrow=False, font=dict(size=10, color="#555"))
    fig.add_vline(x=alpha, line=dict(color=PALETTE["black"], width=1, dash="dot"))
    fig.add_annotation(text=label, x=alpha, xref="x", y=1.0, yref="paper", yanchor="bottom",
                       xanchor="left" if alpha < 0.5 else "right", showarrow=False, bgcolor="rgba(255,255,255,0.9)",
                       font=dict(size=11))


LABEL_PX = 40   # the page's label of a figure (top left) and Plotly's modebar (top right)


def _layout(fig: go.Figure, title: str, title_lines: int, entries: int, columns: int = 1) -> None:
    """Under the page's label: the title; the plot; the legend under the axis title."""
    rows = -(-entries // columns)
    top, plot, bottom = LABEL_PX + 18 * title_lines + 34, 300, 70 + 20 * rows
    height = top + plot + bottom
    fig.update_layout(height=height, margin=dict(l=60, r=20, t=top, b=bottom), template="plotly_white",
                      title=dict(text=title, font=dict(size=13), x=0, xref="paper", xanchor="left",
                                 y=1 - LABEL_PX / height, yref="container", yanchor="top"),
                      legend={**legend_below(height, top, bottom, 48), "orientation": "v" if columns == 1 else "h"},
                      xaxis=dict(title="acceptance rate α", range=[-0.03, 1.02]),
                      yaxis=dict(title="speedup over the target alone (×)", rangemode="tozero"))


def curves_figure(profile: CostProfile | None, gamma: int, alpha: float, c: float | None = None,
                  point: RunPoint | None = None) -> go.Figure:
    """Speedup against α for γ = 1..8 with one profile's costs (c from the slider: "what if"), the
    chosen γ drawn bold; the run's measured point on its own curve when this is its profile."""
    fig = go.Figure()
    if profile is None:
        return empty_figure(fig, "No cost profile to draw", height=300)
    c = profile.c if c is None else c
    what_if = abs(c - profile.c) > 1e-9
    for g in GAMMAS:
        colour, dash = GAMMA_STYLE[g]
        fig.add_trace(_curve_trace(profile, g, c, f"γ = {g}", colour, dash, 4 if g == gamma else 1.5))
    entries = len(GAMMAS)
    if point is not None and point.whole_loop is not None and profile.name == point.whole_loop.name and not what_if:
        entries += _run_point(fig, point, profile)
    v, _ = profile.verify_nearest(gamma)
    _guides(fig, alpha, f"α = {alpha:.3f}, γ = {gamma}: {curve(alpha, gamma, c, v):.2f}×")
    head = f"what if c = {c:.3f} (measured {profile.c:.3f})" if what_if else f"c = {c:.3f}"
    _layout(fig, f"{plotly_text(profile.name)}: speedup against α, γ = 1–8<br><span style='font-size:11px'>"
                 f"{head}; v(γ) = its verify over γ + 1 tokens ÷ one step. * faded: width γ + 1 not measured, "
                 "v from the nearest measured width</span>", 2, entries, columns=4)
    return fig


def _run_point(fig: go.Figure, point: RunPoint, profile: CostProfile) -> int:
    """The run's measured speedup at its α, with α ± 2σ (binomial), and its curve over that band."""
    g = point.gamma
    v, _ = profile.verify_nearest(g)
    lo, hi = alpha_band(point.alpha, point.tested)
    band = [a for a in ALPHAS if lo <= a <= hi] or [point.alpha]
    fig.add_trace(go.Scatter(x=[lo, *band, hi], y=[curve(a, g, profile.c, v) for a in (lo, *band, hi)],
                             mode="lines", name="its curve over α ± 2σ",
                             line=dict(color="rgba(0,114,178,0.3)", width=14), meta={"role": "band"},
                             hovertemplate="α = %{x:.3f}: %{y:.2f}×<extra>curve within α's noise</extra>"))
    fig.add_trace(go.Scatter(x=[point.alpha], y=[curve(point.alpha, g, profile.c, v)], mode="markers",
                             name=f"predicted at α = {point.alpha:.3f}", meta={"role": "predicted"},
                             marker=dict(symbol="circle-open", size=14, color=PALETTE["black"], line=dict(width=2))))
    fig.add_trace(go.Scatter(x=[point.alpha], y=[point.measured], mode="markers", name="this run, measured",
                             meta={"role": "measured"},
                             error_x=dict(type="data", symmetric=False, array=[hi - point.alpha],
                                          arrayminus=[point.alpha - lo], color=PALETTE["vermillion"]),
                             marker=dict(symbol="x", size=13, color=PALETTE["vermillion"])))
    return 3


def compare_figure(profiles: list[CostProfile], gamma: int, alpha: float, what_if: tuple[CostProfile, float] | None,
                   point: RunPoint | None = None, chosen: str | None = None) -> go.Figure:
    """One γ, every profile: where and when each was measured in its legend entry; the what-if
    curve (a profile with another c) dashed. The `chosen` profile is drawn as in `rates_figure`:
    thicker (a cue besides colour), last (on top), its legend entry marked."""
    fig = go.Figure()
    colours = profile_colours(profiles)
    for prof in sorted(profiles, key=lambda p: p.name == chosen):   # the chosen one last
        mark = f" {CHOSEN_MARK}" if prof.name == chosen else ""
        name = f"{prof.name} ({prof.when}): c = {prof.c:.3f}, v = {prof.verify_nearest(gamma)[0]:.2f}{mark}"
        fig.add_trace(_curve_trace(prof, gamma, prof.c, name, colours[prof.name], "solid",
                                   4.5 if prof.name == chosen else 2))
    entries = len(profiles)
    if what_if is not None:
        prof, c = what_if
        fig.add_trace(_curve_trace(prof, gamma, c, f"what if: {prof.name} with c = {c:.3f}", PALETTE["black"],
                                   "dash", 3))
        entries += 1
    if point is not None and point.measured is not None:
        fig.add_trace(go.Scatter(x=[point.alpha], y=[point.measured], mode="markers", name="this run, measured",
                                 marker=dict(symbol="x", size=13, color=PALETTE["vermillion"]),
                                 meta={"role": "measured"}))
        entries += 1
    _guides(fig, alpha, f"α = {alpha:.3f}")
    _layout(fig, f"γ = {gamma}: every measured cost profile<br><span style='font-size:11px'>* faded: width "
                 f"{gamma + 1} not measured, v from the nearest measured width</span>", 2, entries)
    return fig


# Each profile's speculative line carries markers of its own shape every tenth α, at an α of its own
# (`profile_markers`): two profiles whose lines coincide (two GPUs of one speed) still both show.
PROFILE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "triangle-down", "star", "pentagon",
                   "hexagon", "triangle-left", "triangle-right", "hourglass", "bowtie", "cross", "x")


def profile_markers(index: int) -> dict:
    """Marker shape and sizes for the `index`-th profile's line: one marker every tenth α, starting
    at α = index / 100 (mod 10), so coinciding lines show their markers side by side."""
    sizes = [8 if k % 10 == index % 10 else 0 for k in range(len(ALPHAS))]
    return dict(symbol=PROFILE_SYMBOLS[index % len(PROFILE_SYMBOLS)], size=sizes)


def rates_figure(profiles: list[CostProfile], gamma: int, alpha: float, point: RunPoint | None = None,
                 chosen: str | None = None) -> go.Figure:
    """Tokens per second against α at one γ: for each profile the target alone (dashed, flat: one
    token a step) and speculative decoding (solid: the speedup times that rate), in the profile's
    colour and with markers of its own; this run's two measured rates at its α. The `chosen`
    profile's lines are drawn thicker, last (on top), and its legend entry says so. A ratio hides
    the device: a slow baseline draws a high speedup curve; here a faster device sits higher on
    both lines.

    One legend entry per profile (its two lines toggle together), one entry per row, under the
    axis title: a legend that wraps into as many rows as the width allows cannot be sized before
    the page's width is known, and one taller than its margin covered the lower lines."""
    fig = go.Figure()
    colours = profile_colours(profiles)
    order = sorted(range(len(profiles)), key=lambda i: profiles[i].name == chosen)   # the chosen one last
    for i in order:
        prof = profiles[i]
        alone, label = 1000 / prof.target_step_ms, plotly_text(prof.name)
        v, measured = prof.verify_nearest(gamma)
        width = 4.5 if prof.name == chosen else 2.5
        # The flat line over every α (not only its two ends), so a hover anywhere on it gives its value.
        fig.add_trace(go.Scatter(x=ALPHAS, y=[alone] * len(ALPHAS), mode="lines",
                                 name=f"{prof.name}: target alone",
                                 line=dict(color=colours[prof.name], dash="dash", width=width - 1),
                                 legendgroup=prof.name, showlegend=False,
                                 meta={"profile": prof.name, "role": "alone", "tokens_per_second": alone},
                                 hovertemplate=f"{label}: target alone %{{y:.0f}} tokens/s<extra></extra>"))
        fig.add_trace(go.Scatter(x=ALPHAS, y=[alone * curve(a, gamma, prof.c, v) for a in ALPHAS],
                                 mode="lines+markers", marker=dict(color=colours[prof.name], **profile_markers(i)),
                                 name=prof.name + ("" if measured else " *") + (f" {CHOSEN_MARK}" if prof.name == chosen
                                                                                 else ""),
                                 legendgroup=prof.name, line=dict(color=colours[prof.name], width=width),
                                 opacity=1.0 if measured else 0.5,
                                 meta={"profile": prof.name, "role": "speculative", "gamma": gamma, "c": prof.c,
                                       "v": v},
                                 hovertemplate=f"{label}: α = %{{x:.2f}}, %{{y:.0f}} tokens/s"
                                               "<extra>speculative</extra>"))
    entries = len(profiles)
    if point is not None and point.measured is not None and point.whole_loop is not None:
        alone = 1000 / point.whole_loop.target_step_ms
        # An open square, larger than the X: at a speedup near 1 the two sit on one spot, and a
        # filled square of the X's size was hidden under it.
        for role, y, symbol, size in (("measured alone", alone, "square-open", 17),
                                      ("measured", alone * point.measured, "x", 10)):
            fig.add_trace(go.Scatter(x=[point.alpha], y=[y], mode="markers", meta={"role": role},
                                     name=f"this run, {'target alone' if role == 'measured alone' else 'speculative'}"
                                          ", measured",
                                     marker=dict(symbol=symbol, size=size, color=RUN_COLOURS["this run (whole loop)"],
                                                 line=dict(width=2.5 if symbol == "square-open" else 0))))
        entries += 2
    fig.add_vline(x=alpha, line=dict(color=PALETTE["black"], width=1, dash="dot"))
    _layout(fig, f"γ = {gamma}: tokens per second, target alone (dashed) and speculative (solid)<br>"
                 "<span style='font-size:11px'>one colour per profile; a faster device sits higher on both lines; "
                 "its speedup is the gap between them</span>", 2, entries)
    # A legend group (a profile's two lines) adds a 10 px gap after it by default: rows of 20 px, as
    # the bottom margin counts them, or the legend pushed the margin and shrank the plot.
    fig.update_layout(yaxis=dict(title="tokens per second", type="log"), legend=dict(tracegroupgap=0,
                                                                                     itemsizing="constant"))
    ys = [y for trace in fig.data for y in trace.y]
    if ys:   # no profile and no run: nothing to label
        ticks = log_ticks(min(ys), max(ys))
        fig.update_layout(yaxis=dict(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks]))
    return fig


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks from below `low` to above `high`: on a log axis spanning about one decade,
    Plotly labels every digit (7, 8, 9, 100, ...), which overlap at narrow widths."""
    ticks, decade = [], 10.0 ** math.floor(math.log10(low))
    while not ticks or ticks[-1] < high:
        ticks += [decade * m for m in (1, 2, 5)]
        decade *= 10
    first = max(i for i, t in enumerate(ticks) if t <= low)
    last = min(i for i, t in enumerate(ticks) if t >= high)
    return ticks[first:last + 1]


# Where, when and how each was measured is in the chosen profile's note, the compare chart's legend
# and the note under this table (its name says the engine): text columns for them pushed c, v, the
# speedup and best γ past the panel's right edge at 800 px.
PROFILE_HEADERS = ["profile", "target step ms", "draft step ms", "c", "v(γ)", "speedup at α",
                   "predicted tok/s at α", "best γ at α"]
PROFILE_WIDTHS = ["18%", "11%", "11%", "9%", "10%", "13%", "14%", "14%"]


def rate_words(tokens_per_second: float) -> str:
    """A rate as the table shows it: whole tokens from 100 a second, else one decimal (a CPU's few
    tokens a second keep a digit that says something)."""
    return f"{tokens_per_second:.0f}" if tokens_per_second >= 100 else f"{tokens_per_second:.1f}"


def best_gamma(profile: CostProfile, gamma: int, alpha: float) -> tuple[float, int, bool]:
    """(speedup, γ, whether its verify width was measured) of the fastest γ at α, over the curves
    the charts draw (γ 1–8 and the chosen γ, each with `verify_nearest`): never slower than the
    chosen γ's figure beside it, which the same curves give."""
    candidates = sorted(set(GAMMAS) | {gamma})
    speeds = [(curve(alpha, g, profile.c, profile.verify_nearest(g)[0]), -g) for g in candidates]
    speed, minus_g = max(speeds)
    return speed, -minus_g, profile.verify_nearest(-minus_g)[1]


def profile_rows(profiles: list[CostProfile], gamma: int, alpha: float) -> list[list]:
    """Each profile's costs and what they give at (α, γ): the speedup, and the tokens a second it
    predicts (the target alone's rate times that speedup, as the tokens-per-second chart draws it);
    and its best γ at α. A v taken from the nearest measured width is starred, as its curve is in
    the charts (`UNMEASURED`)."""
    rows = []
    for prof in profiles:
        v, measured = prof.verify_nearest(gamma)
        at = curve(alpha, gamma, prof.c, v)
        speed, best, best_measured = best_gamma(prof, gamma, alpha)
        star, best_star = ("" if measured else " *"), ("" if best_measured else " *")
        rows.append([prof.name, round(prof.target_step_ms, 3), round(prof.draft_step_ms, 3), round(prof.c, 3),
                     f"{v:.2f}{star}", f"{at:.2f}×", rate_words(1000 / prof.target_step_ms * at),
                     f"γ = {best}: {speed:.2f}×{best_star}"])
    return rows


# The table's note on its stars (the charts say the same under their titles).
UNMEASURED = "* v from the nearest measured verify width (this width was not measured)"
