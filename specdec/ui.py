"""The Gradio app: layout and short callbacks only (the math lives in the library, the figures in
`specdec.charts`). State is explicit: `run_state` holds the current `Generation` (or None),
`selection` holds `(round_index, position_index)` of the step shown in the step viewer
(both 0-based; position_index is None for a round that drafted nothing).

The decoder runs in a worker thread and hands every finished round to the Gradio generator
through a queue, so the text, the timeline and the metrics update while the run goes on.
"""

from __future__ import annotations

import copy
import json
import math
import queue
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr
import pandas as pd

from . import charts
from .decoding import DRAFTERS, MAX_GAMMA, MAX_NEW_TOKENS, autoregressive_generate, speculative_generate
from .models import BUNDLED, PRESETS, ModelLoadError, load_pair
from .sampling import SamplingConfig
from .trace import Generation

try:   # the exactness lab is built by its own module; the app works without it
    from .lab_ui import build_lab_tab
except ImportError:   # pragma: no cover - depends on what is installed
    build_lab_tab = None

try:   # Hugging Face ZeroGPU: borrow a GPU for the decoding call only
    import spaces

    gpu = spaces.GPU
except Exception:   # not on a Space (or no `spaces` package): a no-op decorator
    def gpu(fn=None, **_kw):
        return fn if fn is not None else (lambda f: f)

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
MAX_PROMPT_CHARS = 4000

# ---------------------------------------------------------------- models: loaded once per process

_PAIRS: dict = {}
_PAIRS_LOCK = threading.Lock()


def get_pair(key: str):
    """The model pair for a preset key, loaded on first use and shared by every session."""
    if key not in PRESETS:
        raise ModelLoadError(f"unknown model pair {key!r}; choose one of: {', '.join(PRESETS)}")
    with _PAIRS_LOCK:
        if key not in _PAIRS:
            _PAIRS[key] = load_pair(preset=key)
        return _PAIRS[key]


def preload(key: str = BUNDLED) -> threading.Thread:
    """Load a pair in the background at start-up so the first Run does not wait for it."""
    def work():
        try:
            get_pair(key)
        except ModelLoadError:
            pass   # reported when a run asks for it
    thread = threading.Thread(target=work, daemon=True, name="specdec-preload")
    thread.start()
    return thread


def _bundled_context() -> int:
    try:
        cfg = json.loads((Path(PRESETS[BUNDLED].target) / "config.json").read_text())
        return int(cfg.get("max_position_embeddings") or MAX_NEW_TOKENS)
    except (OSError, ValueError):
        return MAX_NEW_TOKENS


# ---------------------------------------------------------------- input checks

def _error(msg: str) -> gr.Error:
    return gr.Error(msg, print_exception=False)


def _as_int(value, name: str, lo: int, hi: int) -> int:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _error(f"{name} must be a number, got {value!r}") from None
    if math.isnan(x) or x != int(x) or not lo <= x <= hi:
        raise _error(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(x)


def _as_float(value, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _error(f"{name} must be a number, got {value!r}") from None
    if math.isnan(x) or math.isinf(x):
        raise _error(f"{name} must be a finite number, got {value!r}")
    return x


def parse_request(prompt, preset, drafter, gamma, max_new_tokens, temperature, top_k, top_p, seed) -> dict:
    """Check the controls' values; raise gr.Error with a message the user can act on."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise _error("The prompt is empty: type at least one word.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise _error(f"The prompt is {len(prompt)} characters long; keep it under {MAX_PROMPT_CHARS}.")
    if preset not in PRESETS:
        raise _error(f"Unknown model pair {preset!r}; choose one of: {', '.join(PRESETS)}.")
    if drafter not in DRAFTERS:
        raise _error(f"Unknown drafter {drafter!r}; choose 'model' or 'ngram'.")
    sampling = SamplingConfig(temperature=_as_float(temperature, "temperature"),
                              top_k=_as_int(top_k, "top-k", 0, 1_000_000),
                              top_p=_as_float(top_p, "top-p"))
    try:
        sampling.validate()
    except ValueError as err:
        raise _error(str(err)) from None
    return dict(prompt=prompt, preset=preset, drafter=drafter,
                gamma=_as_int(gamma, "γ (drafts per round)", 1, MAX_GAMMA),
                max_new_tokens=_as_int(max_new_tokens, "max new tokens", 1, MAX_NEW_TOKENS),
                sampling=sampling, seed=_as_int(seed, "seed", 0, 2**63 - 1))


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
    symbols = {"accepted": "✓", "rejected": "✗", "unused": "·"}
    r = gen.rounds[round_index]
    return [(f"{i + 1} {symbols[pos.status]} {charts.show_token(gen.token(pos.draft_token))}", i)
            for i, pos in enumerate(r.positions)]


def _frame(rows, headers) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=headers)


def step_outputs(gen: Generation | None, round_index, position) -> tuple:
    """Everything the step viewer shows for one (round, position)."""
    if gen is None or not gen.rounds:
        empty = charts.pq_figure(None)
        return ((None, None), gr.update(choices=[], value=None), empty, _frame([], charts.PQ_HEADERS),
                charts.acceptance_figure(None), _frame([], ["quantity", "value"]),
                charts.end_figure(None), _frame([], charts.END_HEADERS), "")
    r = max(0, min(int(round_index or 0), len(gen.rounds) - 1))
    n = len(gen.rounds[r].positions)
    pos = position if isinstance(position, int) and 0 <= position < n else default_position(gen, r)
    return ((r, pos), gr.update(choices=position_choices(gen, r), value=pos),
            charts.pq_figure(gen, r, pos), _frame(charts.pq_rows(gen, r, pos), charts.PQ_HEADERS),
            charts.acceptance_figure(gen, r, pos), _frame(charts.acceptance_rows(gen, r, pos), ["quantity", "value"]),
            charts.end_figure(gen, r), _frame(charts.end_rows(gen, r), charts.END_HEADERS),
            _round_caption(gen, r))


def _round_caption(gen: Generation, r: int) -> str:
    rnd = gen.rounds[r]
    text = "".join(gen.token(t) for t in rnd.emitted)
    return (f"**Round {r + 1} of {len(gen.rounds)}**: drafted {len(rnd.positions)}, accepted {rnd.n_accepted}, "
            f"ended by *{charts.OUTCOMES.get(rnd.end_rule, ('?',))[0]}*; emitted {len(rnd.emitted)} tokens: "
            f"`{json.dumps(text, ensure_ascii=False)}`")


def _slider(gen: Generation | None, value: int | None = None):
    n = len(gen.rounds) if gen is not None else 0
    if value is None:
        return gr.update(maximum=max(2, n), interactive=n > 1)
    return gr.update(maximum=max(2, n), value=value + 1, interactive=n > 1)


def _export(gen: Generation) -> str:
    folder = Path(tempfile.mkdtemp(prefix="specdec-"))
    path = folder / f"specdec-trace-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(gen.to_json(), encoding="utf-8")
    return str(path)


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
def decode_stream(req: dict, skip_adjustment: bool, stop: threading.Event):
    """Run the decoder in a thread; yield ('round', generation_so_far) after every round, then
    ('done', generation). Errors come out as ('error', exception)."""
    out: queue.Queue = queue.Queue()

    def on_round(rnd, gen_so_far):
        if stop.is_set():
            raise _Cancelled()
        out.put(("round", _snapshot(gen_so_far)))

    def work():
        try:
            pair = get_pair(req["preset"])
            gen = speculative_generate(pair, req["prompt"], gamma=req["gamma"],
                                       max_new_tokens=req["max_new_tokens"], sampling=req["sampling"],
                                       seed=req["seed"], skip_adjustment=skip_adjustment,
                                       drafter=req["drafter"], on_round=on_round)
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
def autoregressive_baseline(req: dict) -> Generation:
    """The target alone, same settings and seed: the baseline for the measured speedup."""
    return autoregressive_generate(get_pair(req["preset"]), req["prompt"], req["max_new_tokens"],
                                   req["sampling"], req["seed"])


def run_generation(prompt, preset, drafter, gamma, max_new_tokens, temperature, top_k, top_p, seed,
                   skip_adjustment, compare_ar):
    """Generator behind the Run button (api_name 'generate'): streams one update per round."""
    req = parse_request(prompt, preset, drafter, gamma, max_new_tokens, temperature, top_k, top_p, seed)
    stop = threading.Event()
    status = f"Loading {PRESETS[req['preset']].label}…" if req["preset"] not in _PAIRS else "Decoding…"
    yield _stream_update(status)
    first = True
    gen = None
    try:
        for kind, payload in decode_stream(req, bool(skip_adjustment), stop):
            if kind == "error":
                raise _error(_describe(payload))
            if kind != "round":
                gen = payload
                break
            g = payload
            status = f"Round {len(g.rounds)} · {g.stats.new_tokens}/{req['max_new_tokens']} tokens…"
            if first:   # open the first round in the step viewer right away
                first = False
                head = _stream_update(status, g)
                yield (*head[:-N_STEP - 1], *step_outputs(g, 0, None), head[-1])
            else:
                yield _stream_update(status, g)
    finally:
        stop.set()
    if gen is None:   # cancelled
        return
    ar = None
    if compare_ar:
        yield _stream_update("Running the autoregressive baseline (target only)…", gen, metrics_only=True)
        try:
            ar = autoregressive_baseline(req)
        except (ValueError, ModelLoadError) as err:
            raise _error(_describe(err)) from None
    yield final_outputs(gen, ar, status=_done_status(gen, ar))


def _describe(err: Exception) -> str:
    if isinstance(err, (ValueError, ModelLoadError)):
        return str(err)
    return f"The run failed: {type(err).__name__}: {err}"


def _done_status(gen: Generation, ar: Generation | None) -> str:
    s = gen.stats
    msg = f"Done: {s.new_tokens} tokens in {s.rounds} rounds, {s.wall_seconds:.2f} s ({s.stopped.replace('_', ' ')})."
    if ar is not None and s.wall_seconds:
        msg += f" Autoregressive: {ar.stats.wall_seconds:.2f} s → speedup {ar.stats.wall_seconds / s.wall_seconds:.2f}×."
    return msg


# Output order shared by run, import and step callbacks.
def _stream_update(status, gen=None, metrics_only=False):
    """Updates for (status, text, timeline, metrics, run_state, round slider, export file) while
    streaming; the step viewer outputs are skipped."""
    skip = gr.skip()
    if gen is None:
        head = (status, skip, skip, skip, skip, skip, None)
    elif metrics_only:
        head = (status, skip, skip, charts.metrics_markdown(gen, running=True), skip, skip, skip)
    else:
        head = (status, charts.text_html(gen), charts.timeline_figure(gen), charts.metrics_markdown(gen, running=True),
                gen, _slider(gen), skip)
    table = _frame(charts.timeline_rows(gen), charts.TIMELINE_HEADERS) if gen is not None and not metrics_only else skip
    return head + (skip,) * N_STEP + (table,)


N_STEP = 9   # selection, position radio, 3 figures, 3 tables, round caption


def first_interesting_round(gen: Generation) -> int:
    """Open the first round with a rejection (it shows the residual), else the first round."""
    return next((r.index for r in gen.rounds if r.end_rule != "bonus"), 0)


def final_outputs(gen: Generation, ar: Generation | None = None, status: str = "", round_index: int | None = None):
    if round_index is None:
        round_index = first_interesting_round(gen)
    step = step_outputs(gen, round_index, None)
    return (status, charts.text_html(gen, round_index), charts.timeline_figure(gen, round_index),
            charts.metrics_markdown(gen, ar), gen, _slider(gen, round_index), _export(gen), *step,
            _frame(charts.timeline_rows(gen), charts.TIMELINE_HEADERS))


def import_trace(file):
    """Load an exported JSON trace (api_name 'import_trace'): replays the run without models."""
    if file is None:
        raise _error("Choose a specdec trace (.json) to import.")
    path = file if isinstance(file, str) else getattr(file, "name", None) or file.get("path")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _error(f"Could not read the file: {err}") from None
    try:
        gen = Generation.from_json(text)
    except ValueError as err:
        raise _error(f"Not a valid specdec trace: {err}") from None
    if gen.settings.get("mode", "speculative") != "speculative" or not gen.rounds:
        raise _error("This trace has no speculative rounds to show (an autoregressive run?).")
    return final_outputs(gen, None, status=f"Imported a trace: {gen.stats.new_tokens} tokens, "
                                            f"{len(gen.rounds)} rounds (replayed without models).")


def show_step(gen: Generation | None, round_number, position):
    """Step viewer for a 1-based round number and a 0-based position (api_name 'show_step')."""
    if gen is None or not gen.rounds:
        return (gr.skip(), gr.skip(), gr.skip(), *step_outputs(None, 0, None))
    r = max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))
    return (charts.text_html(gen, r), charts.timeline_figure(gen, r), gr.update(value=r + 1),
            *step_outputs(gen, r, position))


def open_round(gen: Generation | None, round_number):
    """Open a round (1-based) at its most telling position."""
    return show_step(gen, round_number, None)


def step_by(gen: Generation | None, round_number, delta: int):
    n = len(gen.rounds) if gen is not None else 1
    target = max(1, min(int(round_number or 1) + delta, n))
    return show_step(gen, target, None)


def click_round(gen: Generation | None, payload: str):
    """A click on the timeline (set by the page's JS as 'round:position:nonce')."""
    try:
        r, p = (int(v) for v in str(payload).split(":")[:2])
    except ValueError:
        return show_step(gen, 1, None) if gen is None else tuple(gr.skip() for _ in range(3 + N_STEP))
    return show_step(gen, r + 1, p if p >= 0 else None)


def position_changed(gen: Generation | None, round_number, position):
    if gen is None or not gen.rounds:
        return tuple(gr.skip() for _ in range(N_STEP))
    r = max(0, min(int(round_number or 1) - 1, len(gen.rounds) - 1))
    return step_outputs(gen, r, position)


# ---------------------------------------------------------------- layout

CSS = """
#run-status {min-height: 2.2em}
.specdec-hidden {display: none !important}
#token-text {max-height: 420px; overflow-y: auto}
"""

# Clicking a cell of the timeline opens its round: Plotly's click event writes
# "round:position:nonce" into a hidden textbox whose input event runs `click_round`.
JS = """
() => {
  const hook = () => {
    const gd = document.querySelector('#timeline .js-plotly-plot');
    if (!gd || !gd.on || gd.__specdecHooked === gd._fullLayout) return;
    gd.__specdecHooked = gd._fullLayout;
    if (gd.removeAllListeners) gd.removeAllListeners('plotly_click');
    gd.on('plotly_click', (ev) => {
      const pt = ev && ev.points && ev.points[0];
      if (!pt || !pt.customdata) return;
      const box = document.querySelector('#timeline-click textarea, #timeline-click input');
      if (!box) return;
      box.value = `${pt.customdata[0]}:${pt.customdata[1]}:${Date.now()}`;
      box.dispatchEvent(new Event('input', {bubbles: true}));
    });
  };
  setInterval(hook, 700);
  // Keyboard: left / right arrow (outside text fields and sliders) step through the rounds.
  document.addEventListener('keydown', (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.defaultPrevented) return;
    const t = ev.target;
    if (t && (t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName))) return;
    const id = ev.key === 'ArrowLeft' ? 'prev-round' : ev.key === 'ArrowRight' ? 'next-round' : null;
    const btn = id && document.querySelector(`#${id}`);
    if (btn) { ev.preventDefault(); btn.click(); }
  });
}
"""

HOW_IT_WORKS = r"""
## Speculative decoding, exactly

A small **draft** model (distribution $q$) proposes $\gamma$ tokens one after another. The big
**target** model (distribution $p$) scores all of them in **one** forward pass, which gives
$\gamma + 1$ rows of $p$. Then, left to right, each drafted token $x$ is tested:

1. draw $u \sim \mathcal U(0, 1)$ and **accept** $x$ if $u < \min\!\left(1, \frac{p(x)}{q(x)}\right)$;
2. at the first **rejection**, throw away the remaining drafts and draw the round's last token from the
   **residual** $\;r(x) = \dfrac{\max(0,\, p(x) - q(x))}{\sum_y \max(0,\, p(y) - q(y))}$;
3. if every draft passes, draw a **bonus** token from $p$ at position $\gamma + 1$ (it is free: that row of
   $p$ was computed in the same forward pass).

Each round costs one target forward and yields between 1 and $\gamma + 1$ tokens.

### α and β

At one position the chance that a draft is accepted is
$$\beta = \sum_x q(x)\min\!\left(1, \tfrac{p(x)}{q(x)}\right) = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q).$$
The app reports the **observed** acceptance rate $\alpha$ (accepted / tested drafts) beside the mean of
$\beta$ over the tested positions: they agree up to sampling noise.

### Expected tokens per round

If every position had the same acceptance probability $\alpha$, a round would produce
$$\mathbb E[\text{tokens per target forward}] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}$$
(Leviathan et al., eq. 1). The metrics panel shows the measured value beside this prediction.

### Why the output is exactly $p$

Take one position, draft $x \sim q$. The token emitted there is $x$ if accepted, otherwise a draw from $r$:
$$P(\text{emit } x) = q(x)\min\!\left(1, \tfrac{p(x)}{q(x)}\right) + (1 - \beta)\, r(x)
 = \min(p(x), q(x)) + (1-\beta)\,\frac{(p(x) - q(x))_+}{1 - \beta} = \min(p, q) + (p - q)_+ = p(x),$$
because $\sum_y (p(y) - q(y))_+ = 1 - \sum_y \min(p(y), q(y)) = 1 - \beta$. By induction over positions the whole
output has the target's distribution: **speculative decoding changes the speed, not the text distribution.**
With temperature $0$ both $p$ and $q$ are one-hot, so the output is exactly the target's greedy text.

### What skipping the adjustment does

If after a rejection you sample from $p$ instead of the residual, the emitted token has
$P(x) = \min(p, q) + (1 - \beta)\,p(x) \neq p(x)$: tokens the draft likes get counted twice. Turn on
**"skip residual adjustment (biased)"** to see such rounds marked *sampled from p*; the *Exactness lab* tab
measures the bias.

### The n-gram drafter

Prompt lookup proposes the tokens that followed the latest earlier occurrence of the last few tokens. Its $q$ is
one-hot, so a draft is accepted with probability $p(x)$ and a rejection samples $p$ with $x$ removed: still exact.
It shines on repetitive text.

### References

- Y. Leviathan, M. Kalman, Y. Matias. *Fast Inference from Transformers via Speculative Decoding.* ICML 2023.
- C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper. *Accelerating Large Language Model
  Decoding with Speculative Sampling.* arXiv:2302.01318, 2023.
"""


def build_app() -> gr.Blocks:
    preset_choices = [(p.label, key) for key, p in PRESETS.items()]
    context = _bundled_context()
    with gr.Blocks(title="specdec: exact speculative decoding, step by step") as demo:
        run_state = gr.State(None)        # the current Generation (or None)
        selection = gr.State((None, None))  # (round_index, position_index) shown in the step viewer
        gr.Markdown("# specdec — speculative decoding, step by step\n"
                    "A small **draft** model proposes γ tokens; the **target** checks them all in one forward "
                    "pass and accepts or rejects each. Every token below is marked by its fate.")
        with gr.Tab("Decode"):
            with gr.Row():
                with gr.Column(scale=2):
                    prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=3, elem_id="prompt")
                    with gr.Row():
                        preset = gr.Dropdown(preset_choices, value=BUNDLED, label="Model pair",
                                             info="Hub pairs need the network; offline only the bundled pair loads.",
                                             elem_id="preset")
                        drafter = gr.Radio([("small draft model", "model"), ("n-gram prompt lookup (no model)", "ngram")],
                                           value="model", label="Drafter", elem_id="drafter")
                    with gr.Row():
                        run_btn = gr.Button("Run", variant="primary", elem_id="run")
                        skip_adj = gr.Checkbox(False, label="⚠ skip residual adjustment (biased)",
                                               info="After a rejection sample p instead of the residual.",
                                               elem_id="skip-adjustment")
                        compare = gr.Checkbox(False, label="compare with autoregressive", elem_id="compare-ar")
                with gr.Column(scale=1):
                    gamma = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="γ (drafts per round)", elem_id="gamma")
                    max_new = gr.Slider(1, min(MAX_NEW_TOKENS, context), value=min(64, context), step=1,
                                        label="max new tokens", info=f"The bundled pair's context is {context} tokens.",
                                        elem_id="max-new")
                    temperature = gr.Slider(0, 2, value=1.0, step=0.05, label="temperature (0 = greedy)",
                                            elem_id="temperature")
                    with gr.Row():
                        top_k = gr.Number(0, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
                        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p", elem_id="top-p")
                        seed = gr.Number(0, label="seed", precision=0, minimum=0, elem_id="seed")
            gr.Examples(EXAMPLES, [prompt, drafter, gamma, temperature], label="Example prompts")
            status = gr.Markdown("Press **Run** (defaults: T = 1, γ = 4 — expect some rejections).", elem_id="run-status")
            text = gr.HTML(charts.text_html(None), elem_id="token-text")
            timeline = gr.Plot(charts.timeline_figure(None), label="Timeline (click a column to open its round)",
                               elem_id="timeline")
            with gr.Accordion("Timeline as a table", open=False):
                timeline_table = gr.Dataframe(headers=charts.TIMELINE_HEADERS, interactive=False,
                                              elem_id="timeline-table")
            with gr.Accordion("Run metrics", open=True):
                metrics = gr.Markdown(charts.metrics_markdown(None), elem_id="metrics", latex_delimiters=[])
            click_box = gr.Textbox(elem_id="timeline-click", elem_classes=["specdec-hidden"], show_label=False,
                                   container=False)
            gr.Markdown("## Step viewer\nClick a timeline column, drag the slider, or press ← / → (outside text fields) to step through the rounds.", elem_id="step-viewer")
            with gr.Row():
                prev_btn = gr.Button("◀ previous round", elem_id="prev-round", size="sm")
                round_slider = gr.Slider(1, 2, value=1, step=1, label="round", interactive=False, elem_id="round")
                next_btn = gr.Button("next round ▶", elem_id="next-round", size="sm")
            position = gr.Radio([], label="drafted position (✓ accepted, ✗ rejected, · unused)", elem_id="position")
            caption = gr.Markdown("", elem_id="round-caption")
            with gr.Row():
                with gr.Column():
                    pq_plot = gr.Plot(charts.pq_figure(None), label="p (target) and q (draft)", elem_id="pq-chart")
                    with gr.Accordion("p and q as a table", open=False):
                        pq_table = gr.Dataframe(headers=charts.PQ_HEADERS, elem_id="pq-table", interactive=False)
                with gr.Column():
                    acc_plot = gr.Plot(charts.acceptance_figure(None), label="acceptance test", elem_id="accept-chart")
                    with gr.Accordion("acceptance test as a table", open=False):
                        acc_table = gr.Dataframe(headers=["quantity", "value"], elem_id="accept-table",
                                                 interactive=False)
            end_plot = gr.Plot(charts.end_figure(None), label="how the round ended: residual / p / bonus",
                               elem_id="end-chart")
            with gr.Accordion("end of round as a table", open=False):
                end_table = gr.Dataframe(headers=charts.END_HEADERS, elem_id="end-table", interactive=False)
            with gr.Row():
                export_file = gr.File(label="Export this run (JSON trace)", interactive=False, elem_id="export")
                import_file = gr.File(label="Import a trace (JSON) to replay it without models",
                                      file_types=[".json"], type="filepath", elem_id="import")
        with gr.Tab("Exactness lab"):
            if build_lab_tab is not None:
                build_lab_tab(run_state, selection)
            else:
                gr.Markdown("The exactness lab is not installed in this build.")
        with gr.Tab("How it works"):
            gr.Markdown(HOW_IT_WORKS, latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                                        {"left": "$", "right": "$", "display": False}])

        step_views = [selection, position, pq_plot, pq_table, acc_plot, acc_table, end_plot, end_table, caption]
        main_views = [status, text, timeline, metrics, run_state, round_slider, export_file, *step_views,
                      timeline_table]
        controls = [prompt, preset, drafter, gamma, max_new, temperature, top_k, top_p, seed, skip_adj, compare]
        run_evt = dict(fn=run_generation, inputs=controls, outputs=main_views, api_name="generate",
                       show_progress="full", show_progress_on=[status], concurrency_limit=2,
                       concurrency_id="decode")
        run_btn.click(**run_evt)
        prompt.submit(**{**run_evt, "api_name": False})
        import_file.upload(import_trace, [import_file], main_views, api_name="import_trace",
                           show_progress_on=[status])
        step_out = [text, timeline, round_slider, *step_views]
        round_slider.release(open_round, [run_state, round_slider], step_out, api_name="show_step",
                             show_progress="hidden", trigger_mode="always_last")
        round_slider.input(open_round, [run_state, round_slider], step_out, api_name=False,
                           show_progress="hidden", trigger_mode="always_last")
        prev_btn.click(lambda g, r: step_by(g, r, -1), [run_state, round_slider], step_out, api_name=False,
                       show_progress="hidden")
        next_btn.click(lambda g, r: step_by(g, r, +1), [run_state, round_slider], step_out, api_name=False,
                       show_progress="hidden")
        click_box.change(click_round, [run_state, click_box], step_out, api_name=False, show_progress="hidden",
                        trigger_mode="always_last")
        preset.change(_max_new_for, [preset, max_new], [max_new], api_name=False, show_progress="hidden")
        position.input(position_changed, [run_state, round_slider, position], step_views, api_name=False,
                       show_progress="hidden")
    return demo


def _max_new_for(preset_key, current):
    """The bundled pair's context caps max new tokens; hub pairs allow up to MAX_NEW_TOKENS."""
    limit = _bundled_context() if preset_key == BUNDLED else MAX_NEW_TOKENS
    info = (f"The bundled pair's context is {limit} tokens." if preset_key == BUNDLED
            else f"Up to {MAX_NEW_TOKENS}, within the models' context.")
    value = current if isinstance(current, (int, float)) and current <= limit else min(64, limit)
    return gr.update(maximum=min(MAX_NEW_TOKENS, limit), value=value, info=info)


def launch_kwargs() -> dict:
    """Arguments for `demo.launch()` (Gradio 6 takes css/js/theme there)."""
    return dict(css=CSS, js=JS, theme=gr.themes.Default(font=[gr.themes.Font("system-ui"), "sans-serif"]))
