"""Outputs a handler leaves out are sent as Gradio sends them, without Gradio's rebuild of each
(`specdec.app.server.skips`): the same payload for every output, named or left out, and the components
left out are not built again."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import pytest
from gradio.state_holder import SessionState

from specdec.app.server.skips import skip_left_out


def _app():
    with gr.Blocks() as demo:
        plot, table, text, note, slider = gr.Plot(), gr.Dataframe(), gr.Textbox(), gr.Markdown(), gr.Slider(1, 5)
        button = gr.Button()
        button.click(lambda: None, None, [plot, table, text, note, slider])
    return demo, (plot, table, text, note, slider)


def _sent(patched: bool, answer) -> tuple[list, int]:
    """(what the browser is sent, how many components were built while postprocessing)."""
    demo, blocks = _app()
    if patched:
        skip_left_out(demo)
    block_fn = demo.fns[0]
    built = []
    real_init = gr.components.Component.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        real_init(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gr.components.Component, "__init__", counting_init)
        # a loop of its own, in a thread: a browser test may have left one running in this one
        with ThreadPoolExecutor(1) as pool:
            work = demo.postprocess_data(block_fn, answer(blocks), SessionState(demo))
            sent = pool.submit(asyncio.run, work).result()
    return sent, len(built)


ANSWERS = {
    "one named": lambda b: {b[2]: "streamed text"},
    "two named": lambda b: {b[2]: "text", b[3]: "**numbers**"},
    "a figure and an update": lambda b: {b[0]: go.Figure(go.Bar(x=[1, 2], y=[3, 4])), b[4]: gr.update(maximum=9)},
    "all named": lambda b: {b[0]: None, b[1]: pd.DataFrame({"a": [1]}), b[2]: "t", b[3]: "m", b[4]: 3},
    "a list": lambda b: [None, pd.DataFrame({"a": [1]}), "t", "m", 2],
}


@pytest.mark.parametrize("name", ANSWERS)
def test_what_the_browser_is_sent_is_what_gradio_sends(name):
    assert _sent(True, ANSWERS[name])[0] == _sent(False, ANSWERS[name])[0]


def test_the_outputs_left_out_are_not_built_again():
    _, gradio_builds = _sent(False, ANSWERS["one named"])
    _, builds = _sent(True, ANSWERS["one named"])
    assert gradio_builds >= 4 and builds == 0, (gradio_builds, builds)   # a Plot, a Dataframe, a Markdown, a Slider
