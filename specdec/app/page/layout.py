"""The page, declared once: its sections, then the wiring of their events to `handlers`.

Every component a handler's output name refers to lives in one namespace `v`, named as the
output (and each control as its `RunRequest` field); `named` turns a handler's {name: value}
into Gradio's {component: value}. State is explicit: `run_state` holds the current `Generation`
(or None), `selection` the (round, position) in the step viewer.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from ...core.registry import find, labels
from ...explain.looks import LOOKS
from ...models.pair import BUNDLED, PRESETS, context_of, pair_sampling
from ...trace.outcomes import Ending, Status
from ...trace.spine import MAX_NOTE
from ..server import limits, restore
from ..server.api import EXAMPLE_FIELDS, EXAMPLES, MAIN_OUTPUTS, STEP_VIEW_OUTPUTS, RunRequest, link_query
from ..server.encoded import encoded
from ..server.serving import DECODE
from ..shows import charts, step_charts
from ..shows.glossary import GLOSSARY
from . import early, handlers, jumps
from .lab_tab import build_lab_tab
from .speed_tab import build_speed_tab, hidden_by

__all__ = ["build_app", "launch_kwargs"]

STATIC = Path(__file__).resolve().parent / "static"
TITLE = "specdec: exact speculative decoding, step by step"
INTRO = ("# specdec — speculative decoding, step by step\n"
         "A small **draft** model proposes γ tokens; the **target** checks them all in one forward "
         "pass and accepts or rejects each. Every token below is marked by its fate.")


def build_app() -> gr.Blocks:
    """The whole page: the Decode tab's sections, the lab, "How it works", and their wiring."""
    v = SimpleNamespace()   # every component a handler or an event refers to, by name
    with gr.Blocks(title=TITLE) as demo:
        v.run_state = gr.State(None)          # the current Generation (or None)
        v.selection = gr.State((None, None))  # (round_index, position_index) shown in the step viewer
        v.stops = gr.State([])                # the visitor's running requests' stops (for the Stop button)
        v.speed_run = gr.State(None)          # the current run as a point for the speed explorer (speed.RunPoint)
        v.held = gr.State(None)               # an opened round's step figures, for the events after (`handlers.HELD`)
        gr.Markdown(INTRO)
        with gr.Accordion("Glossary: γ, α, β, TV, c, v", open=False, elem_id="glossary"):   # from every tab
            gr.Markdown(GLOSSARY, latex_delimiters=[])
        with gr.Tab("Decode") as decode_tab:
            _controls(v)
            _run_view(v)
            _step_viewer(v)
            _traces(v)
        with gr.Tab("Exactness lab") as lab_tab:
            build_lab_tab(v.run_state, v.selection, also_from=[v.send_to_lab])
        with gr.Tab("Speed explorer") as speed_tab:
            speed_open = build_speed_tab(v.speed_run, speed_tab, v.preset)
        with gr.Tab("How it works") as how_tab:
            gr.Markdown((STATIC / "how_it_works.md").read_text(encoding="utf-8"),
                        latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                          {"left": "$", "right": "$", "display": False}])
        hidden_by((decode_tab, lab_tab, how_tab), speed_open)
        _wire_run(demo, v)
        _wire_steps(v)
        _wire_traces(v)
    return demo


def launch_kwargs() -> dict:
    """Arguments for `demo.launch()` (Gradio 6 takes css/js/theme there)."""
    return dict(css=(STATIC / "app.css").read_text(), js=(STATIC / "app.js").read_text(),
                theme=gr.themes.Default(font=[gr.themes.Font("system-ui"), "sans-serif"]), i18n=SAID,
                app_kwargs=early.app_kwargs())   # static/early.js, before Gradio's scripts


# Words Gradio's status tracker announces to screen readers when an event ends. Gradio 6.31's
# English bundle lacks these keys, so a screen reader read the key itself: "common.complete".
SAID = gr.I18n(en={"common.complete": "Done", "common.error": "Error"})


# ---------------------------------------------------------------- sections

def _controls(v) -> None:
    """The form (a `RunRequest`, its defaults), the Run and Stop buttons, the status line."""
    d = RunRequest().resolved()
    context = context_of(BUNDLED)
    most = limits.max_new_tokens_for(context)
    with gr.Row():
        with gr.Column(scale=2, elem_id="decode-form"):   # as wide as the pair's name: see app.css
            v.prompt = gr.Textbox(d.prompt, label="Prompt", lines=3, elem_id="prompt")
            v.preset = gr.Dropdown([(p.label, key) for key, p in PRESETS.items()], value=d.preset,
                                   label="Model pair", elem_id="preset",
                                   info="Hub pairs need the network; SmolLM2-135M-Instruct is fetched once "
                                        "(pip) when picked; the bundled pair is always here.")
            v.drafter = gr.Radio([(label, key) for key, label in labels().items()], value=d.drafter,
                                 label="Drafter", elem_id="drafter")
            with gr.Row():
                v.run_btn = gr.Button("Run", variant="primary", elem_id="run")
                v.api_run_btn = gr.Button("Run (API)", visible=False)   # the API's /generate
                v.api_step_btn = gr.Button("Show step (API)", visible=False)   # the API's /show_step
                v.stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", size="sm")
                v.skip_adjustment = gr.Checkbox(
                    d.skip_adjustment, label=f"{LOOKS[Ending.BIASED_P].symbol} skip residual adjustment (biased)",
                    info="After a rejection sample p instead of the residual.", elem_id="skip-adjustment")
                v.compare_ar = gr.Checkbox(d.compare_ar, label="compare with autoregressive", elem_id="compare-ar")
                v.fresh = gr.Checkbox(d.fresh, label="decode afresh (not from the cache)", elem_id="fresh",
                                      info="A run decoded before comes from the cache; tick to run the models "
                                           "again: the same seed gives the same tokens.")
                v.raw_text = gr.Checkbox(d.raw_text, label="raw text (no chat template)", elem_id="raw-text",
                                         info="An instruct model reads the prompt as a user turn under its chat "
                                              "template; tick to send the text as it is.")
        with gr.Column(scale=1):
            v.gamma = gr.Slider(1, limits.MAX_GAMMA, value=d.gamma, step=1, label="γ (drafts per round)",
                                elem_id="gamma")
            v.max_new_tokens = gr.Slider(1, most, value=min(d.max_new_tokens, most), step=1, label="max new tokens",
                                         info=f"The bundled pair's context is {context} tokens (prompt included).",
                                         elem_id="max-new")
            v.temperature = gr.Slider(0, 2, value=d.temperature, step=0.05, label="temperature (0 = greedy)",
                                      elem_id="temperature")
            with gr.Row():
                v.top_k = gr.Number(d.top_k, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
                v.top_p = gr.Slider(0.05, 1.0, value=d.top_p, step=0.05, label="top-p", elem_id="top-p")
                v.seed = gr.Number(d.seed, label="seed", precision=0, minimum=0, elem_id="seed")
            v.sampling_note = gr.Markdown(handlers.sampling_line(d.preset), elem_id="sampling-note")
    # The status line (with the run's one-line result) right under the form, where the eye is after
    # a click on Run: below the examples it was below the fold at 1000 px.
    v.status = gr.Markdown("Press **Run** (defaults: T = 1, γ = 4 — expect some rejections).", elem_id="run-status")


SHORT_PAIRS = {BUNDLED: "bundled", "smollm2-135m": "SmolLM2"}
LABEL_CHARS = 60   # Gradio cuts an example's label past about 60 characters ("…")


def example_label(ex: RunRequest) -> str:
    """An example in one short line: its prompt's start, then pair, drafter, γ (when not 4) and
    sampling, which must stay visible (SmolLM2's examples run at its authors' T 0.2, top-p 0.9)."""
    sampling = ("greedy" if ex.temperature == 0 else f"T {ex.temperature:g}" + (f" top-k {ex.top_k}" if ex.top_k and
                ex.top_k != pair_sampling(ex.preset).top_k else "") + (f" top-p {ex.top_p:g}" if ex.top_p < 1 else ""))
    rest = ", ".join([SHORT_PAIRS.get(ex.preset, ex.preset), drafter_word(ex.drafter)]
                     + ([f"γ {ex.gamma}"] if ex.gamma != 4 else []) + [sampling])
    room = LABEL_CHARS - len(rest) - 3
    prompt = ex.prompt.replace("\n", " ")
    return f"{prompt if len(prompt) <= room else prompt[:room - 1] + '…'} — {rest}"


def drafter_word(name: str) -> str:
    """A drafter's short word for an example's label (its name where it is no registered drafter)."""
    kind = find(name)
    return kind.word if kind is not None else name


def _run_view(v) -> None:
    """The run as it decodes: status, marked text, timeline, metrics, the side-by-side re-runs.
    The text comes right under the status line, the examples after it: below the 8-row examples
    table a first run's answer sat ~1,400 px under the Run button. When a run ends with
    its text out of view, the page scrolls to it once (app.js, `showAnswer`)."""
    v.text = gr.HTML(charts.text_html(None), elem_id="token-text")
    # The marked text strikes rejected drafts through where they were proposed: the answer itself,
    # to read or copy, one click away.
    with gr.Accordion("The answer as plain text (without the struck-through drafts)", open=False,
                      elem_id="plain-text-accordion"):
        v.plain_text = gr.Textbox("", show_label=False, lines=4, max_lines=20, interactive=False,
                                  buttons=["copy"], elem_id="plain-text")
    # Labelled: a table of all seven fields ran past the page's edge at 800 px.
    gr.Examples([[getattr(ex, name) for name in EXAMPLE_FIELDS] for ex in EXAMPLES],
                [getattr(v, name) for name in EXAMPLE_FIELDS], label="Example prompts",
                example_labels=[example_label(ex) for ex in EXAMPLES])
    v.timeline = gr.Plot(charts.timeline_figure(None), label="Timeline (click a column to open its round)",
                         elem_id="timeline")
    with gr.Accordion("Timeline as a table", open=False):
        # Widths that fit the window (unset, the drafting and verifying columns were off its right
        # edge); the drafts and the texts wrap between words.
        v.timeline_table = gr.Dataframe(headers=charts.TIMELINE_HEADERS, interactive=False, elem_id="timeline-table",
                                        column_widths=charts.TIMELINE_WIDTHS, wrap=True)
    with gr.Accordion("Run metrics", open=True):
        v.metrics = gr.Markdown(charts.metrics_markdown(None), elem_id="metrics", latex_delimiters=[])
        v.time_plot = gr.Plot(charts.time_figure(None, None), label="where the time went", elem_id="time-chart")
    with gr.Accordion("Side by side: the same run with the other rule, or the target alone", open=False):
        with gr.Row():
            v.other_rule_btn = gr.Button("re-run with the other rule (exact ↔ skip)", elem_id="rerun-rule", size="sm")
            v.target_btn = gr.Button("re-run with the target alone", elem_id="rerun-target", size="sm")
        v.side_by_side = gr.HTML(charts.side_by_side_html(None, None, ""), elem_id="side-by-side")
    v.click_box = gr.Textbox(elem_id="timeline-click", elem_classes=["specdec-hidden"], show_label=False,
                             container=False)   # the page's JS writes a timeline click here


STEP_COLUMN_PX = 460   # the narrowest the p/q chart and the acceptance test are drawn side by side


def _step_viewer(v) -> None:
    """One round and one drafted position: p and q, the acceptance test, how the round ended."""
    gr.Markdown("## Step viewer\nClick a timeline column, drag the slider, or press ← / → (outside text "
                "fields) to step through the rounds.", elem_id="step-viewer")
    with gr.Row():
        v.prev_btn = gr.Button("◀ previous round", elem_id="prev-round", size="sm")
        v.round_slider = gr.Slider(1, 2, value=1, step=1, label="round", interactive=False, elem_id="round")
        v.next_btn = gr.Button("next round ▶", elem_id="next-round", size="sm")
        v.next_rejection_btn = gr.Button("next rejection ▶▶", elem_id="next-rejection", size="sm")
        v.next_outside_btn = gr.Button("next token outside the drafter's vocabulary ▶▶", elem_id="next-outside",
                                       size="sm", visible=False)   # a run with such a token shows it
    marks = ", ".join(f"{LOOKS[s].symbol} {s.value}" for s in Status)
    v.position = gr.Radio([], label=f"drafted position ({marks})", elem_id="position")
    with gr.Row():
        v.send_to_lab = gr.Button("Open this position in the exactness lab", elem_id="send-to-lab", size="sm")
        v.sheet_btn = gr.Button("This round on one sheet, to print or for slides", elem_id="round-sheet", size="sm")
    v.sheet_file = gr.File(label="this round's sheet: open it in a browser to print it (or save a PDF) or save a PNG",
                           interactive=False, visible=False, elem_id="round-sheet-file")
    v.caption = gr.Markdown("", elem_id="round-caption")
    v.note = gr.Textbox("", label=f"your note on this round (kept in the export, up to {MAX_NOTE} characters)",
                        lines=1, max_lines=4, interactive=False, elem_id="round-note")
    # Side by side where each column gets STEP_COLUMN_PX, else one above the other: at half of an
    # 800 px window (about 340 px) the p/q chart cut its title, hid its legend behind the scale
    # buttons and overlapped its token labels, and its table wrapped one digit a line; at half of
    # 1400 px the real pair's 40 upright token labels overlapped.
    with gr.Row():
        with gr.Column(scale=3, min_width=STEP_COLUMN_PX):   # 3/5: room for 40 upright token labels
            v.pq_plot = gr.Plot(step_charts.pq_figure(None), label="p (target) and q (draft)", elem_id="pq-chart")
            with gr.Accordion("p and q as a table", open=False):
                v.pq_table = gr.Dataframe(headers=step_charts.PQ_HEADERS, elem_id="pq-table", interactive=False,
                                          column_widths=["21%", "12%", "16%", "16%", "16%", "19%"], wrap=True)
        with gr.Column(scale=2, min_width=STEP_COLUMN_PX):
            v.acc_plot = gr.Plot(step_charts.acceptance_figure(None), label="acceptance test", elem_id="accept-chart")
            with gr.Accordion("acceptance test as a table", open=False):
                # The quantities are sentences: they wrap, and the values keep a column of their
                # own (unset, the first column took the table's width and the values were cut off).
                v.acc_table = gr.Dataframe(headers=step_charts.ACCEPT_HEADERS, elem_id="accept-table",
                                           interactive=False, column_widths=["70%", "30%"], wrap=True)
    v.end_plot = gr.Plot(step_charts.end_figure(None), label="how the round ended: residual / p / bonus",
                         elem_id="end-chart")
    with gr.Accordion("end of round as a table", open=False):
        v.end_table = gr.Dataframe(headers=step_charts.END_HEADERS, elem_id="end-table", interactive=False,
                                   column_widths=["19%", "10%", "14%", "14%", "14%", "15%", "14%"], wrap=True)


def _traces(v) -> None:
    """The run out (a titled JSON trace, a link to this step) and a trace in."""
    with gr.Row():
        with gr.Column():
            v.title = gr.Textbox("", label="title of this run (kept in the export)", max_lines=1, elem_id="run-title")
            with gr.Row():
                v.export_btn = gr.Button("Export this run (JSON trace)", elem_id="export-run", size="sm")
                v.link_btn = gr.Button("Copy a link to this step", elem_id="copy-link", size="sm")
            v.link_box = gr.Textbox("", label="link: the same settings and seed reproduce the run and open this round",
                                    max_lines=1, buttons=["copy"], elem_id="link")
            v.export_file = gr.File(label="exported trace", interactive=False, elem_id="export")
        v.import_file = gr.File(label="Import a trace (JSON) to replay it without models", file_types=[".json"],
                                type="filepath", elem_id="import")
    v.run_link = gr.Textbox(elem_id="run-link", elem_classes=["specdec-hidden"], show_label=False,
                            container=False)   # the run's link, for the address bar (`restore`)


# ---------------------------------------------------------------- wiring

QUIET = dict(show_progress="hidden")


def _named(v, result: dict) -> dict:
    return {getattr(v, name): value for name, value in result.items()}


def _all(v, names) -> list:
    return [getattr(v, name) for name in names]


def _wire_run(demo: gr.Blocks, v) -> None:
    """Run (button, Enter, a link on page load) streams into the page; Stop cancels it."""
    def run(*values):   # the RunRequest's values, then the visitor's stops (a state: not in the API)
        for update in handlers.run_generation(*values[:-1], stops=values[-1]):
            yield _named(v, encoded(update))   # a class's shared figures, encoded once

    def run_on_page(*values):   # the page's Run: the finished run's step figures held for the events after it
        for update in handlers.run_generation(*values[:-1], stops=values[-1]):
            yield _named(v, handlers.hold_figures(encoded(update)))

    # The API names /generate's parameters after the function's: the controls' names, not param_0..
    # (`client.predict(prompt=..., seed=..., api_name="/generate")`).
    run.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                           for name in [*RunRequest.names(), "stops"]])

    def follow_link(stops, request: gr.Request):
        for update in handlers.open_link(request, stops):
            yield _named(v, encoded(update))

    controls, main_out = _all(v, RunRequest.names()), _all(v, MAIN_OUTPUTS)
    page_out = _all(v, [*(name for name in MAIN_OUTPUTS if name not in handlers.HELD), "held"])
    run_event = dict(inputs=[*controls, v.stops], show_progress="full",
                     show_progress_on=[v.status], concurrency_id=DECODE)   # how many at once: serving.configure
    # On the page, "Done" comes with the text, the timeline and the numbers, and the step figures
    # follow one event each (`_with_held_parts`): drawn in the same update, they held the browser's
    # main thread for 0.5-0.65 s after the last token of a 64-token run (Chromium's long tasks), and
    # "Done" waited for them. The API's /generate (a hidden button's event) answers with everything.
    on_page = [v.run_btn.click(fn=run_on_page, outputs=page_out, **run_event, api_name=False),
               v.prompt.submit(fn=run_on_page, outputs=page_out, **run_event, api_name=False)]
    for event in on_page:
        _with_held_parts(v, event)
    ran = [*on_page, v.api_run_btn.click(fn=run, outputs=main_out, **run_event, api_name="generate"),
           demo.load(follow_link, [v.stops], [*controls, v.sampling_note, *main_out], api_name=False,
                     show_progress_on=[v.status])]
    restore.keep_links(v, runs=ran)   # the run's link, for the address bar
    v.stop_btn.click(handlers.stop_runs, [v.stops], None, api_name=False, queue=False, **QUIET)
    for which, button, api_name in (("other rule", v.other_rule_btn, "side_by_side_rule"),
                                    ("target alone", v.target_btn, "side_by_side_target")):
        button.click(lambda g, k, s, which=which: _named(v, handlers.side_by_side(g, k, which, s)),
                     [v.run_state, v.preset, v.stops], [v.side_by_side], api_name=api_name, concurrency_id=DECODE,
                     show_progress_on=[v.side_by_side])
    # The max-new-tokens slider follows the pair and the prompt: while typing, only the latest text
    # is counted (a tokenizer call, off the queue: never behind a run).
    room = dict(fn=handlers.max_new_for, inputs=[v.preset, v.prompt, v.max_new_tokens], outputs=[v.max_new_tokens],
                api_name=False, queue=False, trigger_mode="always_last", **QUIET)
    for event in (v.preset.change, v.prompt.change, demo.load):
        event(**room)
    # The line on where the sampling comes from, and the γ picked for the drafter, follows the pair and
    # the drafter however they change (an example too).
    for event in (v.preset.change, v.drafter.change):
        event(handlers.sampling_line, [v.preset, v.drafter], [v.sampling_note], api_name=False, queue=False, **QUIET)
    # Picking a real model this machine lacks fetches it (SPECDEC_FETCH) with a progress bar, then
    # loads it; the drafter and the prompt follow the pair.
    v.preset.input(handlers.pick_pair, [v.preset, v.drafter, v.prompt, v.temperature, v.top_k, v.top_p, v.gamma],
                   [v.drafter, v.prompt, v.status, v.temperature, v.top_k, v.top_p, v.sampling_note, v.gamma],
                   api_name=False, show_progress_on=[v.status])


def _with_held_parts(v, event):
    """After `event`, once the browser is idle (`IDLE_FIRST`), the held step figures
    (`handlers.HELD_PARTS`), one event each: a browser task each; then `window.specdecStepsShown`
    counts one more (`STEPS_SHOWN`)."""
    event = event.success(None, None, None, js=IDLE_FIRST, api_name=False, **QUIET)
    for part, names in enumerate(handlers.HELD_PARTS):
        event = event.success(lambda held, part=part: _named(v, handlers.release_held(held, part)), [v.held],
                              _all(v, names), api_name=False, **QUIET)
    return event.then(None, None, None, js=STEPS_SHOWN, api_name=False, **QUIET)


# The held figures wait until the browser has drawn what the event before them showed (a run's
# "Done" with its text, timeline and numbers; a step's caption and marks) and is idle: asked at
# once, the first figure comes back while "Done" is still being drawn (Plotly fits a redrawn chart
# again 100 ms later) and holds the main thread in the same stretch. At most IDLE_WAIT_MS; where a
# browser has no requestIdleCallback, two frames.
IDLE_WAIT_MS = 400
IDLE_FIRST = ("() => new Promise((go) => window.requestIdleCallback"
              f" ? window.requestIdleCallback(() => go(), {{timeout: {IDLE_WAIT_MS}}})"
              " : requestAnimationFrame(() => requestAnimationFrame(() => go())))")


# Counts the step views shown in full, their last figure drawn (after the frame that draws it): a
# browser (a test, the page benchmark) waits for the count to move past what it read before a click.
STEPS_SHOWN = ("() => new Promise((done) => requestAnimationFrame(() => {"
               " window.specdecStepsShown = (window.specdecStepsShown || 0) + 1; done(); }))")


# The round in view is marked in the text and on the timeline by the page itself (app.js,
# `specdecMarkRound`), from the round box's new value, once a step's first update has set it.
MARK_ROUND = "(round) => { if (window.specdecMarkRound) window.specdecMarkRound(round); }"


def _wire_steps(v) -> None:
    """The step viewer: slider, buttons, arrow keys, timeline clicks, the position, a note. On the
    page each sets the round and its caption, then the page marks the round in the text and on the
    timeline (`MARK_ROUND`), and the step figures come one at a time; the API's /show_step (a
    hidden button's event) answers with everything at once, text and timeline included."""
    step_out, slider_in = _all(v, STEP_VIEW_OUTPUTS), [v.run_state, v.round_slider]
    held_out = _all(v, [*(name for name in STEP_VIEW_OUTPUTS if name not in handlers.HELD), "held"])

    def on_page(handler):   # the page's version of a step handler: the marks moved, the figures held
        return lambda *args: _named(v, handlers.hold_figures(handlers.without_text_and_timeline(handler(*args))))

    def step(trigger, fn, inputs, **kwargs):
        first = trigger(on_page(fn), inputs, held_out, api_name=False, **QUIET, **kwargs)
        first.then(None, [v.round_slider], None, js=MARK_ROUND, api_name=False, **QUIET)   # app.js
        _with_held_parts(v, first)

    v.api_step_btn.click(lambda g, r: _named(v, handlers.open_round(g, r)), slider_in, step_out, api_name="show_step",
                         **QUIET)
    step(v.round_slider.release, handlers.open_round, slider_in, trigger_mode="always_last")
    step(v.round_slider.input, handlers.open_round, slider_in, trigger_mode="always_last")
    for button, delta in ((v.prev_btn, -1), (v.next_btn, +1)):
        step(button.click, lambda g, r, delta=delta: handlers.step_by(g, r, delta), slider_in)
    step(v.next_rejection_btn.click, handlers.next_rejection, slider_in)
    step(v.next_outside_btn.click, jumps.next_outside, slider_in)
    step(v.click_box.change, handlers.click_round, [v.run_state, v.click_box], trigger_mode="always_last")
    # always_last: a draft picked while the last pick is still being answered is shown after it
    # (Gradio's default for an input, "once", dropped it: the radio moved, the viewer did not).
    step(v.position.input, handlers.position_changed, [v.run_state, v.round_slider, v.position],
         trigger_mode="always_last")
    v.sheet_btn.click(lambda g, r, p: _named(v, handlers.round_sheet_file(g, r, p)),
                      [v.run_state, v.round_slider, v.position], [v.sheet_file], api_name=False)
    # Notes edit the run in run_state: one queue slot, so each reads what the last one wrote.
    v.note.input(lambda g, r, t: _named(v, handlers.set_note(g, r, t)), [v.run_state, v.round_slider, v.note],
                 [v.run_state], concurrency_id="notes", concurrency_limit=1, api_name=False,
                 trigger_mode="always_last", **QUIET)


def _wire_traces(v) -> None:
    """Export, import, and the link (built on the server, completed with the page's address)."""
    v.export_btn.click(lambda g, t: _named(v, handlers.export_trace(g, t)), [v.run_state, v.title], [v.export_file],
                       api_name="export_trace")
    imported = v.import_file.upload(lambda f: _named(v, handlers.import_trace(f)), [v.import_file],
                                    _all(v, MAIN_OUTPUTS), api_name="import_trace", show_progress_on=[v.status])
    restore.keep_links(v, imports=[imported])   # no link: a reload does not bring an earlier run back
    v.link_btn.click(lambda *values: link_query(RunRequest(*values[:-2]), values[-2],
                                                values[-1] + 1 if isinstance(values[-1], int) else None),
                     [*_all(v, RunRequest.names()), v.round_slider, v.position], [v.link_box], api_name=False,
                     **QUIET).then(
        None, [v.link_box], [v.link_box], js="(q) => { const url = location.origin + location.pathname + q; "
        "if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {}); return url; }")
