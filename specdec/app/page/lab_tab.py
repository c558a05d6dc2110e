"""The "Exactness lab" tab: layout and callbacks only; the math is in `specdec.explain.lab`, the figures in
`lab_charts`.

The app calls `build_lab_tab(run_state, selection)` inside its `gr.Tab("Exactness lab")`. The
callbacks are plain functions returning {output name: value} (testable without a page); the tab
maps each name to its component, so every Gradio handler returns {component: value}.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pandas as pd

from ...core.checks import seed as seed_number
from ...core.checks import whole_number
from ...explain import lab
from ...explain.looks import table_number, visible_token
from ...explain.taken import taken_rows
from ..server import limits
from ..server.serving import CheckedNumber
from ..shows import lab_charts
from ..shows.messages import error

COLUMNS = ["token", "p", "q"]
DEFAULT_PRESET = "over-confident"
DEFAULT_SAMPLES = 100_000

# Each chart with its table fallback: name -> (label, figure builder, table builder).
VIEWS = {
    "decomposition": ("The proof: where each emitted token comes from (closed form)",
                      lab_charts.decomposition_figure, lab.decomposition_table),
    "histogram": ("Monte Carlo: emitted tokens against p", lab_charts.histogram_figure, lab.histogram_table),
    "convergence": ("Convergence: TV(empirical, p) against samples",
                    lab_charts.convergence_figure, lab.convergence_table),
    "acceptance": ("Acceptance rate: observed against β", lab_charts.acceptance_figure, lab.acceptance_table),
}
# Output names, in the order the API returns them (gradio_client gives a tuple in this order).
RESULT_OUTPUTS = ["summary"] + [n for name in VIEWS for n in (name, f"{name}_table")]
# New p and q clear the last lab run's results: they belong to the old table.
PRESET_OUTPUTS = ["table", "status"] + RESULT_OUTPUTS
FROM_RUN_OUTPUTS = ["table", "status", "preset"] + RESULT_OUTPUTS
RUN_OUTPUTS = ["status", "table"] + RESULT_OUTPUTS

INTRO = f"""
### Is the verify step exact? Test one drafted position many times
({DEFAULT_SAMPLES:,} trials per rule by default, up to {limits.MAX_LAB_SAMPLES:,}).
A draft **x ~ q** is accepted when **u < p(x)/q(x)**; on a rejection the exact rule samples the residual
**norm(max(0, p − q))**. Then the emitted token follows **p** exactly:
P[emitted x] = q(x)·min(1, p(x)/q(x)) + (1 − β)·residual(x) = min(p, q)(x) + max(0, p − q)(x) = p(x),
with β = Σ min(p, q) = 1 − TV(p, q) the acceptance rate. The shortcuts (*skip adjustment*: sample p on a
rejection; *accept every draft*; *greedy match*) run through the very same `verify` function and miss p.
Edit p and q below (2–20 tokens; rows that do not sum to 1 are normalised), pick a preset, or take a real
position from the last run of the **Decode** tab.
"""


def _frame(tokens, p, q) -> pd.DataFrame:
    return pd.DataFrame({"token": list(tokens), "p": [table_number(float(x)) for x in p],
                         "q": [table_number(float(x)) for x in q]})


def _table(headers_rows) -> pd.DataFrame:
    headers, rows = headers_rows
    return pd.DataFrame(rows, columns=headers)


def parse_frame(df) -> tuple[list[str], list[float], list[float]]:
    """The edited table -> (tokens, p, q); ValueError naming the bad cell."""
    if df is None:
        raise ValueError("the table is empty")
    if not isinstance(df, pd.DataFrame):
        try:
            df = pd.DataFrame(df)
        except (TypeError, ValueError):
            raise ValueError("the table must have the columns token, p, q, one row per token") from None
    if df.empty or df.shape[0] == 0:
        raise ValueError(f"the table has no rows: give p and q for {lab.MIN_TOKENS} to {lab.MAX_TOKENS} tokens "
                         "(or pick a preset)")
    if list(df.columns)[:3] != COLUMNS:
        if df.shape[1] < 3:
            raise ValueError("the table needs the columns token, p, q")
        df = df.iloc[:, :3]
        df.columns = COLUMNS
    df = df[[not all(str(v).strip() in ("", "nan", "None") for v in row) for row in df.itertuples(index=False)]]
    if df.shape[0] == 0:
        raise ValueError(f"the table has no filled rows: give p and q for {lab.MIN_TOKENS} to {lab.MAX_TOKENS} tokens")
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


FROM_RUN = "(a position of the last run)"


def cleared() -> dict:
    """The results' outputs emptied: shown beside a new table, the old ones would describe other p and q."""
    out = dict(summary=pd.DataFrame(columns=lab.SUMMARY_HEADERS))
    for name in VIEWS:
        out[name], out[f"{name}_table"] = None, pd.DataFrame(columns=["(press Run the lab)"])
    return out


def load_preset(name) -> dict:
    if not name or name == FROM_RUN:
        return {}
    tokens, p, q = lab.preset(name)
    return dict(table=_frame(tokens, p, q),
                status=f"Preset **{name}**: {lab.PRESETS[name].description} Press **Run the lab**.") | cleared()


# Clicks the page's "Exactness lab" tab (the tabs are Gradio's buttons with role="tab").
OPEN_LAB_JS = """() => { const tab = [...document.querySelectorAll('button[role="tab"]')]
    .find(b => b.innerText.trim() === 'Exactness lab'); if (tab) tab.click(); }"""


def take_from_run(gen, selection) -> dict:
    """Fill p and q from the drafted position shown in the Decode tab's step viewer (or the first one)."""
    places = lab.drafted_positions(gen)
    if not places:
        raise error("No drafted position yet: run a generation in the Decode tab first.")
    r, i = selection if isinstance(selection, (tuple, list)) and len(selection) == 2 else (None, None)
    if (r, i) not in places:
        r, i = places[0]
    # The rows as the table holds them, which the lab will read: its "summed to" is this note's sum.
    tokens, p, q = taken_rows(gen, r, i)
    pos = gen.rounds[r].positions[i]
    msg = (f"Taken from the last run: round {r + 1}, drafted position {i + 1} "
           f"(draft {visible_token(gen.token(pos.draft_token))!r}, {pos.status.value}, β = {pos.beta:.4f}). "
           f"{position_rows_note(pos, tokens, p, q)} Press **Run the lab**.")
    return dict(table=_frame(tokens, p, q), status=msg, preset=FROM_RUN) | cleared()   # preset: where it came from


def position_rows_note(pos, tokens: list[str], p, q) -> str:
    """What the lab's rows keep of a run's position, and which of its numbers equal the Decode tab's.

    β, the residual and the exact rule add up within each "rest" row (min(p, q) and max(0, p − q)
    are additive there); the skip rule's TV, Σ |min(p, q) − β p| / 2, changes sign inside a row,
    so on these rows it can differ from the trace's full-row figure: both are given, named."""
    named = sum(1 for t in tokens if t not in lab.TAIL_NAMES and t != lab.OTHER)
    folded = len(pos.p.ids) - named
    rows = (f"{len(tokens)} rows: its top {named} tokens, and the rest of the vocabulary in rows where p ≥ q and "
            "where p < q")
    if folded > 0:
        rows += (f" ({folded} more of the step viewer's tokens joined those rows to fit {lab.MAX_TOKENS}, so they "
                 "hold more than the step viewer's rest rows)")
    text = rows + ". Within each row min(p, q) and max(0, p − q) add up, so β, the residual and the exact rule's " \
                  "closed form here equal the model's full rows."
    if pos.skip_tv is not None:
        here = lab.bias(p, q, lab.Rule.SKIP_ADJUSTMENT)
        text += (f" The skip rule's TV does not add up within a row (|min(p, q) − β p| changes sign inside it): on "
                 f"these rows it is {here:.4f}, on the model's full rows {pos.skip_tv:.4f} (the Decode tab's figure).")
    return text + off_one_note(p, q)


def off_one_note(p, q) -> str:
    """Why a run's p or q may not sum to 1, said before the lab's own note ("p summed to …;
    normalised to 1") can puzzle: the model computed it in float32 over its whole vocabulary."""
    sums = [(name, float(sum(row))) for name, row in (("p", p), ("q", q))]
    off = [f"{name} sums to {lab.sum_text(total)}" for name, total in sums if abs(total - 1) > lab.SUM_TOLERANCE]
    if not off:
        return ""
    it = "them" if len(off) > 1 else "it"
    return (f" As the models computed {it}, {' and '.join(off)}, not 1: a softmax runs in float32, and the sum it "
            f"divides by, over the whole vocabulary, is rounded too. The lab normalises {it} to 1 and says so when it "
            "runs.")


def lumped_note(tokens: list[str]) -> str:
    """Beside the skip rule's TV of a run's position: why the Decode tab's, for the same position,
    can be larger ('' for rows that lump nothing)."""
    if not any(t in lab.TAIL_NAMES or t == lab.OTHER for t in tokens):
        return ""
    return (" The skip rule's TV here is over these rows, with the rest of the vocabulary lumped into two; the "
            "Decode tab's, over the full vocabulary, can be larger: |min(p, q) − β p| changes sign inside a lumped "
            "row, so summed first it partly cancels.")


def run_lab(df, samples, seed) -> dict:
    try:
        tokens, p, q = parse_frame(df)
        n = whole_number(samples, "samples per rule", 1)
        limits.check_lab_samples(n)
        seed = seed_number(seed, "the seed")
        result = lab.run(tokens, p, q, n, seed)
    except ValueError as err:
        raise error(str(err)) from None
    exact = result.results[lab.Rule.EXACT]
    verdicts = ", ".join(f"{lab.RULE_NAMES[r].short}: {'rejected' if x.rejects_p else 'not rejected'}"
                         for r, x in result.results.items())
    floor = float(lab.noise_floor(result.p, result.n))
    status = (f"{result.n:,} trials per rule, seed {result.seed}, {len(result.tokens)} tokens, "
              f"β = Σ min(p, q) = {result.beta:.4f} (observed under the exact rule: {exact.acceptance_observed:.4f}). "
              f"Chi-square test of “emitted tokens follow p” at α = {lab.ALPHA}: {verdicts}. "
              f"({result.seconds:.2f} s)\n\nTwo kinds of TV: the **closed form** TV(output, p) is what a rule "
              f"gives exactly (the exact rule's is 0, as on the Decode tab; computed, it is {exact.bias:.1e}, "
              f"float rounding); the **observed** TV(empirical, p) adds the sampling error of {result.n:,} trials: "
              f"the exact rule's {exact.tv:.4f} is that error alone (an exact sampler's expected TV at this N: "
              f"{floor:.4f})." + lumped_note(result.tokens) + "".join(f"\n\nNote: {n}." for n in result.notes))
    out = dict(status=status, table=_frame(result.tokens, result.p, result.q),
               summary=_table(lab.summary_table(result)))
    for name, (_, figure, table) in VIEWS.items():
        out[name] = figure(result)
        out[f"{name}_table"] = _table(table(result))
    return out


def build_lab_tab(run_state: gr.State, selection: gr.State, also_from: list | None = None) -> None:
    """Lay out the lab inside the caller's current container (the app's "Exactness lab" tab).
    `also_from`: buttons elsewhere (the step viewer's) that take the shown position, as
    "Take from the last run" does, and then open this tab."""
    tokens, p, q = lab.preset(DEFAULT_PRESET)
    v = SimpleNamespace()   # every component an output name refers to
    gr.Markdown(INTRO, elem_id="lab-intro")
    with gr.Row():
        with gr.Column(scale=2):
            v.table = gr.Dataframe(_frame(tokens, p, q), headers=COLUMNS, datatype=["str", "number", "number"],
                                   interactive=True,
                                   label="p (target) and q (draft) — edit cells, add or remove rows",
                                   elem_id="lab-dist")
        with gr.Column(scale=1):
            v.preset = gr.Dropdown([*lab.PRESETS, FROM_RUN], value=DEFAULT_PRESET, label="Preset",
                                   elem_id="lab-preset")
            from_run = gr.Button("Take from the last run (Decode tab)", elem_id="lab-from-run")
            samples = CheckedNumber(DEFAULT_SAMPLES, label=f"samples per rule (up to {limits.MAX_LAB_SAMPLES:,})",
                                    precision=0, minimum=1, maximum=limits.MAX_LAB_SAMPLES, elem_id="lab-samples")
            seed = CheckedNumber(0, label="seed", precision=0, minimum=0, elem_id="lab-seed")
            run_btn = gr.Button("Run the lab", variant="primary", elem_id="lab-run")
    v.status = gr.Markdown("Pick a preset or edit the table, then press **Run the lab**.", elem_id="lab-status")
    v.summary = gr.Dataframe(interactive=False, headers=lab.SUMMARY_HEADERS, wrap=True,
                             column_widths=["13%", "14%", "15%", "12%", "10%", "12%", "12%", "12%"],
                             label="Per rule: TV distance, chi-square test, acceptance rate", elem_id="lab-summary")
    for name, (label, _, _) in VIEWS.items():
        setattr(v, name, gr.Plot(label=label, elem_id=f"lab-{name}"))
        with gr.Accordion(f"Numbers behind this chart ({name})", open=False):
            setattr(v, f"{name}_table", gr.Dataframe(interactive=False, elem_id=f"lab-{name}-table"))

    def named(result: dict) -> dict:
        return {getattr(v, name): value for name, value in result.items()}

    def outputs(names: list[str]) -> list:
        return [getattr(v, name) for name in names]

    def on_preset(name):
        return named(load_preset(name))

    def on_from_run(gen, chosen):
        return named(take_from_run(gen, chosen))

    def on_run(df, n_samples, seed_value):
        return named(run_lab(df, n_samples, seed_value))

    v.preset.input(on_preset, [v.preset], outputs(PRESET_OUTPUTS), api_name="lab_preset")
    from_run.click(on_from_run, [run_state, selection], outputs(FROM_RUN_OUTPUTS), api_name="lab_from_run")
    run_btn.click(on_run, [v.table, samples, seed], outputs(RUN_OUTPUTS), api_name="lab_run",
                  show_progress_on=[v.status])
    for button in also_from or []:
        button.click(on_from_run, [run_state, selection], outputs(FROM_RUN_OUTPUTS), api_name=False).then(
            None, js=OPEN_LAB_JS)
