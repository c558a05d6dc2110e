"""The step viewer's charts as 16:9 PNGs for slides, straight from the page: each chart's camera
button (Plotly's modebar, "Download plot as a png") saves it at 1600 x 900, named after the round.
The browser draws the image, so the server renders nothing and needs no Kaleido; the printable
round sheet (`round_sheet`) stays for print.

Plotly's config is not part of a figure (`go.Figure.to_json` leaves it out), but the page's Plotly
draws a figure with the "config" its JSON holds (Gradio's plot reads it there): `SlideFigure`
writes it into its JSON.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go

from ...trace.spine import Generation
from .round_sheet import file_stem

SLIDE = dict(width=1600, height=900)   # 16:9, a slide's full width at a projector's common size


def png_config(filename: str) -> dict:
    """Plotly's config for a chart whose camera button saves a 16:9 PNG named `filename`."""
    return {"toImageButtonOptions": dict(format="png", **SLIDE, scale=1, filename=filename)}


class SlideFigure(go.Figure):
    """A figure whose JSON carries its Plotly config (`config`: None, none)."""

    def to_json(self, *args, **kwargs) -> str:
        text = super().to_json(*args, **kwargs)
        config = getattr(self, "_slide_config", None)
        if config is None or not text.endswith("}"):
            return text
        return f'{text[:-1]},"config":{json.dumps(config)}}}'


def for_slides(figure: go.Figure, gen: Generation, round_index: int, chart: str) -> go.Figure:
    """`figure`, itself, saving a 16:9 PNG named after its round and `chart`. Re-typed in place: a
    copy (`go.Figure(figure)`) validated every trace again, 10 to 265 ms a chart."""
    figure.__class__ = SlideFigure
    figure._slide_config = png_config(f"{file_stem(gen, round_index)}-{chart}")
    return figure
