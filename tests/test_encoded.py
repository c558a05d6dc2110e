"""A figure sent to many visitors is encoded once (`app.encoded`), and the riders of one flight
share one streamed view per progress snapshot (`handlers._streamed_view`): a class on one link
costs the server one encoding, not thirty. The bytes are Gradio's own."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
import pytest

from specdec.app.page import handlers
from specdec.app.server import encoded
from specdec.app.shows import views


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


def test_thirty_askers_at_once_build_one_value_and_the_others_wait_for_it():
    """The first asker builds; the other 29, asking while it builds, wait and get its value (a
    check-then-build cache let all thirty build: the class's final view, thirty times)."""
    import threading
    import time

    from specdec.app.server.once import Once

    table, owner, builds = Once(4), figure(3), []
    start = threading.Barrier(30)

    def build():
        builds.append(1)
        time.sleep(0.2)   # a build that takes a while: every asker arrives during it
        return {"view": len(builds)}

    got = []

    def ask():
        start.wait()
        got.append(table.get(owner, "final", build))

    threads = [threading.Thread(target=ask) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(got) == 30 and all(g is got[0] for g in got)


def test_a_new_owner_at_an_old_owners_id_is_built_afresh_and_a_failed_build_is_not_kept():
    from specdec.app.server.once import Once

    table = Once(4)
    first = figure(1)
    assert table.get(first, "k", lambda: "first's") == "first's"
    key = id(first)
    del first   # its id may now be reused; the entry's weak reference is dead either way
    other = figure(2)
    table._table[(id(other), "k")] = table._table.pop((key, "k"))   # as if `other` took the old id
    assert table.get(other, "k", lambda: "other's") == "other's"

    def fail():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        table.get(other, "j", fail)
    assert table.get(other, "j", lambda: "built") == "built"


def test_the_table_is_bounded():
    figs = [figure(i) for i in range(encoded.KEPT + 5)]
    for f in figs:
        encoded.plot_data(f)
    assert len(encoded._ENCODINGS) == encoded.KEPT


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


def test_a_shared_view_s_updates_keep_their_values_for_every_visitor():
    """Gradio pops an update's "value" as it sends it (`postprocess_update_dict`). A finished run's
    view is shared by every request that got the same run (a class, the cache): its second visitor
    got the round slider's new maximum without its value, and the position's choices without the
    chosen one (the slider said 1 beside "Round 2 of 21"). Each visitor gets a copy; the
    negative control sends the shared update itself and loses the value."""
    from gradio.blocks import postprocess_update_dict

    slider = gr.Slider(1, 2, value=1, step=1, label="round")
    shared = {"round_slider": gr.update(maximum=21, value=2), "status": "Done"}
    for visitor in range(3):
        sent = postprocess_update_dict(slider, encoded.encoded(shared)["round_slider"])
        assert sent["value"] == 2, visitor
    postprocess_update_dict(slider, shared["round_slider"])   # the shared dict itself, sent once
    assert "value" not in shared["round_slider"]
