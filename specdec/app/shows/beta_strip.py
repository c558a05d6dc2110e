"""The β strip above the generated text: one cell per drafted position, in the order the text
reads, shaded by β = Σ min(p, q), so a learner sees at a glance where the draft agrees with the
target.

Colour-blind safe: one hue (Okabe-Ito blue) whose lightness alone carries β, and a second cue
that needs no colour at all: a position where the draft mostly disagrees (β < LOW) is hatched.
Each cell is a button for the keyboard (Tab reaches it, Enter or Space opens its round, as a click
does: static/app.js) and says its round, draft, token and β to a screen reader and in its tooltip.
Pure: a `Generation` in, HTML out, every number from the trace.
"""

from __future__ import annotations

import html

from ...explain.looks import PALETTE, token_label
from ...trace.spine import Generation

LOW = 0.5   # β under this: the draft more often fails here than passes; hatched as well as pale
_BLUE = tuple(int(PALETTE["blue"][i:i + 2], 16) for i in (1, 3, 5))


def shade(beta: float) -> str:
    """β in [0, 1] as a lightness of one blue: white at 0, Okabe-Ito blue at 1 (a CSS colour)."""
    b = min(1.0, max(0.0, float(beta)))
    r, g, bl = (round(255 + (c - 255) * b) for c in _BLUE)
    return f"rgb({r},{g},{bl})"


def _cell(gen: Generation, round_index: int, k: int, pos) -> str:
    token = token_label(gen, pos.draft_token)
    said = f"round {round_index + 1}, draft {k + 1} ({token}, {pos.status.value}): β = {pos.beta:.3f}"
    hatch = ";background-image:repeating-linear-gradient(45deg,transparent 0 2px,rgba(0,0,0,.55) 2px 3px)" \
        if pos.beta < LOW else ""
    return (f'<span class="beta-cell" role="button" tabindex="0" data-round="{round_index}" data-position="{k}" '
            f'data-beta="{pos.beta:.6f}" aria-label="{html.escape(said, quote=True)}" '
            f'title="{html.escape(said, quote=True)}" style="background-color:{shade(pos.beta)}{hatch}"></span>')


def strip_html(gen: Generation | None) -> str:
    """The strip and its key; empty when the run drafted nothing (an autoregressive trace)."""
    if gen is None or not gen.settings.speculative:
        return ""
    cells = [_cell(gen, r.index, k, pos) for r in gen.rounds for k, pos in enumerate(r.positions)]
    if not cells:
        return ""
    key = (f'<span class="beta-key">β strip: one cell per drafted position, darker where the draft agrees with '
           f'the target (β = Σ min(p, q), from <span class="beta-swatch" style="background-color:{shade(0)}">'
           f'</span> 0 to <span class="beta-swatch" style="background-color:{shade(1)}"></span> 1; hatched '
           f'under {LOW}). Click a cell, or Tab to it and press Enter, to open its round.</span>')
    return f'<div class="beta-strip" aria-label="β at every drafted position">{key}<div>{"".join(cells)}</div></div>'
