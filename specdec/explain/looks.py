"""How the run looks, in one table: every outcome's label, symbol, colour, marker, CSS and
terminal colour, the colour-blind palette, and how tokens and the tail are named on screen.

The trace holds data only; the renderers (the CLI's text, the app's HTML and figures, the bench's
chart) read their looks here, so the CLI and the app show the same symbols in the same colours.
Colour is never the only cue: every outcome also has a symbol, a marker shape or a line style.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..trace.outcomes import Ending, Outcome, Status

# Okabe & Ito (2008), "Color Universal Design": a palette that colour-blind readers can tell apart.
PALETTE = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
           "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999",
           "black": "#000000"}


@dataclass(frozen=True)
class Look:
    """How one outcome is shown everywhere: colour is never the only cue (symbol, line, marker)."""

    label: str     # what the legend says
    symbol: str    # the mark after the token, in the app and in the terminal
    colour: str    # a PALETTE colour
    marker: str    # Plotly marker symbol (timeline)
    css: str       # the token's style in the app's text
    ansi: str      # SGR code for the terminal


LOOKS: dict[Outcome, Look] = {
    Status.ACCEPTED: Look("accepted draft", "✓", PALETTE["green"], "square",
                          "background:#009E7326;border-bottom:2px solid #009E73;", "32"),
    Status.REJECTED: Look("rejected draft (struck through)", "✗", PALETTE["vermillion"], "x",
                          "color:#D55E00;text-decoration:line-through;text-decoration-thickness:2px;opacity:.85;",
                          "31;9"),
    Status.UNUSED: Look("unused draft (after a rejection)", "·", PALETTE["grey"], "square-open",
                        "color:#777;", "90"),
    Ending.RESIDUAL: Look("resampled from the residual", "↺", PALETTE["blue"], "circle",
                          "background:#0072B226;border:1px dashed #0072B2;border-radius:3px;", "34"),
    Ending.BIASED_P: Look("sampled from p (adjustment skipped: biased)", "⚠", PALETTE["purple"], "triangle-up",
                          "background:#CC79A740;border-bottom:3px double #CC79A7;", "35"),
    Ending.GREEDY: Look("argmax of p (greedy match)", "=", PALETTE["yellow"], "diamond",
                        "background:#F0E44260;border-bottom:2px dotted #000;", "33"),
    Ending.BONUS: Look("bonus token (all drafts accepted)", "★", PALETTE["orange"], "star",
                       "background:#E69F0033;border-bottom:2px dotted #E69F00;", "36"),
    Ending.PLAIN: Look("plain target step (nothing drafted)", "○", PALETTE["sky"], "circle-open",
                       "background:#56B4E926;border-bottom:1px solid #56B4E9;", "94"),
}

# The rest of the vocabulary at a position, as stored: two parts split by the sign of p - q (or, in
# a schema-1 trace, one lumped part).
TAIL_LABELS = ("rest where p ≥ q", "rest where p < q")
LUMPED_TAIL = "everything else"


def tail_labels(d) -> tuple[str, ...]:
    """The names of a stored distribution's tail parts (`trace.Dist.buckets`)."""
    return TAIL_LABELS if d.split is not None else (LUMPED_TAIL,)


def visible_token(text: str) -> str:
    """A token's text with spaces, newlines and tabs made visible (for labels and tables)."""
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return shown or "∅"


# The end-of-sequence token, written one way wherever a run's output or its numbers name it (the
# text, the charts, the tables, the status line, the terminal): it was ⟨eos⟩ in a chart, "(eos)" in
# the status line and SmolLM2's own <|im_end|> in the text. A prompt shown as the model
# reads it (its chat template) keeps the tokenizer's own text: that is what the model reads.
EOS = "⟨eos⟩"


def token_text(gen, token_id: int) -> str:
    """A generated token's text as the run's output shows it: its own text, EOS as `EOS`."""
    return EOS if token_id == gen.eos_token_id else gen.token(token_id)


def stop_text(stopped: str) -> str:
    """Why a run stopped, in words: "eos" as `EOS`, "max_new_tokens" as "max new tokens"."""
    return EOS if stopped == "eos" else stopped.replace("_", " ")


# Tokens of one thin mark, which a chart's tick label draws as a speck: named beside the mark.
THIN_MARKS = {".": "period", ",": "comma", ":": "colon", ";": "semicolon", "'": "apostrophe",
              "`": "backtick", '"': "quote", "-": "hyphen", "_": "underscore", "|": "bar", "!": "exclamation"}


def with_thin_mark_named(label: str) -> str:
    """A token's label with its name beside it when it is one thin mark (". period", "␣, comma")."""
    name = THIN_MARKS.get(label.lstrip("␣"))
    return f"{label} {name}" if name else label


def token_label(gen, token_id: int) -> str:
    """A token of a `trace.Generation` as charts and tables name it: whitespace made visible,
    EOS as `EOS`."""
    if token_id == gen.eos_token_id:
        return EOS
    return visible_token(gen.token(token_id))


def text_with_eos(gen) -> str:
    """A run's decoded text (an autoregressive run's, shown whole) with its end-of-sequence token
    written as everywhere else (`EOS`), not as the tokenizer's own text (SmolLM2's <|im_end|>)."""
    ids, text = gen.token_ids, gen.text
    if ids and ids[-1] == gen.eos_token_id and text.endswith(gen.token(ids[-1])):
        return text[:len(text) - len(gen.token(ids[-1]))] + EOS
    return text


# ---------------------------------------------------------------- numbers, one way

def prob_text(x: float) -> str:
    """A probability in a sentence: four decimals, or three significant digits where four decimals
    would print a positive value as 0 (6.29e-08, never 0.0000)."""
    return f"{x:.4f}" if x == 0 or x >= 5e-5 else f"{x:.3g}"


def table_number(x: float | None) -> float | None:
    """A probability as every table on the page holds it: six decimals, as tables always showed
    (the browser writes 1.88e-06 as 0.00000188, and such numbers or 0.0000679766 broke over two
    lines in the tables' columns at 800 and 1400 px), except where six decimals would print a
    positive value as 0: there the charts' three significant digits, so a chart's 6.29e-08 is
    6.29e-08 in its table, never 0. None stays None."""
    if x is None:
        return None
    return round(x, 6) if abs(x) >= 5e-7 else float(f"{x:.3g}")
