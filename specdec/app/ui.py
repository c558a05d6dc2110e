"""The Gradio app: layout and short callbacks only (the math lives in the library, the figures in
`specdec.charts`). State is explicit: `run_state` holds the current `Generation` (or None),
`selection` holds `(round_index, position_index)` of the step shown in the step viewer
(both 0-based; position_index is None for a round that drafted nothing).

Every handler returns a dict keyed by output NAME (see `MAIN_OUTPUTS`, `STEP_OUTPUTS`); the
wiring in `build_app` maps names to components, Gradio's `{component: value}` pattern. An output
a handler leaves out keeps its value.

The decoder runs in a worker thread and hands every finished round to the Gradio generator
through a queue, so the text, the timeline and the metrics update while the run goes on.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import queue
import threading
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from ..checks import number, whole_number
from ..checks import seed as seed_number
from ..decoding import autoregressive_generate, speculative_generate
from ..looks import LOOKS, token_label
from ..models import BUNDLED, PRESETS, ModelLoadError, context_of
from ..outcomes import Ending, Status
from ..sampling import Rule, SamplingConfig
from ..settings import DRAFTERS, RunSettings
from ..speed import speedup
from ..trace import MAX_NOTE, MAX_TITLE, Generation, cap_text
from ..validate import load_trace, read_trace_file
from . import charts, housekeeping, limits
from .pairs import get_pair, is_loaded
from .serving import user_message

try:   # the exactness lab is built by its own module; the app works without it
    from .lab_tab import build_lab_tab
except ImportError:   # pragma: no cover - depends on what is installed
    build_lab_tab = None

try:   # Hugging Face ZeroGPU: borrow a GPU for the decoding call only
    import spaces

    gpu = spaces.GPU
except Exception:   # not on a Space (or no `spaces` package): a no-op decorator
    def gpu(fn=None, **_kw):
        return fn if fn is not None else (lambda f: f)

__all__ = ["build_app", "launch_kwargs", "warm_up"]

STATIC = Path(__file__).resolve().parent / "static"
DEFAULT_PROMPT = "To be, or not to be"
EXAMPLES = [   # prompt, drafter, gamma, temperature
    ["To be, or not to be", "model", 4, 1.0],
    ["ROMEO:\nBut, soft! what light through yonder window breaks?", "model", 4, 0.8],
    ["First Citizen:\nBefore we proceed any further, hear me speak.", "model", 8, 1.0],
    ["To be, or not to be, that is the question. To be, or not to be, that is the question. "
     "To be, or not to be,", "ngram", 6, 0.0],
    ["the king, the king, the king, the king, the king, the king, the", "ngram", 8, 1.0],
    ["HAMLET:\nWhat a piece of work is a man!", "model", 4, 0.0],
]

# Output names, in the order the API returns them (gradio_client gives a tuple in this order).
STEP_OUTPUTS = ["selection", "position", "pq_plot", "pq_table", "acc_plot", "acc_table", "end_plot",
                "end_table", "caption", "note"]
MAIN_OUTPUTS = ["status", "text", "timeline", "metrics", "run_state", "round_slider", "export_file",
                *STEP_OUTPUTS, "timeline_table", "time_plot", "title", "side_by_side"]
CONTROLS = ["prompt", "preset", "drafter", "gamma", "max_new", "temperature", "top_k", "top_p", "seed",
            "skip_adj", "compare"]
STEP_VIEW_OUTPUTS = ["text", "timeline", "round_slider", *STEP_OUTPUTS]
STATES = ("run_state", "selection")   # per-visitor state: the API does not return these


def api_outputs(names: list[str]) -> list[str]:
    """The names of what an API call returns, in order (the outputs less the states)."""
    return [n for n in names if n not in STATES]


def warm_up(pair) -> None:
    """Run both decoders once on a loaded pair (a few tokens): the first request then pays no
    one-time start-up cost, so its timings, and the speedup the page shows, are fair."""
    for drafter in DRAFTERS:
        speculative_generate(pair, DEFAULT_PROMPT, RunSettings(gamma=4, max_new_tokens=8, drafter=drafter))
    autoregressive_generate(pair, DEFAULT_PROMPT, RunSettings(max_new_tokens=8))


# ---------------------------------------------------------------- input checks

def _error(msg: str) -> gr.Error:
    return gr.Error(msg, print_exception=False)


def parse_request(prompt, preset, drafter, gamma, max_new_tokens, temperature, top_k, top_p, seed,
                  skip_adjustment=False) -> tuple[str, str, RunSettings]:
    """Check the controls' values: (prompt, preset key, settings), or gr.Error with a message the
    user can act on."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise _error("The prompt is empty: type at least one word.")
    if len(prompt) > limits.MAX_PROMPT_CHARS:
        raise _error(f"The prompt is {len(prompt)} characters long; keep it under {limits.MAX_PROMPT_CHARS}.")
    if preset not in PRESETS:
        raise _error(f"Unknown model pair {preset!r}; choose one of: {', '.join(PRESETS)}.")
    try:
        settings = RunSettings(
            gamma=whole_number(gamma, "γ (drafts per round)", 1),
            max_new_tokens=whole_number(max_new_tokens, "max new tokens", 1),
            sampling=SamplingConfig(temperature=number(temperature, "temperature"),
                                    top_k=whole_number(top_k, "top-k", 0), top_p=number(top_p, "top-p")),
            seed=seed_number(seed),
            rule=Rule.SKIP_ADJUSTMENT if skip_adjustment else Rule.EXACT,
            drafter=drafter if isinstance(drafter, str) else repr(drafter))
        limits.check_run(settings.validate())
    except ValueError as err:
        raise _error(f"{str(err)[:1].upper()}{str(err)[1:]}.") from None
    return prompt, preset, settings


# ---------------------------------------------------------------- views (pure: trace -> outputs)

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


def _frame(rows, headers) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=headers)


def step_view(gen: Generation | None, round_index, position) -> dict:
    """Everything the step viewer shows for one (round, position), by output name."""
    if gen is None or not gen.rounds:
        return dict(selection=(None, None), position=gr.update(choices=[], value=None),
                    pq_plot=charts.pq_figure(None), pq_table=_frame([], charts.PQ_HEADERS),
                    acc_plot=charts.acceptance_figure(None), acc_table=_frame([], ["quantity", "value"]),
                    end_plot=charts.end_figure(None), end_table=_frame([], charts.END_HEADERS), caption="",
                    note=gr.update(value="", interactive=False))
    r = max(0, min(int(round_index or 0), len(gen.rounds) - 1))
    n = len(gen.rounds[r].positions)
    pos = position if isinstance(position, int) and 0 <= position < n else default_position(gen, r)
    return dict(selection=(r, pos), position=gr.update(choices=position_choices(gen, r), value=pos),
                pq_plot=charts.pq_figure(gen, r, pos), pq_table=_frame(charts.pq_rows(gen, r, pos), charts.PQ_HEADERS),
                acc_plot=charts.acceptance_figure(gen, r, pos),
                acc_table=_frame(charts.acceptance_rows(gen, r, pos), ["quantity", "value"]),
                end_plot=charts.end_figure(gen, r), end_table=_frame(charts.end_rows(gen, r), charts.END_HEADERS),
                caption=_round_caption(gen, r), note=gr.update(value=gen.notes.get(r, ""), interactive=True))


def _round_caption(gen: Generation, r: int) -> str:
    rnd = gen.rounds[r]
    text = "".join(gen.token(t) for t in rnd.emitted)
    look = LOOKS[rnd.ending]
    return (f"**Round {r + 1} of {len(gen.rounds)}**: drafted {len(rnd.positions)}, accepted {rnd.n_accepted}, "
            f"ended by {look.symbol} *{look.label}*; emitted {len(rnd.emitted)} tokens: "
            f"`{json.dumps(text, ensure_ascii=False)}`")


def _slider(gen: Generation | None, value: int | None = None):
    n = len(gen.rounds) if gen is not None else 0
    if value is None:
        return gr.update(maximum=max(2, n), interactive=n > 1)
    return gr.update(maximum=max(2, n), value=value + 1, interactive=n > 1)


def export_trace(gen: Generation | None, title: str | None = None) -> dict:
    """Write the current run, with the title in the title box and its notes, as a JSON trace, only
    when asked (api_name 'export_trace'): a run itself writes no file."""
    if gen is None:
        raise _error("Nothing to export yet: run a generation or import a trace first.")
    if title is not None:
        gen = dataclasses.replace(gen, title=cap_text(str(title), MAX_TITLE))
    return dict(export_file=housekeeping.export_path(gen.to_json()))   # in Gradio's cache, swept after an age


def set_note(gen: Generation | None, round_number, note) -> dict:
    """A teacher's note on the round in the step viewer, kept with the run and exported."""
    if gen is None or not gen.rounds:
        return {}
    r = max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))
    notes = {k: v for k, v in gen.notes.items() if k != r}
    if str(note or "").strip():
        notes[r] = cap_text(str(note), MAX_NOTE)
    return dict(run_state=dataclasses.replace(gen, notes=notes))


OTHER_RUNS = {"other rule": "the other rule", "target alone": "the target alone"}


@gpu
def side_by_side(gen: Generation | None, preset: str, which: str) -> dict:
    """Re-run this run's prompt, seed and settings with the other rule (exact <-> skip) or with the
    target alone, and show both texts one above the other (api_name 'side_by_side')."""
    if gen is None or not gen.settings.speculative:
        raise _error("Run a generation first: the side-by-side view re-runs it.")
    if which not in OTHER_RUNS:
        raise _error(f"Choose one of: {', '.join(OTHER_RUNS)}.")
    try:
        pair = get_pair(preset if preset in PRESETS else BUNDLED)
        if which == "target alone":
            other = autoregressive_generate(pair, gen.prompt, gen.settings)
        else:
            rule = Rule.EXACT if gen.settings.skip_adjustment else Rule.SKIP_ADJUSTMENT
            other = speculative_generate(pair, gen.prompt, gen.settings.with_(rule=rule))
    except (ValueError, ModelLoadError) as err:
        raise _error(_describe(err)) from None
    return dict(side_by_side=charts.side_by_side_html(gen, other, OTHER_RUNS[which]))


# ---------------------------------------------------------------- a link to a step

LINK_KEYS = {"prompt": "prompt", "pair": "preset", "drafter": "drafter", "gamma": "gamma", "n": "max_new",
             "t": "temperature", "top_k": "top_k", "top_p": "top_p", "seed": "seed", "skip": "skip_adj"}


def link_query(prompt, preset, drafter, gamma, max_new, temperature, top_k, top_p, seed, skip, round_number) -> str:
    """The query string that reproduces a run and opens a round: a run is deterministic for its
    settings and seed, so the link carries settings, not results."""
    values = dict(prompt=prompt, pair=preset, drafter=drafter, gamma=gamma, n=max_new, t=temperature,
                  top_k=top_k, top_p=top_p, seed=seed, skip=int(bool(skip)), round=round_number)
    return "?" + urllib.parse.urlencode({k: _plain(v) for k, v in values.items() if v is not None})


def _plain(v):
    return int(v) if isinstance(v, float) and v == int(v) else v


def parse_link(params) -> tuple[dict, int | None] | None:
    """Control values (by output name) and the round to open, from a page's query parameters;
    None when the page was opened without a link. Bad values are checked when the run starts."""
    params = dict(params or {})
    if "prompt" not in params:
        return None
    controls = {}
    for key, name in LINK_KEYS.items():
        if key in params:
            value = params[key]
            controls[name] = value if name in ("prompt", "preset", "drafter") else _number(value)
    controls["skip_adj"] = str(params.get("skip", "0")) in ("1", "true", "True")
    round_number = _number(params.get("round"))
    return controls, int(round_number) if isinstance(round_number, (int, float)) else None


def _number(text):
    try:
        x = float(text)
    except (TypeError, ValueError):
        return text   # refused with a clear message by parse_request
    return int(x) if x == int(x) else x


def open_link(request: gr.Request):
    """On page load: a link's settings fill the form, the run starts, and its round opens."""
    parsed = parse_link(getattr(request, "query_params", None) if request is not None else None)
    if parsed is None:
        # No link: change nothing. An empty dict is not read as outputs by name, and a generator
        # that yields nothing blanks every output, so skip one output explicitly.
        yield dict(status=gr.skip())
        return
    controls, round_number = parsed
    current = dict(zip(CONTROLS, [DEFAULT_PROMPT, BUNDLED, "model", 4, 64, 1.0, 0, 1.0, 0, False, False]))
    current.update(controls)
    yield dict(controls)
    last = {}
    for update in run_generation(*(current[n] for n in CONTROLS)):
        last = update
        yield update
    if round_number is not None and isinstance(last.get("run_state"), Generation):
        yield show_step(last["run_state"], round_number, None)


def _snapshot(gen: Generation) -> Generation:
    """A copy safe to read while the decoder thread goes on appending to the original."""
    snap = copy.copy(gen)
    snap.rounds = list(gen.rounds)
    snap.token_ids = list(gen.token_ids)
    snap.token_text = dict(gen.token_text)
    return snap


# ---------------------------------------------------------------- callbacks

class _Cancelled(Exception):
    pass


@gpu
def decode_stream(prompt: str, preset: str, settings: RunSettings, stop: threading.Event):
    """Run the decoder in a thread; yield ('round', generation_so_far) after every round, then
    ('done', generation). Errors come out as ('error', exception)."""
    out: queue.Queue = queue.Queue()

    def on_round(rnd, gen_so_far):
        if stop.is_set():
            raise _Cancelled()
        out.put(("round", _snapshot(gen_so_far)))

    def work():
        try:
            pair = get_pair(preset)
            limits.check_prompt_tokens(len(pair.encode(prompt)[1]))
            gen = speculative_generate(pair, prompt, settings, on_round=on_round)
            out.put(("done", gen))
        except _Cancelled:
            out.put(("cancelled", None))
        except Exception as err:   # reported to the user by the generator below
            out.put(("error", err))

    threading.Thread(target=work, daemon=True, name="specdec-decode").start()
    while True:
        kind, payload = out.get()
        while kind == "round" and not out.empty():   # rounds came faster than the page redraws:
            nxt = out.get()                            # show only the latest (no backlog on a GPU)
            if nxt[0] != "round":
                out.put(nxt)   # keep the end for the next turn
                break
            kind, payload = nxt
        yield kind, payload
        if kind != "round":
            return


@gpu
def timed_comparison(prompt: str, preset: str, settings: RunSettings) -> tuple[Generation, Generation]:
    """The speculative run again, unstreamed (the same seed gives the same tokens), then the target
    alone: both timed the same way, back to back, with no page being redrawn meanwhile. The
    streamed run is not timed fairly: the page's figures are built while it decodes."""
    pair = get_pair(preset)
    spec = speculative_generate(pair, prompt, settings)
    ar = autoregressive_generate(pair, prompt, settings)
    return spec, ar


def run_generation(prompt, preset, drafter, gamma, max_new_tokens, temperature, top_k, top_p, seed,
                   skip_adjustment, compare_ar):
    """Generator behind the Run button (api_name 'generate'): streams one update per round."""
    prompt, preset, settings = parse_request(prompt, preset, drafter, gamma, max_new_tokens, temperature,
                                             top_k, top_p, seed, bool(skip_adjustment))
    stop = threading.Event()
    status = "Decoding…" if is_loaded(preset) else f"Loading {PRESETS[preset].label}…"
    yield dict(status=status, export_file=None)
    first = True
    gen = None
    try:
        for kind, payload in decode_stream(prompt, preset, settings, stop):
            if kind == "error":
                raise _error(_describe(payload))
            if kind != "round":
                gen = payload
                break
            status = f"Round {len(payload.rounds)} · {payload.stats.new_tokens}/{settings.max_new_tokens} tokens…"
            update = streamed(status, payload)
            if first:   # open the first round in the step viewer right away
                first = False
                update.update(step_view(payload, 0, None))
            yield update
    finally:
        stop.set()
    if gen is None:   # cancelled
        return
    timed = ar = None
    if compare_ar:
        yield dict(status="Timing the run again, unstreamed, and the target alone…",
                   metrics=charts.metrics_markdown(gen, running=True))
        try:
            timed, ar = timed_comparison(prompt, preset, settings)
        except (ValueError, ModelLoadError) as err:
            raise _error(_describe(err)) from None
    yield final_view(gen, ar, status=_done_status(timed or gen, ar), timed=timed)


def _describe(err: Exception) -> str:
    return user_message(err)   # out of memory frees and says so; server paths never shown


def _done_status(gen: Generation, ar: Generation | None) -> str:
    s = gen.stats
    msg = f"Done: {s.new_tokens} tokens in {s.rounds} rounds, {s.wall_seconds:.2f} s ({s.stopped.replace('_', ' ')})."
    if ar is not None:
        msg += f" Autoregressive: {ar.stats.wall_seconds:.2f} s → speedup {speedup(s, ar.stats):.2f}×."
    return msg


def streamed(status: str, gen: Generation) -> dict:
    """What changes while a run streams: the text, the timeline, the metrics (not the step viewer)."""
    return dict(status=status, text=charts.text_html(gen), timeline=charts.timeline_figure(gen),
                metrics=charts.metrics_markdown(gen, running=True), run_state=gen, round_slider=_slider(gen),
                timeline_table=_frame(charts.timeline_rows(gen), charts.TIMELINE_HEADERS))


def first_interesting_round(gen: Generation) -> int:
    """Open the first round with a rejection (it shows the residual), else the first round."""
    return next((r.index for r in gen.rounds if r.ending not in (Ending.BONUS, Ending.PLAIN)), 0)


def final_view(gen: Generation, ar: Generation | None = None, status: str = "",
               round_index: int | None = None, timed: Generation | None = None) -> dict:
    if round_index is None:
        round_index = first_interesting_round(gen)
    return dict(status=status, text=charts.text_html(gen, round_index),
                timeline=charts.timeline_figure(gen, round_index),
                metrics=charts.metrics_markdown(gen, ar, timed=timed),
                time_plot=charts.time_figure(timed or gen, ar),
                run_state=gen, round_slider=_slider(gen, round_index), export_file=None,
                timeline_table=_frame(charts.timeline_rows(gen), charts.TIMELINE_HEADERS), title=gen.title,
                side_by_side=charts.side_by_side_html(None, None, ""), **step_view(gen, round_index, None))


def import_trace(file) -> dict:
    """Load an exported JSON trace (api_name 'import_trace'): replays the run without models."""
    if file is None:
        raise _error("Choose a specdec trace (.json) to import.")
    path = file if isinstance(file, str) else getattr(file, "name", None) or file.get("path")
    try:
        text = read_trace_file(path, limits.import_limits())   # refused by its size before it is read
    except ValueError as err:
        raise _error(f"Not a valid specdec trace: {err}") from None
    try:
        gen = load_trace(text, limits.import_limits())
    except ValueError as err:
        raise _error(f"Not a valid specdec trace: {err}") from None
    if not gen.settings.speculative or not gen.rounds:
        raise _error("This trace has no speculative rounds to show (an autoregressive run?).")
    titled = f" “{gen.title}”" if gen.title else ""
    return final_view(gen, None, status=f"Imported a trace{charts.md_text(titled)}: {gen.stats.new_tokens} tokens, "
                                        f"{len(gen.rounds)} rounds (replayed without models).")


def show_step(gen: Generation | None, round_number, position) -> dict:
    """Step viewer for a 1-based round number and a 0-based position (api_name 'show_step')."""
    if gen is None or not gen.rounds:
        return step_view(None, 0, None)
    r = max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))
    return dict(text=charts.text_html(gen, r), timeline=charts.timeline_figure(gen, r),
                round_slider=gr.update(value=r + 1), **step_view(gen, r, position))


def open_round(gen: Generation | None, round_number) -> dict:
    """Open a round (1-based) at its most telling position."""
    return show_step(gen, round_number, None)


def step_by(gen: Generation | None, round_number, delta: int) -> dict:
    n = len(gen.rounds) if gen is not None else 1
    return show_step(gen, max(1, min(int(round_number or 1) + delta, n)), None)


def click_round(gen: Generation | None, payload: str) -> dict:
    """A click on the timeline (set by the page's JS as 'round:position:nonce')."""
    try:
        r, p = (int(v) for v in str(payload).split(":")[:2])
    except ValueError:
        return {} if gen is not None else show_step(None, 1, None)
    return show_step(gen, r + 1, p if p >= 0 else None)


def position_changed(gen: Generation | None, round_number, position) -> dict:
    if gen is None or not gen.rounds:
        return {}
    r = max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))
    return step_view(gen, r, position)


def max_new_for(preset_key, current):
    """A pair's context caps max new tokens; hub pairs (context unknown before loading) allow
    up to SPECDEC_MAX_NEW_TOKENS and are checked when they run."""
    limit = limits.max_new_tokens_for(context_of(preset_key))
    info = (f"The bundled pair's context is {limit} tokens (prompt included)." if preset_key == BUNDLED
            else f"Up to {limits.MAX_NEW_TOKENS}, within the models' context.")
    value = current if isinstance(current, (int, float)) and current <= limit else min(64, limit)
    return gr.update(maximum=limit, value=value, info=info)


# ---------------------------------------------------------------- layout

def build_app() -> gr.Blocks:
    """The layout, declared once, and the wiring of its events to the handlers above."""
    preset_choices = [(p.label, key) for key, p in PRESETS.items()]
    context = context_of(BUNDLED)
    v = SimpleNamespace()   # every component an output name refers to
    with gr.Blocks(title="specdec: exact speculative decoding, step by step") as demo:
        v.run_state = gr.State(None)          # the current Generation (or None)
        v.selection = gr.State((None, None))  # (round_index, position_index) shown in the step viewer
        gr.Markdown("# specdec — speculative decoding, step by step\n"
                    "A small **draft** model proposes γ tokens; the **target** checks them all in one forward "
                    "pass and accepts or rejects each. Every token below is marked by its fate.")
        with gr.Tab("Decode"):
            with gr.Row():
                with gr.Column(scale=2):
                    v.prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, elem_id="prompt")
                    with gr.Row():
                        v.preset = gr.Dropdown(preset_choices, value=BUNDLED, label="Model pair",
                                             info="Hub pairs need the network; offline only the bundled pair loads.",
                                             elem_id="preset")
                        v.drafter = gr.Radio([(label, key) for key, label in DRAFTERS.items()],
                                           value="model", label="Drafter", elem_id="drafter")
                    with gr.Row():
                        run_btn = gr.Button("Run", variant="primary", elem_id="run")
                        v.skip_adj = gr.Checkbox(False, label=f"{LOOKS[Ending.BIASED_P].symbol} skip residual "
                                               "adjustment (biased)",
                                               info="After a rejection sample p instead of the residual.",
                                               elem_id="skip-adjustment")
                        v.compare = gr.Checkbox(False, label="compare with autoregressive", elem_id="compare-ar")
                with gr.Column(scale=1):
                    v.gamma = gr.Slider(1, limits.MAX_GAMMA, value=4, step=1, label="γ (drafts per round)",
                                        elem_id="gamma")
                    most = limits.max_new_tokens_for(context)
                    v.max_new = gr.Slider(1, most, value=min(64, most), step=1,
                                        label="max new tokens",
                                        info=f"The bundled pair's context is {context} tokens (prompt included).",
                                        elem_id="max-new")
                    v.temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature (0 = greedy)",
                                            elem_id="temperature")
                    with gr.Row():
                        v.top_k = gr.Number(0, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
                        v.top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p", elem_id="top-p")
                        v.seed = gr.Number(0, label="seed", precision=0, minimum=0, elem_id="seed")
            gr.Examples(EXAMPLES, [v.prompt, v.drafter, v.gamma, v.temperature], label="Example prompts")
            v.status = gr.Markdown("Press **Run** (defaults: T = 1, γ = 4 — expect some rejections).",
                                   elem_id="run-status")
            v.text = gr.HTML(charts.text_html(None), elem_id="token-text")
            v.timeline = gr.Plot(charts.timeline_figure(None), label="Timeline (click a column to open its round)",
                                 elem_id="timeline")
            with gr.Accordion("Timeline as a table", open=False):
                v.timeline_table = gr.Dataframe(headers=charts.TIMELINE_HEADERS, interactive=False,
                                                elem_id="timeline-table")
            with gr.Accordion("Run metrics", open=True):
                v.metrics = gr.Markdown(charts.metrics_markdown(None), elem_id="metrics", latex_delimiters=[])
                v.time_plot = gr.Plot(charts.time_figure(None, None), label="where the time went", elem_id="time-chart")
            with gr.Accordion("Side by side: the same run with the other rule, or the target alone", open=False):
                with gr.Row():
                    other_rule_btn = gr.Button("re-run with the other rule (exact ↔ skip)", elem_id="rerun-rule",
                                               size="sm")
                    target_btn = gr.Button("re-run with the target alone", elem_id="rerun-target", size="sm")
                v.side_by_side = gr.HTML(charts.side_by_side_html(None, None, ""), elem_id="side-by-side")
            click_box = gr.Textbox(elem_id="timeline-click", elem_classes=["specdec-hidden"], show_label=False,
                                   container=False)
            gr.Markdown("## Step viewer\nClick a timeline column, drag the slider, or press ← / → (outside text "
                        "fields) to step through the rounds.", elem_id="step-viewer")
            with gr.Row():
                prev_btn = gr.Button("◀ previous round", elem_id="prev-round", size="sm")
                v.round_slider = gr.Slider(1, 2, value=1, step=1, label="round", interactive=False, elem_id="round")
                next_btn = gr.Button("next round ▶", elem_id="next-round", size="sm")
            marks = ", ".join(f"{LOOKS[s].symbol} {s.value}" for s in Status)
            v.position = gr.Radio([], label=f"drafted position ({marks})", elem_id="position")
            v.caption = gr.Markdown("", elem_id="round-caption")
            v.note = gr.Textbox("", label=f"your note on this round (kept in the export, up to {MAX_NOTE} characters)",
                                lines=1, max_lines=4, interactive=False, elem_id="round-note")
            with gr.Row():
                with gr.Column():
                    v.pq_plot = gr.Plot(charts.pq_figure(None), label="p (target) and q (draft)", elem_id="pq-chart")
                    with gr.Accordion("p and q as a table", open=False):
                        v.pq_table = gr.Dataframe(headers=charts.PQ_HEADERS, elem_id="pq-table", interactive=False,
                                                  column_widths=["22%", "9%", "17%", "17%", "17%", "18%"], wrap=True)
                with gr.Column():
                    v.acc_plot = gr.Plot(charts.acceptance_figure(None), label="acceptance test",
                                         elem_id="accept-chart")
                    with gr.Accordion("acceptance test as a table", open=False):
                        v.acc_table = gr.Dataframe(headers=["quantity", "value"], elem_id="accept-table",
                                                   interactive=False)
            v.end_plot = gr.Plot(charts.end_figure(None), label="how the round ended: residual / p / bonus",
                                 elem_id="end-chart")
            with gr.Accordion("end of round as a table", open=False):
                v.end_table = gr.Dataframe(headers=charts.END_HEADERS, elem_id="end-table", interactive=False,
                                           column_widths=["20%", "8%", "14%", "14%", "14%", "15%", "15%"], wrap=True)
            with gr.Row():
                with gr.Column():
                    v.title = gr.Textbox("", label="title of this run (kept in the export)", max_lines=1,
                                         elem_id="run-title")
                    with gr.Row():
                        export_btn = gr.Button("Export this run (JSON trace)", elem_id="export-run", size="sm")
                        link_btn = gr.Button("Copy a link to this step", elem_id="copy-link", size="sm")
                    link_box = gr.Textbox("", label="link: the same settings and seed reproduce the run and open "
                                          "this round", max_lines=1, buttons=["copy"], elem_id="link")
                    v.export_file = gr.File(label="exported trace", interactive=False, elem_id="export")
                import_file = gr.File(label="Import a trace (JSON) to replay it without models",
                                      file_types=[".json"], type="filepath", elem_id="import")
        with gr.Tab("Exactness lab"):
            if build_lab_tab is not None:
                build_lab_tab(v.run_state, v.selection)
            else:
                gr.Markdown("The exactness lab is not installed in this build.")
        with gr.Tab("How it works"):
            gr.Markdown((STATIC / "how_it_works.md").read_text(encoding="utf-8"),
                        latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                          {"left": "$", "right": "$", "display": False}])

        main_out = [getattr(v, n) for n in MAIN_OUTPUTS]
        step_out = [getattr(v, n) for n in STEP_VIEW_OUTPUTS]
        step_views = [getattr(v, n) for n in STEP_OUTPUTS]

        def named(result: dict) -> dict:
            return {getattr(v, n): value for n, value in result.items()}

        def run(*args):
            for update in run_generation(*args):
                yield named(update)

        controls = [getattr(v, n) for n in CONTROLS]
        run_evt = dict(fn=run, inputs=controls, outputs=main_out, api_name="generate",
                       show_progress="full", show_progress_on=[v.status], concurrency_limit=2,
                       concurrency_id="decode")
        run_btn.click(**run_evt)
        v.prompt.submit(**{**run_evt, "api_name": False})
        import_file.upload(lambda f: named(import_trace(f)), [import_file], main_out, api_name="import_trace",
                           show_progress_on=[v.status])
        quiet = dict(show_progress="hidden")
        slider_in = [v.run_state, v.round_slider]
        v.round_slider.release(lambda g, r: named(open_round(g, r)), slider_in, step_out, api_name="show_step",
                               trigger_mode="always_last", **quiet)
        v.round_slider.input(lambda g, r: named(open_round(g, r)), slider_in, step_out, api_name=False,
                             trigger_mode="always_last", **quiet)
        prev_btn.click(lambda g, r: named(step_by(g, r, -1)), slider_in, step_out, api_name=False, **quiet)
        next_btn.click(lambda g, r: named(step_by(g, r, +1)), slider_in, step_out, api_name=False, **quiet)
        click_box.change(lambda g, c: named(click_round(g, c)), [v.run_state, click_box], step_out, api_name=False,
                         trigger_mode="always_last", **quiet)
        v.preset.change(max_new_for, [v.preset, v.max_new], [v.max_new], api_name=False, **quiet)
        export_btn.click(lambda g, t: named(export_trace(g, t)), [v.run_state, v.title], [v.export_file],
                         api_name="export_trace")
        # Notes edit the run in run_state: one queue slot, so each reads what the last one wrote.
        notes = dict(concurrency_id="notes", concurrency_limit=1, api_name=False, trigger_mode="always_last", **quiet)
        v.note.input(lambda g, r, t: named(set_note(g, r, t)), [v.run_state, v.round_slider, v.note], [v.run_state],
                     **notes)
        other_rule_btn.click(lambda g, k: named(side_by_side(g, k, "other rule")), [v.run_state, v.preset],
                             [v.side_by_side], api_name="side_by_side_rule", concurrency_id="decode",
                             show_progress_on=[v.side_by_side])
        target_btn.click(lambda g, k: named(side_by_side(g, k, "target alone")), [v.run_state, v.preset],
                         [v.side_by_side], api_name="side_by_side_target", concurrency_id="decode",
                         show_progress_on=[v.side_by_side])
        # The link is built on the server (what a run needs) and completed in the page (its address).
        link_btn.click(link_query, [*controls[:-1], v.round_slider], [link_box], api_name=False, **quiet).then(
            None, [link_box], [link_box], js="(q) => { const url = location.origin + location.pathname + q; "
            "if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {}); return url; }")

        def follow_link(request: gr.Request):
            for update in open_link(request):
                yield named(update)

        demo.load(follow_link, None, [*controls, *main_out], api_name=False, show_progress_on=[v.status])
        v.position.input(lambda g, r, p: named(position_changed(g, r, p)), [v.run_state, v.round_slider, v.position],
                         step_views, api_name=False, **quiet)
    return demo


def launch_kwargs() -> dict:
    """Arguments for `demo.launch()` (Gradio 6 takes css/js/theme there)."""
    return dict(css=(STATIC / "app.css").read_text(), js=(STATIC / "app.js").read_text(),
                theme=gr.themes.Default(font=[gr.themes.Font("system-ui"), "sans-serif"]))
