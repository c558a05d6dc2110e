"""A figure sent to many visitors is encoded once.

Gradio encodes each Plotly figure it sends (`gr.Plot.postprocess`: `figure.to_json()`) once per
visitor. A class on one link shares one run (`flights`), one streamed view per update and one final
view (`handlers`), so the same figure objects go out thirty times; encoding them is most of what the
server does for a class, more than the decode itself.

`encoded(update)` hands Gradio the figure already encoded (`PlotData`, which `postprocess` passes
through unchanged: the bytes sent are Gradio's own). The encodings are kept by figure in a bounded
table (`once.Once`).
"""

from __future__ import annotations

import plotly.graph_objects as go
from gradio.components.plot import PlotData

from .once import Once

KEPT = 32   # encodings kept: a final view has 5 figures, a streamed update 1; a few runs at once
_ENCODINGS = Once(KEPT)


def encoded(update: dict) -> dict:
    """`update` with each Plotly figure replaced by its encoding (made once per figure), and each
    `gr.update(...)` copied: Gradio pops an update's "value" as it sends it, so a shared view's
    second visitor got the round slider's and the position's new choices without their values
    (the slider said round 1 beside "Round 2 of 21" after a run from the cache)."""
    return {name: plot_data(value) if isinstance(value, go.Figure) else
            dict(value) if isinstance(value, dict) and value.get("__type__") == "update" else value
            for name, value in update.items()}


def plot_data(figure: go.Figure) -> PlotData:
    """What `gr.Plot.postprocess(figure)` returns, computed once for this figure object (by its
    first asker; a class's other riders wait for it rather than encode it too)."""
    return _ENCODINGS.get(figure, "plotly", lambda: PlotData(type="plotly", plot=figure.to_json()))
