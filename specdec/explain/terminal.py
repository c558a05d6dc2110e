"""How a run looks in a terminal: the generated text with every token marked by its fate (the
app's symbols and Okabe-Ito colours as ANSI codes), the legend, and the run's numbers in lines.

Pure functions of a `Generation`; whether to use colour is the caller's choice (the CLI reads
NO_COLOR and the terminal; the library reads no environment variable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..trace.spine import Generation

RESET = "\033[0m"
STRIKE = "\u0336"   # a combining long stroke: struck-through text that needs no colour



def mark(outcome, text: str, colour: bool) -> str:
    """One piece of text followed by its outcome's symbol (the app's symbols), in its colour if asked.
    A rejected draft is not part of the text: in colour the terminal strikes it through (its ANSI
    code), without colour every character carries a combining stroke, whitespace made visible."""
    from ..trace.outcomes import Status
    from .looks import LOOKS, visible_token

    look = LOOKS[outcome]
    body = text.rstrip("\n")
    breaks = text[len(body):]   # a newline token's mark ends its own line, not the next one's start
    if outcome == Status.REJECTED:   # not part of the text: its newline breaks no line, shown as ↵
        body, breaks = text.replace("\n", "↵"), ""
    if colour:
        return f"\033[{look.ansi}m{body}{look.symbol}{RESET}{breaks}"
    if outcome == Status.REJECTED and text:   # (the legend marks no text)
        return "".join(ch + STRIKE for ch in visible_token(text)) + look.symbol
    return f"{body}{look.symbol}{breaks}"


def render_tokens(gen: Generation, colour: bool) -> str:
    """The generated text with every token marked: accepted drafts, rejected drafts (where they
    were proposed), and how each round's last token was produced."""
    from ..trace.outcomes import events
    from .looks import token_text

    return "".join(mark(ev.outcome, token_text(gen, ev.token), colour) for ev in events(gen) if ev.in_text)


def legend(gen: Generation, colour: bool) -> str:
    """What the marks in this run's text mean, in the order of LOOKS."""
    from ..trace.outcomes import events
    from .looks import LOOKS

    shown = {ev.outcome for ev in events(gen) if ev.in_text}
    items = [f"{mark(outcome, '', colour)} {look.label}" for outcome, look in LOOKS.items() if outcome in shown]
    return "legend: " + " | ".join(items)


def describe_device(pair, threads: int | None = None) -> str:
    """Device, weights, engine (and torch threads, where given) in words; half precision says whether
    a verify's rows equal the one-token steps' (checked at load) or what it gives up."""
    d = pair.describe()
    count = f", {threads} torch thread{'s' if threads > 1 else ''}" if threads else ""
    text = f"{d['device']}, {d['dtype']}, {d['engine']} engine{count}"
    if d.get("rows_equal"):
        text += " — batch-invariant: a verify's rows equal one-token steps' (checked at load)"
    elif d["dtype"] != "float32":
        text += (" — half precision: a verify pass and a one-token step can round differently, so the output is "
                 "exact with respect to the verify pass's p, not token for token the target alone's")
    return text


def stats_lines(gen: Generation) -> list[str]:
    from .looks import stop_text
    from .speed import expected_tokens_per_round

    s = gen.stats
    gamma = gen.settings.gamma
    return [
        f"tokens {s.new_tokens} in {s.rounds} rounds, stopped at {stop_text(s.stopped)}",
        f"acceptance rate alpha = accepted/tested = {s.accepted}/{s.tested} = {s.acceptance_rate:.3f}"
        f"   (draft yield = accepted/drafted = {s.accepted}/{s.drafted} = {s.accepted_per_drafted:.3f};"
        f" expected, mean beta = {s.expected_acceptance:.3f})",
        f"tokens per target forward = {s.tokens_per_target_forward:.2f}"
        f"   ((1 - alpha^(gamma+1)) / (1 - alpha) = {expected_tokens_per_round(s.acceptance_rate, gamma):.2f})",
        f"forward passes: target {s.target_forwards}, draft {s.draft_forwards}",
        f"time {s.wall_seconds:.3f} s (drafting {s.draft_seconds:.3f} s, verifying {s.verify_seconds:.3f} s)",
    ]


def run_text(gen: Generation, prompt: str, colour: bool) -> str:
    """The whole of a run for a terminal: the legend, the prompt and the marked output, the numbers."""
    return "\n".join([legend(gen, colour), "", prompt + render_tokens(gen, colour), "", *stats_lines(gen)])


def comparison_line(spec: Generation, alone: Generation) -> str:
    """A speculative run against the target alone, both timed warm (`measure.compare_with_target`)."""
    from .speed import speedup, tokens_in

    return (f"timed again, both warmed up, in the order speculative, alone, alone, speculative (mean of two each): "
            f"speculative {tokens_in(spec.stats, 3)}; target alone {tokens_in(alone.stats, 3)} "
            f"({alone.stats.target_forwards} target forwards); speedup in tokens per second "
            f"x{speedup(spec.stats, alone.stats):.2f}")
