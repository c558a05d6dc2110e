"""The bench's chart: speedup against gamma, measured and predicted. Pure: a results dict in
(what `bench.benchmark` returns and `results.json` holds), a Plotly figure out.

One panel per temperature. Each contender has its own Okabe-Ito colour AND marker shape, and
sits a little left or right of its gamma so the error bars stay apart; measured is a solid line
with filled markers and its quartile range (over prompts and seeds) as error bars, predicted
from the measured costs is dashed with open markers, Leviathan et al.'s closed form dotted.
Every trace carries meta={"kind", "series", "temperature"} so tests can find it.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..explain.looks import PALETTE

STYLE = {   # kind -> colour, marker (tells the series apart in greyscale too), x nudge (error bars apart)
    "specdec_model": dict(color=PALETTE["blue"], symbol="circle", nudge=-0.15),
    "specdec_features": dict(color=PALETTE["purple"], symbol="star", nudge=-0.10),
    "specdec_ngram": dict(color=PALETTE["vermillion"], symbol="square", nudge=-0.05),
    "hf_assisted": dict(color=PALETTE["green"], symbol="diamond", nudge=0.05),
    "hf_lookup": dict(color=PALETTE["orange"], symbol="triangle-up", nudge=0.15),
}
SERIES = {  # series -> row key, line dash, marker variant, legend suffix
    "measured": ("speedup", "solid", "", "measured"),
    "predicted": ("predicted", "dash", "-open", "predicted from measured costs"),
    "leviathan": ("leviathan", "dot", "-open-dot", "Leviathan et al. (α, γ, c)"),
}
# Which kinds get which predicted series: only specdec's runs report α, and Leviathan's closed form
# assumes gamma drafts every round, which an n-gram lookup (often shorter, or none) does not do.
PREDICTED_KINDS = {"predicted": ("specdec_model", "specdec_features", "specdec_ngram"),
                   "leviathan": ("specdec_model", "specdec_features")}


def speedup_figure(results: dict) -> go.Figure:
    """Speedup over the faster target-alone loop against gamma, one panel per temperature."""
    rows = [r for r in results.get("rows", []) if r.get("gamma")]
    temperatures = sorted({r["temperature"] for r in results.get("rows", [])})
    baselines = results.get("baselines", {})
    titles = [_panel_title(t, baselines.get(f"{t:g}")) for t in temperatures] or ["no runs"]
    fig = make_subplots(rows=1, cols=max(1, len(temperatures)), shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.06)
    shown = set()
    for col, t in enumerate(temperatures, start=1):
        for kind, style in STYLE.items():
            mine = sorted((r for r in rows if r["kind"] == kind and r["temperature"] == t), key=lambda r: r["gamma"])
            if not mine:
                continue
            for series, (key, dash, marker, suffix) in SERIES.items():
                if series != "measured" and kind not in PREDICTED_KINDS[series]:
                    continue
                points = [r for r in mine if r.get(key) is not None]
                if not points:
                    continue
                name = f"{mine[0]['label']}: {suffix}"
                error = None
                if series == "measured" and all("speedup_q1" in r for r in points):
                    error = dict(type="data", symmetric=False, thickness=1, width=3,
                                 array=[r["speedup_q3"] - r["speedup"] for r in points],
                                 arrayminus=[r["speedup"] - r["speedup_q1"] for r in points])
                fig.add_trace(go.Scatter(
                    x=[r["gamma"] + style["nudge"] for r in points], y=[r[key] for r in points], name=name,
                    customdata=[r["gamma"] for r in points],
                    mode="lines+markers", legendgroup=name, showlegend=name not in shown,
                    line=dict(color=style["color"], dash=dash, width=2 if series == "measured" else 1.5),
                    marker=dict(color=style["color"], symbol=style["symbol"] + marker, size=9),
                    error_y=error,
                    hovertemplate=f"{name}<br>T={t:g}, γ=%{{customdata}}: %{{y:.2f}}x<extra></extra>",
                    meta={"kind": kind, "series": series, "temperature": t}), row=1, col=col)
                shown.add(name)
        fig.add_hline(y=1.0, line=dict(color=PALETTE["grey"], dash="longdash", width=1), row=1, col=col)
        fig.update_xaxes(title_text="γ (drafts per round)", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="speedup (x the faster target-alone loop)", row=1, col=1)
    pair = results.get("pair", {}).get("label", "")
    settings = results.get("settings", {})
    fig.update_layout(
        title=f"Speculative decoding speedup — {pair}" + (
            f" ({settings.get('max_new_tokens')} new tokens, {settings.get('threads')} thread(s))" if settings else ""),
        template="plotly_white", height=520, margin=dict(l=70, r=20, t=90, b=60),
        legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))
    return fig


def _panel_title(t: float, baseline: dict | None) -> str:
    name = "greedy, T = 0" if t == 0 else f"T = {t:g}"
    if baseline:
        return f"{name} (1x = {baseline['label']}, {baseline['tok_s']:.0f} tok/s)"
    return name
