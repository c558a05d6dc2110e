"""The "Exactness lab" tab: layout and callbacks only; the math is in `lab`, the figures in `lab_charts`.

The app calls `build_lab_tab(run_state, selection)` inside its `gr.Tab("Exactness lab")`.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from . import lab, lab_charts

COLUMNS = ["token", "p", "q"]
DEFAULT_PRESET = "over-confident"
DEFAULT_SAMPLES = 100_000

INTRO = """
### Is the verify step exact? Test one drafted position a million times.
A draft **x ~ q** is accepted when **u < p(x)/q(x)**; on a rejection the exact rule samples the residual
**norm(max(0, p − q))**. Then the emitted token follows **p** exactly:
P[emitted x] = q(x)·min(1, p(x)/q(x)) + (1 − β)·residual(x) = min(p, q)(x) + max(0, p − q)(x) = p(x),
with β = Σ min(p, q) = 1 − TV(p, q) the acceptance rate. The shortcuts (*skip adjustment*: sample p on a
rejection; *accept every draft*; *greedy match*) run through the very same `verify` function and miss p.
Edit p and q below (2–20 tokens; rows that do not sum to 1 are normalised), pick a preset, or take a real
position from the last run of the **Decode** tab.
"""


def _error(msg: str) -> gr.Error:
    return gr.Error(msg, print_exception=False)


def _frame(tokens, p, q) -> pd.DataFrame:
    return pd.DataFrame({"token": list(tokens), "p": [round(float(x), 6) for x in p],
                         "q": [round(float(x), 6) for x in q]})


def _table(headers_rows) -> pd.DataFrame:
    headers, rows = headers_rows
    return pd.DataFrame(rows, columns=headers)


def parse_frame(df) -> tuple[list[str], list[float], list[float]]:
    """The edited table -> (tokens, p, q); ValueError naming the bad cell."""
    if df is None:
        raise ValueError("the table is empty")
    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame(df)
    if list(df.columns)[:3] != COLUMNS:
        if df.shape[1] < 3:
            raise ValueError("the table needs the columns token, p, q")
        df = df.iloc[:, :3]
        df.columns = COLUMNS
    df = df[~df.apply(lambda row: all(str(v).strip() in ("", "nan", "None") for v in row), axis=1)]
    tokens = [str(t).strip() for t in df["token"]]
    cols = {}
    for name in ("p", "q"):
        values = []
        for i, v in enumerate(df[name]):
            try:
                values.append(float(str(v).strip()))
            except ValueError:
                raise ValueError(f"{name} in row {i + 1} ({tokens[i] or 'unnamed'}) is not a number: {v!r}") from None
        cols[name] = values
    return tokens, cols["p"], cols["q"]


def load_preset(name):
    if not name:
        return gr.update(), gr.update()
    tokens, p, q = lab.preset(name)
    return _frame(tokens, p, q), f"Preset **{name}**: {lab.PRESETS[name].description} Press **Run the lab**."


def take_from_run(gen, selection):
    """Fill p and q from the drafted position shown in the Decode tab's step viewer (or the first one)."""
    places = lab.drafted_positions(gen)
    if not places:
        raise _error("No drafted position yet: run a generation in the Decode tab first.")
    r, i = selection if isinstance(selection, (tuple, list)) and len(selection) == 2 else (None, None)
    if (r, i) not in places:
        r, i = places[0]
    tokens, p, q = lab.from_position(gen, r, i)
    pos = gen.rounds[r].positions[i]
    msg = (f"Taken from the last run: round {r + 1}, drafted position {i + 1} "
           f"(draft {lab.display_token(gen.token(pos.draft_token))!r}, {pos.status}, β = {pos.beta:.4f}). "
           f"{len(tokens) - 1} tokens plus “{lab.OTHER}” carrying the remaining mass. Press **Run the lab**.")
    return _frame(tokens, p, q), msg, gr.update(value=None)


def run_lab(df, samples, seed):
    try:
        tokens, p, q = parse_frame(df)
        tokens, p, q, notes = lab.validate(tokens, p, q)
        if samples is None or seed is None:
            raise ValueError("set the number of samples and the seed")
        if float(samples) != int(samples) or float(seed) != int(seed) or int(seed) < 0:
            raise ValueError("samples and seed must be whole numbers (seed >= 0)")
        result = lab.run(tokens, p, q, int(samples), int(seed))
    except ValueError as err:
        raise _error(str(err)) from None
    exact = result.results[lab.Rule.EXACT]
    verdicts = ", ".join(f"{lab.RULE_SHORT[r]}: {'rejected' if x.rejects_p else 'not rejected'}"
                         for r, x in result.results.items())
    status = (f"{result.n:,} trials per rule, seed {result.seed}, {len(tokens)} tokens, "
              f"β = Σ min(p, q) = {result.beta:.4f} (observed under the exact rule: {exact.acceptance_observed:.4f}). "
              f"Chi-square test of “emitted tokens follow p” at α = {lab.ALPHA}: {verdicts}. "
              f"({result.seconds:.2f} s)" + "".join(f"\n\nNote: {n}." for n in notes))
    return (status, _frame(tokens, p, q), _table(lab.summary_table(result)),
            lab_charts.decomposition_figure(result), _table(lab.decomposition_table(result)),
            lab_charts.histogram_figure(result), _table(lab.histogram_table(result)),
            lab_charts.convergence_figure(result), _table(lab.convergence_table(result)),
            lab_charts.acceptance_figure(result), _table(lab.acceptance_table(result)))


def build_lab_tab(run_state: gr.State, selection: gr.State) -> None:
    """Lay out the lab inside the caller's current container (the app's "Exactness lab" tab)."""
    tokens, p, q = lab.preset(DEFAULT_PRESET)
    gr.Markdown(INTRO, elem_id="lab-intro")
    with gr.Row():
        with gr.Column(scale=2):
            table = gr.Dataframe(_frame(tokens, p, q), headers=COLUMNS, datatype=["str", "number", "number"],
                                 interactive=True,
                                 label="p (target) and q (draft) — edit cells, add or remove rows",
                                 elem_id="lab-dist")
        with gr.Column(scale=1):
            preset = gr.Dropdown(list(lab.PRESETS), value=DEFAULT_PRESET, label="Preset", elem_id="lab-preset")
            from_run = gr.Button("Take from the last run (Decode tab)", elem_id="lab-from-run")
            samples = gr.Number(DEFAULT_SAMPLES, label=f"samples per rule (up to {lab.MAX_SAMPLES:,})",
                                precision=0, minimum=1, maximum=lab.MAX_SAMPLES, elem_id="lab-samples")
            seed = gr.Number(0, label="seed", precision=0, minimum=0, elem_id="lab-seed")
            run_btn = gr.Button("Run the lab", variant="primary", elem_id="lab-run")
    status = gr.Markdown("Pick a preset or edit the table, then press **Run the lab**.", elem_id="lab-status")
    summary = gr.Dataframe(interactive=False,
                           label="Per rule: TV distance, chi-square test, acceptance rate", elem_id="lab-summary")
    plots, tables = [], []
    for key, label in [("decomposition", "The proof: where each emitted token comes from (closed form)"),
                       ("histogram", "Monte Carlo: emitted tokens against p"),
                       ("convergence", "Convergence: TV(empirical, p) against samples"),
                       ("acceptance", "Acceptance rate: observed against β")]:
        plots.append(gr.Plot(label=label, elem_id=f"lab-{key}"))
        with gr.Accordion(f"Numbers behind this chart ({key})", open=False):
            tables.append(gr.Dataframe(interactive=False, elem_id=f"lab-{key}-table"))

    preset.input(load_preset, [preset], [table, status], api_name="lab_preset")
    from_run.click(take_from_run, [run_state, selection], [table, status, preset], api_name="lab_from_run")
    outputs = [status, table, summary]
    for plot, tab in zip(plots, tables):
        outputs += [plot, tab]
    run_btn.click(run_lab, [table, samples, seed], outputs, api_name="lab_run",
                  show_progress_on=[status])
