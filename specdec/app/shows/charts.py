"""Pure figure and text builders: a `Generation` trace in, a Plotly figure / HTML / table out.

Nothing here holds state, runs a model or recomputes model outputs: every number shown is read
from the trace (see `specdec.trace.spine`). Colours follow the Okabe-Ito palette (colour-blind safe)
and every outcome also has a second cue (a symbol, a line style or a marker shape), so colour is
never the only signal. All token text is HTML-escaped before it reaches HTML or Plotly labels.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ...explain.gamma import run_gamma_sentence
from ...explain.looks import LOOKS, PALETTE, text_with_eos, token_label, token_text, visible_token, with_thin_mark_named
from ...explain.speed import (
    depth_story,
    expected_tokens_per_round,
    explain,
    lengths_differ,
    predicted_at,
    retimed_words,
    run_point,
    time_split,
    tokens_in,
)
from ...trace.outcomes import Ending, Status, events
from ...trace.spine import Generation
from .beta_strip import strip_html
from .where import where_note, where_ran

HIGHLIGHT = PALETTE["black"]
FADED = "rgba(153,153,153,0.35)"
P_COLOUR, Q_COLOUR = PALETTE["blue"], PALETTE["orange"]


def plotly_text(text: str) -> str:
    """Text for a Plotly label. Plotly reads <tags> and only a few entities (&amp; &lt; &gt;, not
    &quot;), so escape exactly those three: quotes stay quotes."""
    return html.escape(text, quote=False)


def show_token(gen: Generation, token_id: int) -> str:
    """A token as a Plotly label: whitespace and EOS shown, a thin mark named (". period"), escaped."""
    return plotly_text(with_thin_mark_named(token_label(gen, token_id)))


def unique_labels(gen: Generation, ids: list[int]) -> list[str]:
    """Unique escaped labels for ids (two ids can decode to the same text)."""
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        label = show_token(gen, i)
        if label in seen:
            label = f"{label} #{i}"
        seen[label] = i
        out.append(label)
    return out


def sig3(x: float) -> str:
    """Three significant digits: small probabilities stay readable."""
    return f"{x:.3g}"


def fixed(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


# ---------------------------------------------------------------- generated text (HTML)

def _span(outcome, text: str, title: str, round_index: int | None) -> str:
    """One token, marked by its fate. A newline is shown as ↵ where it is, and a token that ends a
    line keeps its mark on that line (the line break comes after the mark, not before it). A
    rejected draft is not part of the text: its ↵ breaks no line."""
    look = LOOKS[outcome]
    where = f' data-round="{round_index}"' if round_index is not None else ""
    body = text.rstrip("\n") if outcome != Status.REJECTED else text.replace("\n", "↵")
    breaks = len(text) - len(body) if outcome != Status.REJECTED else 0
    shown = html.escape(body).replace("\n", "↵\n") + "↵" * breaks
    return (f'<span class="tok tok-{outcome.value}" data-kind="{outcome.value}"{where} '
            f'title="{html.escape(title, quote=True)}" style="{look.css}">{shown}'
            f'<sup aria-hidden="true" style="font-size:.8em;color:#222;margin-left:1px">{look.symbol}</sup></span>'
            + "\n" * breaks)


LEGEND = (Status.ACCEPTED, Status.REJECTED, Ending.RESIDUAL, Ending.BIASED_P, Ending.BONUS, Ending.PLAIN)


def legend_html(outcomes=LEGEND) -> str:
    items = [f'<span style="white-space:nowrap">{_span(o, "tok", LOOKS[o].label, None)} '
             f'{html.escape(LOOKS[o].label)}</span>' for o in outcomes]
    return ('<div class="legend" style="font-size:.85em;margin-bottom:.5em;display:flex;flex-wrap:wrap;'
            'gap:.3em 1.2em">' + "".join(items) + "</div>")


def event_title(gen: Generation, ev) -> str:
    """What a token's tooltip (and the timeline's hover) says about it, read from the trace."""
    r = gen.rounds[ev.round]
    if ev.position is None:
        prob = r.end_dist.prob(ev.token)
        return f"round {ev.round + 1}, last token: {LOOKS[ev.outcome].label} (probability {fixed(prob, 4)})"
    pos = r.positions[ev.position]
    test = {Status.ACCEPTED: "<", Status.REJECTED: "≥", Status.UNUSED: "(not tested)"}[pos.status]
    return (f"round {ev.round + 1}, draft {ev.position + 1}: {pos.status.value} "
            f"(p={pos.p_draft:.4f}, q={pos.q_draft:.4f}, u={pos.u:.4f} {test} min(1, p/q)={min(1.0, pos.ratio):.4f})")


def text_html(gen: Generation | None, selected_round: int | None = None, strip: bool = True) -> str:
    """The prompt, then every generated token marked by its fate; rejected drafts struck through
    where they were proposed, under the β strip (`beta_strip`, unless `strip` is False). Every
    piece of text is escaped."""
    if gen is None:
        return '<div class="specdec-text" style="color:#666">Run a generation, or import a trace, to see it here.</div>'
    parts = [f'<span class="prompt" style="color:#555">{html.escape(gen.prompt)}</span>']
    if not gen.settings.speculative:   # an autoregressive trace has no rounds
        parts.append(html.escape(text_with_eos(gen)))
    chunks: dict[int, list[str]] = {}
    for ev in events(gen):
        if ev.in_text:
            span = _span(ev.outcome, token_text(gen, ev.token), event_title(gen, ev), ev.round)
            chunks.setdefault(ev.round, []).append(span)
    for r, chunk in chunks.items():
        # a box-shadow (not an outline) so that a round broken over lines gets a plain box on each line
        outline = "box-shadow:0 0 0 2px #000;border-radius:2px;" if r == selected_round else ""
        parts.append(f'<span class="round" data-round="{r}" style="{outline}">{"".join(chunk)}</span>')
    body = "".join(parts)
    return (legend_html() + (strip_html(gen) if strip else "") +
            '<div class="specdec-text" style="white-space:pre-wrap;line-height:1.9;'
            f'font-family:ui-monospace,monospace;font-size:0.95em">{body}</div>')


def md_text(text: str) -> str:
    """User text (a title, a note) inside Markdown: HTML-escaped, Markdown's own marks defused."""
    out = html.escape(text, quote=False)   # quotes are plain text in Markdown (an entity's # would be escaped)
    for mark in "\\`*_[]#|<>!~":
        out = out.replace(mark, "\\" + mark)
    return out


def run_summary(gen: Generation) -> str:
    """One line of a run's numbers, for the side-by-side view."""
    s = gen.stats
    if not gen.settings.speculative:
        return f"the target alone: {tokens_in(s)}, {s.target_forwards} target forwards"
    rule = "adjustment skipped (biased)" if gen.settings.skip_adjustment else "exact rule"
    bias = f"{s.skip_tv_mean:.4f}" if gen.settings.skip_adjustment else "0 (closed form)"
    return (f"{rule}: α = {s.acceptance_rate:.3f}, mean β = {s.expected_acceptance:.3f}, "
            f"{s.tokens_per_target_forward:.2f} tokens per target forward, mean TV to p = {bias}, "
            f"{tokens_in(s)}")


def side_by_side_html(gen: Generation | None, other: Generation | None, label: str) -> str:
    """This run above the same prompt, seed and settings re-run with `label` (the other rule, or
    the target alone), each with its token fates and its numbers."""
    if gen is None or other is None:
        return ('<div class="side-by-side" style="color:#666">Re-run this prompt and seed with the other rule or '
                "with the target alone to compare the two texts here.</div>")
    same = 0
    for a, b in zip(gen.token_ids, other.token_ids):
        if a != b:
            break
        same += 1
    blocks = []
    for head, g in (("This run", gen), (f"The same prompt, seed and settings with {label}", other)):
        blocks.append(f'<div class="side-run" style="margin-bottom:1em"><div style="font-weight:600">'
                      f"{html.escape(head)}: {html.escape(run_summary(g))}</div>{text_html(g, strip=False)}</div>")
    return (f'<div class="side-by-side"><p>{html.escape(agreement(gen, other, same))}</p>{"".join(blocks)}</div>')


def agreement(gen: Generation, other: Generation, same: int) -> str:
    """How far the two texts agree, and why, in words that fit what happened: all the way (at
    temperature 0 every run takes p's argmax), or up to where they part."""
    n = min(len(gen.token_ids), len(other.token_ids))
    times = " (This run was streamed to the page and the re-run was not, so their times do not compare.)"
    if same < n:
        why = ("Same seed and the same draws up to the first rejection; from there the two rules draw the round's "
               "last token from different distributions." if other.settings.speculative else
               "The target alone spends the seed's random draws one per token, the speculative run spends them on "
               "drafts and tests too, so the texts part early: both follow p, not the same sequence.")
        return f"The two texts agree on their first {same} generated tokens, then part. {why}{times}"
    whole = "all {n} generated tokens" if len(gen.token_ids) == len(other.token_ids) else \
        "the first {n} generated tokens (all of the shorter text)"
    if gen.settings.sampling.greedy:
        why = ("At temperature 0 every token is the argmax of p, however it is reached, so both runs give the "
               "target's greedy text: speculative decoding changes the speed, not the text.")
    elif other.settings.speculative:
        why = "No rejection in this stretch drew the round's last token differently, so both rules drew the same."
    else:
        why = "The two runs spend the seed's draws differently, yet drew the same tokens here."
    return f"The two texts agree on {whole.format(n=n)}. {why}{times}"


# ---------------------------------------------------------------- the timeline

def timeline_figure(gen: Generation | None, selected: int | None = None) -> go.Figure:
    """One column per round, one cell per drafted position (rows 1..γ), the round's last token in
    the top row. One trace per outcome; customdata = [round, position (or -1 for the end token)]."""
    fig = go.Figure()
    if gen is None or not gen.rounds:
        return empty_figure(fig, "No run yet", height=260)
    top = max([len(r.positions) for r in gen.rounds] + [gen.settings.gamma]) + 1
    cells: dict = {o: {"x": [], "y": [], "text": [], "custom": []} for o in LOOKS}
    for ev in events(gen):
        c = cells[ev.outcome]
        c["x"].append(ev.round + 1)
        c["y"].append(top if ev.position is None else ev.position + 1)
        c["custom"].append([ev.round, -1 if ev.position is None else ev.position])
        c["text"].append(f"<b>{show_token(gen, ev.token)}</b><br>" + plotly_text(event_title(gen, ev)))
    for outcome, c in cells.items():
        if not c["x"]:
            continue
        look = LOOKS[outcome]
        fig.add_trace(go.Scatter(
            x=c["x"], y=c["y"], mode="markers", name=look.label, customdata=c["custom"],
            hovertext=c["text"], hoverinfo="text", meta=outcome.value,
            marker=dict(symbol=look.marker, size=15, color=look.colour, line=dict(width=1.5, color=look.colour))))
    n = len(gen.rounds)
    shapes = ([dict(type="rect", x0=selected + 0.5, x1=selected + 1.5, y0=0.4, y1=top + 0.6,
                    line=dict(color=HIGHLIGHT, width=2), fillcolor="rgba(0,0,0,0.06)")]
              if selected is not None and 0 <= selected < n else [])
    # The left margin is the width of the "draft k" labels (70 px measured), so that Plotly's
    # automargin draws the timeline once, not a second time with the margin it found it needs.
    return relaid(fig, dict(shapes=shapes) if shapes else {}, dict(
        height=330, margin=dict(l=72, r=10, t=40, b=100), clickmode="event",
        title=dict(text=f"Timeline: {n} rounds, {gen.stats.new_tokens} tokens", font=dict(size=14)),
        legend=legend_below(330, 40, 100, 58),
        xaxis=dict(title="round", range=[0.4, max(n, 1) + 0.6], dtick=1 if n <= 40 else None),
        yaxis=dict(title="", tickmode="array", tickvals=list(range(1, top + 1)),
                   ticktext=[f"draft {i}" for i in range(1, top)] + ["end"], range=[0.4, top + 0.6])))


TIMELINE_HEADERS = ["round", "drafted", "accepted", "drafts", "ended by", "end token",
                    "emitted text", "drafting (s)", "verifying (s)"]
TIMELINE_WIDTHS = ["7%", "9%", "10%", "12%", "13%", "14%", "13%", "10%", "12%"]   # a 12-letter token whole at 800 px


def timeline_rows(gen: Generation | None) -> list[list]:
    """The timeline as a table: one row per round, each draft shown with its outcome's symbol."""
    if gen is None:
        return []
    drafts: dict[int, list[str]] = {}
    for ev in events(gen):
        if ev.position is not None:
            drafts.setdefault(ev.round, []).append(LOOKS[ev.outcome].symbol + token_label(gen, ev.token))
    return [[r.index + 1, len(r.positions), r.n_accepted, breakable(" ".join(drafts.get(r.index, []))),
             f"{LOOKS[r.ending].symbol} {LOOKS[r.ending].label}", breakable(token_label(gen, r.end_token)),
             breakable(visible_token("".join(token_text(gen, t) for t in r.emitted))), round(r.draft_seconds, 4),
             round(r.verify_seconds, 4)]
            for r in gen.rounds]


ZERO_WIDTH_SPACE = "\u200b"


def breakable(shown: str) -> str:
    """A text with its spaces shown as marks (␣ ↵ ⇥), breakable after each mark as after a space: a
    round's text has no real space left, and a narrow column broke it inside a word ("d/ru"; a
    draft "✗␣translated" at 800 px)."""
    for mark in "␣↵⇥":
        shown = shown.replace(mark, mark + ZERO_WIDTH_SPACE)
    return shown



def legend_below(height: int, top: int, bottom: int, gap: int) -> dict:
    """A horizontal legend whose top sits `gap` pixels under the plot area (under the tick labels
    and the axis title, which need about 50 px), for a figure of this height and margins."""
    return dict(orientation="h", x=0, xanchor="left", y=-gap / (height - top - bottom), yanchor="top",
                font=dict(size=11))


def empty_figure(fig: go.Figure, message: str, height: int = 320) -> go.Figure:
    return relaid(fig, dict(height=height, margin=dict(l=20, r=20, t=40, b=20),
                            xaxis=dict(visible=False), yaxis=dict(visible=False),
                            annotations=[dict(text=html.escape(message), showarrow=False, x=0.5, y=0.5,
                                              xref="paper", yref="paper", font=dict(size=14))]))


def relaid(fig: go.Figure, *updates: dict) -> go.Figure:
    """`fig.update_layout(update)` for each update in turn, done as one assignment of the merged
    layout (nested dicts merged key by key, anything else replaced, as update_layout merges plain
    dicts). On a built figure, each of Plotly's update_layout, update_xaxes and add_annotation runs
    its relayout bookkeeping: about 13 of the 15 ms an update_layout took on this project's CPU,
    where assigning a whole layout takes 3 (measured); a step view made a dozen such calls. The
    figure's template is left out of the copy: set again from a dict it is validated in full (50 ms,
    profiled), where the assignment puts the default template back without validating it."""
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)
    fig.layout = merged_layout(layout, *updates)
    return fig


def merged_layout(base: dict, *updates: dict) -> dict:
    """`base` with each update merged in turn, as `relaid` merges them (for a figure built with
    its whole layout at once, which is cheaper still)."""
    for update in updates:
        base = _merged(base, update)
    return base


def _merged(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
    return out



# ---------------------------------------------------------------- run metrics

def alpha_noise(gen: Generation) -> float:
    """Standard deviation of alpha around mean beta on this run: each tested draft passes with its
    own probability beta_i, so alpha - mean(beta) has sd sqrt(sum beta_i (1 - beta_i)) / n."""
    betas = [pos.beta for r in gen.rounds for pos in r.positions if pos.status is not Status.UNUSED]
    return (sum(b * (1 - b) for b in betas) ** 0.5) / len(betas) if betas else 0.0


def noise_verdict(gap: float, sigma: float, tested: int) -> str:
    """α − mean β against its noise, worded to match what a band can claim: about 1 run in 20
    lands outside ±2σ by chance (so one such run is no finding), 1 in 370 outside ±3σ."""
    band = f"σ = {sigma:.3f} from {tested} tests"
    if sigma < 1e-9 and abs(gap) < 1e-9:
        return ("no noise to weigh it against: every tested position had β = 0 or 1 (at T = 0, p and q are one-hot), "
                "so each draft's fate was certain and α equals mean β exactly.")
    if abs(gap) <= 2 * sigma:
        return f"within ±2σ = {2 * sigma:.3f} ({band}): the draws' noise."
    if abs(gap) <= 3 * sigma:
        return (f"outside ±2σ = {2 * sigma:.3f} but within ±3σ = {3 * sigma:.3f} ({band}). About 1 run in 20 "
                "lands outside ±2σ by chance, so one run like this is no finding: try other seeds.")
    return (f"outside ±3σ = {3 * sigma:.3f} ({band}): chance gives this about 1 run in 370, "
            "so it is worth a look (other seeds, a longer run).")


def _bias_cell(gen: Generation) -> str:
    s = gen.stats
    over = f"mean over this run's {s.tested} tested positions"
    if gen.settings.skip_adjustment:
        return (f"**{s.skip_tv_mean:.4f}**, biased: the adjustment was skipped ({over}; an exact run of the same "
                "seed takes other paths, so its “had it been skipped” figure differs)")
    return (f"0: the exact rule's output follows p (closed form). Had the adjustment been skipped: mean TV "
            f"{s.skip_tv_mean:.4f} ({over}; a run with the adjustment skipped takes other paths, so its own "
            "mean differs)")


def wall_parts(stats) -> str:
    """The wall time's three parts in words: they add up to it (`speed.time_split`)."""
    split = time_split(stats)
    return (f"drafting {split.drafting:.2f} s + target and verify {split.target:.2f} s + everything else "
            f"(sampling the output, bookkeeping, the trace) {split.other:.2f} s")


def _wall_cell(gen: Generation, timed: Generation | None) -> str:
    s = gen.stats
    parts = wall_parts(s)
    if timed is None:
        return f"{s.wall_seconds:.2f} s ({parts})"
    return (f"{s.wall_seconds:.2f} s while streaming to this page ({parts}, drawing the page included); "
            f"**{timed.stats.wall_seconds:.2f} s** timed again unstreamed ({wall_parts(timed.stats)}), which the "
            f"speedup and the chart below use. {retimed_words(s, timed.stats)}").rstrip()


def _repeats_cell(speedups: tuple[float, ...]) -> str:
    """The repeats' own speedups and their spread, beside the pooled one (empty for one pair of runs)."""
    if len(speedups) < 2:
        return " (one run each)"
    each, low, high = ", ".join(f"{x:.2f}×" for x in speedups), min(speedups), max(speedups)
    said = ("every repeat slower than the target alone: a loss" if high < 1 else
            "every repeat faster than the target alone: a win" if low > 1 else "a difference inside it is noise")
    return f", pooled over {len(speedups)} interleaved repeats, which gave {each}: spread {low:.2f}–{high:.2f}×, {said}"


def _comparison_rows(gen: Generation, ar: Generation, timed: Generation | None,
                     speedups: tuple[float, ...] = ()) -> list[str]:
    t, gamma = (timed or gen).stats, gen.settings.gamma
    story = explain(t, ar.stats, gamma, speedups)
    from_beta = predicted_at(t, ar.stats, t.expected_acceptance, gamma)
    whole = run_point(t, gamma, ar.stats).whole_loop
    costs = (f"target step {whole.target_step_ms:.2f} ms, c = {whole.c:.3f}, v = {whole.verify(gamma):.2f}"
             if whole is not None else "")
    mean = " (mean of the repeats)" if len(speedups) > 1 else ""
    # Drawing the page as the reason, only where the streamed run was the slower one.
    why = ("both sides" if retimed_words(gen.stats, t) else
           "the streamed run shares the CPU with drawing the page, so both sides")
    return [
        f"| timed again, unstreamed (same seed, same tokens) | {tokens_in(t)}{mean} | "
        f"{why} of the speedup are timed again, interleaved, the same way |",
        f"| autoregressive run (same settings) | {tokens_in(ar.stats)}{mean}, {ar.stats.target_forwards} target "
        f"forwards | {lengths_differ(gen.token_ids, gen.stats.stopped, ar.token_ids, ar.stats.stopped)} |",
        f"| speedup over the target alone (tokens per second) | measured speedup "
        f"**{story.measured:.2f}×**{_repeats_cell(speedups)} | "
        f"predicted from this run's costs (its whole loop: {costs}) and α: "
        f"**{story.predicted:.2f}×** (the speed explorer's *this run (whole loop)* curve); from the forwards alone: "
        f"{story.predicted_forwards:.2f}× (*this run (forwards only)*); from mean β: {from_beta:.2f}× (known before "
        "any u is drawn) |",
        "", story.sentence + " " + run_gamma_sentence(t.acceptance_rate, gamma, gen.settings.drafter, gen.models,
                                                  gen.settings.sampling.temperature),
        "", depth_story(t, ar.stats, gen.models)]


def _why_tokens_differ(gen: Generation) -> str:
    """Why the measured tokens per forward need not equal the formula's, in this run's numbers."""
    words = short_rounds(gen)
    cut = f"{words} and " if words else ""
    return (f"Measured and predicted differ because {cut}the formula gives every position one rate r, while "
            "each of this run's positions has its own β (certain and doubtful positions do not average to one r).")


def short_rounds(gen: Generation) -> str:
    """How many rounds drafted fewer than γ, and why, each named by its cause: the run's end (a round
    never drafts past max new tokens) or the drafter, which proposed fewer (n-gram: no match that
    long in the context); '' when none did."""
    gamma, most = gen.settings.gamma, gen.settings.max_new_tokens
    short = [r for r in gen.rounds if r.gamma < gamma]
    if not short:
        return ""
    at_end = sum(1 for r in short if r.gamma == max(0, min(gamma, most - r.start - 1)))
    causes = [f"{at_end} at the end of the run (none drafts past max new tokens)" if at_end else "",
              f"{len(short) - at_end} because the drafter proposed fewer" if len(short) > at_end else ""]
    return f"{len(short)} of its {len(gen.rounds)} rounds drafted fewer than γ — {', '.join(c for c in causes if c)} —"


def metrics_markdown(gen: Generation | None, ar: Generation | None = None, running: bool = False,
                     timed: Generation | None = None, speedups: tuple[float, ...] = ()) -> str:
    """The run's numbers, each named once with a line that says what it answers."""
    if gen is None:
        return "_No run yet._"
    s = gen.stats
    gamma = gen.settings.gamma
    from_alpha = expected_tokens_per_round(s.acceptance_rate, gamma)
    from_beta = expected_tokens_per_round(s.expected_acceptance, gamma)
    gap = s.acceptance_rate - s.expected_acceptance
    lines = [
        "| number | this run | what it answers |", "|---|---|---|",
        f"| **acceptance rate α** | **{s.acceptance_rate:.3f}** ({s.accepted} of {s.tested} tested drafts) | "
        "How often did a tested draft pass u < p(x)/q(x)? Known only once the u are drawn. |",
        f"| **expected acceptance, mean β** | **{s.expected_acceptance:.3f}** | How often should it pass? "
        "β = Σ min(p, q) is each position's chance before its draft is drawn from q (a drafted token x's own "
        "chance, min(1, p(x)/q(x)), is known once x is drawn), averaged over the tested positions: both known "
        "before any u is drawn, β alone before drafting. "
        f"α − mean β = {gap:+.3f}, {noise_verdict(gap, alpha_noise(gen), s.tested)} |",
        f"| draft yield | {s.accepted_per_drafted:.3f} ({s.accepted} of {s.drafted} drafted) | How many drafts "
        "ended in the text? Drafts after a rejection are never tested, so this is not α (α counts tested drafts). |",
        f"| tokens per target forward | **{s.tokens_per_target_forward:.2f}** | How many tokens did one target forward "
        f"give? If every position had one rate (γ = {gamma}), (1 − r^(γ+1)) / (1 − r) predicts {from_alpha:.2f} "
        f"from r = α (what this run's draws gave) and {from_beta:.2f} from r = mean β (what p and q promise, "
        f"before any u is drawn). {_why_tokens_differ(gen)} |",
        f"| forward passes | target **{s.target_forwards}**, draft **{s.draft_forwards}** | Autoregressive decoding "
        f"would need {s.new_tokens} target forwards. |",
        f"| bias (mean TV to p per tested position) | {_bias_cell(gen)} | Does the output follow p? |",
        f"| tokens / rounds | {s.new_tokens} / {s.rounds} | |",
        f"| wall time | {_wall_cell(gen, timed if ar is not None else None)} | |",
        f"| where it ran | {where_ran(gen.models)} | {where_note(gen.models)} |",
    ]
    if ar is not None:
        lines += _comparison_rows(gen, ar, timed, speedups)
    head = "**Running…** " if running else ""
    if gen.settings.skip_adjustment:
        head += "⚠ **Residual adjustment skipped: this run is biased** (its output does not follow p). "
    return head + "\n" + "\n".join(lines)


# ---------------------------------------------------------------- where the time went

TIME_PARTS = (("drafting", "draft forwards (and drafting)", PALETTE["orange"], "/"),
              ("target", "target forwards (verify)", PALETTE["blue"], ""),
              ("other", "everything else (sampling, bookkeeping, trace)", PALETTE["grey"], "."))


def time_figure(gen: Generation | None, ar: Generation | None) -> go.Figure:
    """Where the time went: one stacked bar per run (speculative, autoregressive), milliseconds per
    generated token, split into drafting, target forwards and everything else."""
    fig = go.Figure()
    if gen is None or ar is None:
        return empty_figure(fig, "Tick “compare with autoregressive” and Run to see where the time went", height=220)
    runs = [("speculative", gen.stats), ("autoregressive", ar.stats)]
    splits = [(name, time_split(st), max(st.new_tokens, 1)) for name, st in runs]
    for key, label, colour, shape in TIME_PARTS:
        values = [1000 * getattr(split, key) / n for _, split, n in splits]
        fig.add_trace(go.Bar(y=[name for name, _, _ in splits], x=values, name=label, orientation="h",
                             marker=dict(color=colour, pattern=dict(shape=shape, fgopacity=0.25)), meta=key,
                             text=[f"{v:.2f}" for v in values], textposition="inside", textangle=0,
                             hovertemplate="%{y}: " + label + " %{x:.3f} ms per token<extra></extra>"))
    story = explain(gen.stats, ar.stats, gen.settings.gamma)
    return relaid(fig, dict(
        # Labels level, at one size; a part too narrow shows none (hover and metrics table say it).
        barmode="stack", height=270, margin=dict(l=110, r=20, t=50, b=100), uniformtext=dict(mode="hide", minsize=11),
        title=dict(text=f"Where the time went (ms per token): measured speedup {story.measured:.2f}×, "
                        f"predicted {story.predicted:.2f}×", font=dict(size=13)),
        xaxis=dict(title="milliseconds per generated token"), yaxis=dict(autorange="reversed"),
        legend=legend_below(270, 50, 100, 58)))
