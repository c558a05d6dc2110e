"""A figure sent to many visitors is encoded once (`app.encoded`), and the riders of one flight
share one streamed view per progress snapshot (`handlers._streamed_view`): a class on one link
costs the server one encoding, not thirty. The bytes are Gradio's own."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from specdec.app import encoded, handlers, views


def figure(n: int) -> go.Figure:
    return go.Figure(go.Scatter(x=list(range(n)), y=list(range(n))), layout=dict(title=f"{n} points"))


def test_a_figure_sent_thirty_times_is_encoded_once_as_gradio_would(monkeypatch):
    fig = figure(5)
    assert encoded.plot_data(fig) == gr.Plot().postprocess(fig)   # the same bytes Gradio sends
    calls = []
    real = go.Figure.to_json
    monkeypatch.setattr(go.Figure, "to_json", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    other = figure(6)
    sent = [encoded.encoded({"timeline": other, "status": "Done"}) for _ in range(30)]
    assert len(calls) == 1 and all(s["timeline"] is sent[0]["timeline"] for s in sent)
    assert sent[0]["status"] == "Done" and sent[0]["timeline"] == gr.Plot().postprocess(other)


def test_a_new_figure_at_an_old_figures_id_is_encoded_afresh():
    fig = figure(7)
    stale = encoded.PlotData(type="plotly", plot="{}")
    encoded._TABLE[id(fig)] = (lambda: None, stale)   # what a figure gone and its id reused leaves
    assert encoded.plot_data(fig) != stale and encoded.plot_data(fig) == gr.Plot().postprocess(fig)


def test_the_table_is_bounded():
    figs = [figure(i) for i in range(encoded.KEPT + 5)]
    for f in figs:
        encoded.plot_data(f)
    assert len(encoded._TABLE) == encoded.KEPT


def test_riders_of_one_flight_share_one_streamed_view_per_snapshot(bundled, monkeypatch):
    from specdec import RunSettings, speculative_generate

    builds = []
    real = views.streamed
    monkeypatch.setattr(views, "streamed", lambda *a, **k: builds.append(1) or real(*a, **k))
    snapshot = speculative_generate(bundled, "To be", RunSettings(max_new_tokens=8))
    first = [handlers._streamed_view("Round 1 · 8/8 tokens…", snapshot, True) for _ in range(30)]
    assert len(builds) == 1 and all(f["timeline"] is first[0]["timeline"] for f in first)
    handlers._streamed_view("Round 1 · 8/8 tokens…", snapshot, False)   # without the timeline: its own
    later = speculative_generate(bundled, "To be", RunSettings(max_new_tokens=8))   # the next snapshot
    handlers._streamed_view("Round 1 · 8/8 tokens…", later, True)
    assert len(builds) == 3
