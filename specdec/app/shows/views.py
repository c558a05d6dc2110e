"""What the page shows for a run, by output name: pure functions of a `Generation` (and the round
and position in view). The handlers return these dicts; the layout maps names to components.

The step viewer shows one (round, position): `selection` holds it as `(round_index,
position_index)`, both 0-based (position_index is None for a round that drafted nothing).
"""

from __future__ import annotations

import html
import json

import gradio as gr
import pandas as pd

from ...core.registry import find
from ...decoding.loop import STOPPED
from ...explain.looks import LOOKS, PALETTE, prob_text, stop_text, token_label, token_text
from ...explain.measure import comparison_seconds, step_or_verify_ms
from ...explain.speed import expected_tokens_per_round, retimed_words, run_point, speedup, tokens_in
from ...trace.outcomes import Ending
from ...trace.spine import Generation
from . import charts, step_charts
from .charts import sig3
from .outside import outside_places
from .slides import for_slides


def default_position(gen: Generation | None, round_index: int) -> int | None:
    """The most telling position of a round: the rejected draft, else the last one."""
    if gen is None or not gen.rounds:
        return None
    r = gen.rounds[round_index]
    if not r.positions:
        return None
    return min(r.n_accepted, len(r.positions) - 1)


def position_choices(gen: Generation | None, round_index: int) -> list[tuple[str, int]]:
    if gen is None or not gen.rounds:
        return []
    r = gen.rounds[round_index]
    return [(f"{i + 1} {LOOKS[pos.status].symbol} {token_label(gen, pos.draft_token)}", i)
            for i, pos in enumerate(r.positions)]


def frame(rows, headers) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=headers)


def clamp_round(gen: Generation, round_number) -> int:
    """A 1-based round number from the page as a valid 0-based round index."""
    return max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))


def step_view(gen: Generation | None, round_index, position) -> dict:
    """Everything the step viewer shows for one (round, position), by output name."""
    if gen is None or not gen.rounds:
        return dict(selection=(None, None), position=gr.update(choices=[], value=None),
                    pq_plot=step_charts.pq_figure(None), pq_table=frame([], step_charts.PQ_HEADERS),
                    acc_plot=step_charts.acceptance_figure(None), acc_table=frame([], step_charts.ACCEPT_HEADERS),
                    end_plot=step_charts.end_figure(None), end_table=frame([], step_charts.END_HEADERS), caption="",
                    note=gr.update(value="", interactive=False))
    r = max(0, min(int(round_index or 0), len(gen.rounds) - 1))
    n = len(gen.rounds[r].positions)
    pos = position if isinstance(position, int) and 0 <= position < n else default_position(gen, r)
    return dict(selection=(r, pos), position=gr.update(choices=position_choices(gen, r), value=pos),
                pq_plot=for_slides(step_charts.pq_figure(gen, r, pos), gen, r, "p-and-q"),
                pq_table=frame(step_charts.pq_rows(gen, r, pos), step_charts.PQ_HEADERS),
                acc_plot=for_slides(step_charts.acceptance_figure(gen, r, pos), gen, r, "acceptance-test"),
                acc_table=frame(step_charts.acceptance_rows(gen, r, pos), step_charts.ACCEPT_HEADERS),
                end_plot=for_slides(step_charts.end_figure(gen, r), gen, r, "end-of-round"),
                end_table=frame(step_charts.end_rows(gen, r), step_charts.END_HEADERS),
                caption=round_caption(gen, r, pos), note=gr.update(value=gen.notes.get(r, ""), interactive=True))


def show_step(gen: Generation | None, round_number, position) -> dict:
    """The step viewer, the text and the timeline for a 1-based round number and a 0-based position."""
    if gen is None or not gen.rounds:
        return step_view(None, 0, None)
    r = clamp_round(gen, round_number)
    # The slider's range and state come with its value: an update that follows another at once (a
    # link's round after its run, both from the cache) may be the only one the browser applies, and
    # with the value alone a reloaded page kept the slider disabled at its first range, 1 to 2.
    return dict(text=charts.text_html(gen, r), timeline=charts.timeline_figure(gen, r),
                round_slider=slider(gen, r), **step_view(gen, r, position))


RARE = 0.01   # a drawn token's chance under this is said, with how rare it was


def rare_draw(gen: Generation, rnd) -> str:
    """How rare the round's last token was, where its chance under the distribution it was drawn
    from is under `RARE` ('' elsewhere, and at T = 0, where nothing is drawn by chance)."""
    chance = dict(zip(rnd.end_dist.ids, rnd.end_dist.probs)).get(rnd.end_token)
    if chance is None or chance <= 0 or chance >= RARE or gen.settings.sampling.greedy:
        return ""
    source = "the residual norm(max(0, p − q))" if rnd.ending is Ending.RESIDUAL else "p"
    return (f"*A rare draw:* `{token_label(gen, rnd.end_token)}` had chance {prob_text(chance)} under {source}, "
            f"about 1 in {round(1 / chance):,}. Rare draws are part of sampling: over many draws some land on "
            "unlikely tokens, each exactly as often as its chance says (the exactness lab shows it).")


def round_caption(gen: Generation, r: int, position: int | None = None) -> str:
    """The round in words; with the features drafter, where the selected draft's q came from
    (`position`, 0-based: draft 1 when None)."""
    rnd = gen.rounds[r]
    text = "".join(token_text(gen, t) for t in rnd.emitted)
    look = LOOKS[rnd.ending]
    n = len(rnd.emitted)
    caption = (f"**Round {r + 1} of {len(gen.rounds)}**: drafted {len(rnd.positions)}, accepted {rnd.n_accepted}, "
               f"ended by {look.symbol} *{look.label}*; emitted {n} token{'' if n == 1 else 's'}: "
               f"`{json.dumps(text, ensure_ascii=False)}`")
    if rnd.ending is Ending.RESIDUAL and rnd.n_accepted < len(rnd.positions):
        caption += "\n\n" + why_no_residual(gen, rnd.positions[rnd.n_accepted])
    if gen.settings.sampling.greedy and rnd.ending in (Ending.RESIDUAL, Ending.BIASED_P, Ending.GREEDY):
        caption += "\n\n" + greedy_rejection(gen, rnd)
    caption += "".join("\n\n" + line for line in [one_hot_rejection(gen, rnd), rare_draw(gen, rnd)] if line)
    kind = find(gen.settings.drafter)
    if kind is not None and kind.reads_features:   # where its q came from: the target's feature or its own
        k = position if isinstance(position, int) and 0 <= position < len(rnd.positions) else 0
        caption += "\n\n" + where_q_came_from(gen, rnd, k) + q_source_picture(gen, rnd, k)
    return caption


def where_q_came_from(gen: Generation, rnd, k: int = 0) -> str:
    """The features drafter's q for draft k + 1 of this round: which feature and which token it read.
    Draft 1 reads the target's own feature; drafts 2 onward the drafter's predicted one."""
    context = gen.prompt_ids + gen.token_ids[:rnd.start]
    if not rnd.positions:
        return ("*Where q came from:* nowhere yet. The features drafter reads the target's own hidden state, "
                "and before this round's verify forward (the prompt's prefill) the target had computed none, "
                "so the round drafted nothing and the target drew its token alone.")
    if k > 0:
        previous = charts.md_text(token_label(gen, rnd.positions[k - 1].draft_token))
        return (f"*Where q came from (draft {k + 1}):* the drafter's own predicted feature from draft {k} "
                f"(no target forward has seen draft {k} yet), plus the embedding of {previous}, draft {k}'s "
                "token, through the drafter's one layer and the target's own output head. Draft 1 read the "
                "target's own last hidden state instead.")
    last = charts.md_text(token_label(gen, context[-1]))
    before = charts.md_text(token_label(gen, context[-2]))
    layers = gen.models.get("feature_layers") or []
    fused = (f", fused with its residual stream after layers {in_words(layers)} there (the same forward)"
             if layers else "")
    return (f"*Where q came from (draft 1):* the target's own last hidden state at position {len(context) - 2} "
            f"(after {before}, computed by the previous round's verify forward: no extra target forward){fused}, "
            f"plus the embedding of {last}, the token just drawn, through the drafter's one layer and the target's "
            "own output head. Drafts 2 onward read the drafter's own predicted feature instead.")


def in_words(numbers: list[int]) -> str:
    """[4, 8, 12] -> "4, 8 and 12"."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def q_source_picture(gen: Generation, rnd, k: int = 0) -> str:
    """The sentence above as a small block picture for draft k + 1: a feature (the target's for
    draft 1, the drafter's predicted one after) and the token just before's embedding go into the
    drafter's layer, then the target's output head, and out comes q. Its boxes are words in
    reading order (Gradio's sanitiser keeps no aria attributes, so a screen reader reads them as one
    line: "target's feature h 11 (after You) + embedding of ... → ..."); the two inputs differ by
    line style and word, not by colour alone. '' where nothing was drafted."""
    if not rnd.positions:
        return ""
    box = "border:{} {};border-radius:6px;padding:2px 8px;white-space:nowrap"
    target, drawn, net, out = (box.format("2px solid", PALETTE["blue"]), box.format("2px dashed", PALETTE["orange"]),
                               box.format("2px solid", PALETTE["grey"]), box.format("4px double", PALETTE["green"]))
    if k > 0:
        previous = html.escape(token_label(gen, rnd.positions[k - 1].draft_token))
        inputs = [(target, f"drafter's predicted feature (from draft {k})"), (None, "+"),
                  (drawn, f"embedding of {previous} (draft {k})")]
    else:
        context = gen.prompt_ids + gen.token_ids[:rnd.start]
        before = html.escape(token_label(gen, context[-2]))
        last = html.escape(token_label(gen, context[-1]))
        layers = gen.models.get("feature_layers") or []
        also = f"; with layers {in_words(layers)}" if layers else ""
        inputs = [(target, f"target's feature h<sub>{len(context) - 2}</sub> (after {before}{also})"), (None, "+"),
                  (drawn, f"embedding of {last} (just drawn)")]
    parts = [*inputs, (None, "→"), (net, "drafter's layer"), (None, "→"), (net, "target's output head"),
             (None, "→"), (out, f"q for draft {k + 1}")]
    spans = "".join(f'<span style="{style}">{text}</span>' if style else f"<span>{text}</span>"
                    for style, text in parts)
    return ('\n\n<div class="q-source" style="display:flex;flex-wrap:wrap;align-items:center;'
            f'gap:6px;margin-top:4px">{spans}</div>')


def why_no_residual(gen: Generation, pos) -> str:
    """Why the rejected draft (and every token with q ≥ p) gets no residual mass."""
    x = charts.md_text(token_label(gen, pos.draft_token))
    though = f", though p({x}) = {sig3(pos.p_draft)}" if pos.p_draft > 0 else ""   # p = 0: no "though"
    return (f"*Why does the rejected draft {x} get no residual{though}?* Its "
            f"q = {sig3(pos.q_draft)} ≥ p. A draft is kept with chance min(1, p/q), so a token with q ≥ p is "
            "emitted as an accepted draft with probability q · p/q = p: **its full p was already given at the "
            "acceptance step**. The residual max(0, p − q) tops up only what acceptance could not give, the "
            "tokens the draft under-proposes (p > q); every token with q ≥ p gets 0 there.")


def greedy_rejection(gen: Generation, rnd) -> str:
    """At T = 0 what a rejection can emit, said at such a round: learners worked it out from the
    residual chart."""
    top = charts.md_text(token_label(gen, rnd.emitted[-1])) if rnd.emitted else "?"
    return ("*At T = 0* p and q are one-hot (all their mass on each model's top token), so a draft passes only "
            "if it is the target's top token, and after a rejection the residual max(0, p − q) is p's own "
            f"one-hot: **a rejection can only emit the target's top token**, here {top}.")


ONE_HOT = 1 - 1e-6   # p's top token holding this much is all of p, up to rounding


def one_hot_rejection(gen: Generation, rnd) -> str:
    """Where sampling (a low temperature, top-p) left p one-hot at a rejected draft though T > 0, what
    that makes of the residual, said at such a round ('' elsewhere)."""
    if rnd.ending is not Ending.RESIDUAL or rnd.n_accepted >= len(rnd.positions) or gen.settings.sampling.greedy:
        return ""
    p = rnd.positions[rnd.n_accepted].p
    if max(p.probs, default=0.0) < ONE_HOT:
        return ""
    top = charts.md_text(token_label(gen, p.ids[p.probs.index(max(p.probs))]))
    sampling = gen.settings.sampling
    return (f"*p is one-hot here*: at T = {sampling.temperature:g} with top-p {sampling.top_p:g} (top-k "
            f"{sampling.top_k or 'off'}) one token, {top}, holds all of p, so the residual max(0, p − q) is that "
            "token alone and a rejection can only emit it: the residual is trivial at such positions, as at "
            "T = 0. It shows its shape at T = 1 with top-p 1 and top-k 0.")


def slider(gen: Generation | None, value: int | None = None):
    n = len(gen.rounds) if gen is not None else 0
    if value is None:
        return gr.update(maximum=max(2, n), interactive=n > 1)
    return gr.update(maximum=max(2, n), value=value + 1, interactive=n > 1)


def streamed(status: str, gen: Generation, timeline: bool = True) -> dict:
    """What changes while a run streams: the text, the numbers, and (when asked) the timeline; not
    the step viewer, nor the tables, which the finished run fills once."""
    update = dict(status=status, text=charts.text_html(gen), plain_text=gen.text,
                  metrics=charts.metrics_markdown(gen, running=True), run_state=gen)
    if timeline:
        update.update(timeline=charts.timeline_figure(gen), round_slider=slider(gen))
    return update


def first_interesting_round(gen: Generation) -> int:
    """Open the first round with a rejection (it shows the residual), else the first round."""
    return next((r.index for r in gen.rounds if r.ending not in (Ending.BONUS, Ending.PLAIN)), 0)


# What the page made for the previous run (its exported trace, a round's sheet, a link to a step):
# a new run, or an imported one, clears them, or they would be taken for this run's.
FILES_CLEARED = dict(export_file=None, sheet_file=gr.update(value=None, visible=False), link_box="")


def final_view(gen: Generation, ar: Generation | None = None, status: str = "",
               round_index: int | None = None, timed: Generation | None = None,
               speedups: tuple[float, ...] = ()) -> dict:
    """Everything the page shows for a finished (or imported) run; `speedups`, each repeat's own
    when the comparison was timed in repeats (`measure.timed_repeats`)."""
    if round_index is None:
        round_index = first_interesting_round(gen)
    return dict(status=status, text=charts.text_html(gen, round_index), plain_text=gen.text,
                timeline=charts.timeline_figure(gen, round_index),
                metrics=charts.metrics_markdown(gen, ar, timed=timed, speedups=speedups),
                time_plot=charts.time_figure(timed or gen, ar),
                run_state=gen, round_slider=slider(gen, round_index), **FILES_CLEARED,
                timeline_table=frame(charts.timeline_rows(gen), charts.TIMELINE_HEADERS), title=gen.title,
                side_by_side=charts.side_by_side_html(None, None, ""),
                next_outside_btn=gr.update(visible=bool(outside_places(gen))),   # only where there is one
                speed_run=run_point((timed or gen).stats, gen.settings.gamma, ar.stats if ar is not None else None),
                **step_view(gen, round_index, None))


CACHED = (" From the cache: this run (the same prompt, pair, settings and seed) was decoded earlier, in the "
          "time shown; a comparison with autoregressive is always timed afresh. Tick “decode afresh” beside Run "
          "to decode it again.")
DECODED_NOW = " Decoded now: the models ran for this request, in the time shown."


def done_status(gen: Generation, ar: Generation | None, timed: Generation | None = None, cached: bool | None = None,
                earlier: Generation | None = None) -> str:
    """The status line: the run's tokens and time; with a comparison, the time the speedup uses
    (the run timed again, unstreamed) first, and the streamed time beside it, each named. Where the
    run came from is said as plainly either way: from the cache (its time is the time it took when
    it was decoded) or decoded now (`cached`; None: not said); a run decoded afresh beside the one
    the cache held (`earlier`) is compared with it, token for token (`afresh_line`)."""
    s = gen.stats
    head = "Stopped" if s.stopped == STOPPED else "Done"
    why = ending_phrase(s.stopped)
    told = CACHED if cached else "" if cached is None else afresh_line(gen, earlier) if earlier else DECODED_NOW
    told = biased_line(gen) + told
    if ar is None:
        return (f"{head}: {s.new_tokens} tokens in {s.rounds} rounds, {s.wall_seconds:.2f} s; {why}."
                f"{result_line(gen)}{told}")
    t = (timed or gen).stats
    again = f" {retimed_words(s, t)}".rstrip()   # said beside the numbers where the re-timing was not faster
    return (f"{head}: {s.new_tokens} tokens in {s.rounds} rounds; {why}: {t.wall_seconds:.2f} s timed again "
            f"unstreamed, {1000 * t.wall_seconds / max(t.new_tokens, 1):.1f} ms a token ({s.wall_seconds:.2f} s while "
            f"streaming to the page). Autoregressive: {tokens_in(ar.stats)}{other_length(gen, ar)} → speedup in tokens "
            f"per second {speedup(t, ar.stats):.2f}×.{again}{result_line(gen)}{told}")


def comparison_status(gen: Generation, target_step_ms: float | None, repeats: int, done: int = 0) -> str:
    """The status line while a run is timed against the target alone: before it starts, about how
    long it will take and why (`measure.comparison_seconds`); then the repeats done and about how
    long is left, so a long comparison on a slow machine does not look stuck."""
    head = f"Timing the run again, unstreamed, and the target alone ({repeats} interleaved repeats)"
    if done:
        left = comparison_seconds(gen.stats, target_step_ms, repeats - done, warmup_tokens=0)
        return f"{head}: repeat {done} of {repeats} done, about {max(1, round(left))} s left…"
    whole = comparison_seconds(gen.stats, target_step_ms, repeats)
    step = (f"{step_or_verify_ms(gen.stats, target_step_ms):.1f} ms, "
            + ("a target step measured here" if target_step_ms else "this run's mean verify standing in for a step"))
    return (f"{head}: about {max(1, round(whole))} s, each repeat this run again ({gen.stats.wall_seconds:.1f} s "
            f"as it just took) and the target alone ({gen.stats.new_tokens} tokens × {step})…")


def other_length(gen: Generation, ar: Generation) -> str:
    """Beside the target alone's token count, when it differs from the run's: why, in a few words
    (the metrics say it whole)."""
    if len(ar.token_ids) == len(gen.token_ids):
        return ""
    return (f" (not {len(gen.token_ids)}: with the same seed its text parts from this run's and ends at its own "
            "point; compared per token)")


def biased_line(gen: Generation) -> str:
    """For a run with the residual adjustment skipped, the status line says it is biased, with its
    bias as the metrics give it ('' for an exact run)."""
    if not gen.settings.skip_adjustment:
        return ""
    return (f" ⚠ Adjustment skipped: this run is biased, its output does not follow p (mean TV to p "
            f"{gen.stats.skip_tv_mean:.4f} over its {gen.stats.tested} tested positions).")


def ending_phrase(stopped: str) -> str:
    """Why a run ended, as a clause of the status line. Never in parentheses: next to ⟨eos⟩'s own
    angle brackets they read as "((eos))" in the page's font."""
    if stopped == "eos":
        return f"it ended at the end-of-sequence token {stop_text(stopped)}"
    if stopped == "stopped":   # a Stop (or the page closing) asked for it
        return "it was stopped on request"
    return f"it stopped at {stop_text(stopped)}"


def afresh_line(gen: Generation, earlier: Generation) -> str:
    """A run decoded afresh though the cache held it: its own time beside the cached run's, and
    whether its tokens are the cached run's, token for token (they must be: a run is exact and
    seeded, so the same settings and seed give the same tokens); where they differ, from which token."""
    now, then = gen.stats.wall_seconds, earlier.stats.wall_seconds
    said = (f" Decoded now, afresh (the cache held this run, decoded earlier in {then:.2f} s; this decode took "
            f"{now:.2f} s): ")
    if gen.token_ids == earlier.token_ids:
        n = len(gen.token_ids)
        return said + (f"the same {n} token{'' if n == 1 else 's'}, token for token, as the same settings and seed "
                       "must give: the decoding is exact and seeded.")
    k = next((i for i, (a, b) in enumerate(zip(gen.token_ids, earlier.token_ids)) if a != b),
             min(len(gen.token_ids), len(earlier.token_ids)))
    return said + (f"NOT the same tokens: they differ from token {k + 1} on ({len(gen.token_ids)} now, "
                   f"{len(earlier.token_ids)} then). The same settings and seed should give the same tokens.")


def result_line(gen: Generation) -> str:
    """The run's result in one line beside Run, where the eye is after a click (the metrics table,
    below the fold, says the same numbers with what each answers): α, and tokens per target
    forward measured against what α predicts. Empty when no draft was tested."""
    s = gen.stats
    if not s.tested:
        return ""
    predicted = expected_tokens_per_round(s.acceptance_rate, gen.settings.gamma)
    return (f" α = {s.acceptance_rate:.3f}; {s.tokens_per_target_forward:.2f} tokens per target forward "
            f"(α predicts {predicted:.2f}).")
