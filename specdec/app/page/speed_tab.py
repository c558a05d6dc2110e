"""The "Speed explorer" tab: why a device gets the speedup it gets. Leviathan et al.'s expected
speedup against α for γ 1–8, with the costs this run measured (when it was compared with the
target alone) and the cost profiles the project measured and committed
(`assets/bench/cost-profiles.json`, read at each request: new profiles show without a restart),
with sliders for α, c and γ to ask "what if".

Layout and callbacks only: the formulas are `specdec.explain.speed`, the figures `speed_charts`. The
callbacks are plain functions returning {output name: value}, like the lab's.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from ...core.registry import FEATURES
from ...drafting.features import FOLDER
from ...explain.speed import CostProfile, RunPoint, alpha_band, profiles_from_json
from ...models.pair import ASSETS, BUNDLED, PRESETS, pick_device
from ...models.realmodel import SMOLLM2_135M
from ..shows import speed_charts
from ..shows.charts import md_text

PROFILES_FILE = Path(__file__).resolve().parents[3] / "assets" / "bench" / "cost-profiles.json"
FEATURES_MEASUREMENTS = ASSETS / FOLDER / "measurements.json"   # the features drafter's model card
PAIR_MEASUREMENTS = ASSETS / "measurements.json"   # the bundled pair's model cards
# The real model's features drafter's own measures (its card): α 0.43 at T = 1, not the bundled one's.
REAL_FEATURES_MEASURES = ASSETS / "SmolLM2-135M-Instruct-features" / "measures.json"
CARD_PROFILE = "this CPU, model card (width 5)"
OUTPUTS = ["profile", "gamma", "alpha", "c", "curves", "compare", "rates", "table", "costs", "note"]
DEFAULT_ALPHA, DEFAULT_GAMMA = 0.65, 4

INTRO = """
### Why this device gets the speedup it gets
A round costs γ draft steps and one verify over γ + 1 tokens, and yields (1 − α^(γ+1)) / (1 − α) tokens on
average, so with **c** = a draft step ÷ a target step and **v(γ)** = a verify ÷ a target step
(Leviathan et al. 2023, eq. 1, who take v = 1):

**speedup(α, γ) = (1 − α^(γ+1)) / ((1 − α) (γ c + v(γ)))**

The curves cover γ 1–8, the widths whose verify costs were measured; a run with a larger γ (the Decode tab
allows up to 16) is drawn at its own γ, on its own curve. They use costs measured on real devices: this run's
(tick *compare with autoregressive* on the Decode tab), and the profiles the project measured and committed,
each with where and when. Move **α**, **c** and **γ** to ask "what if". A ratio hides the device: *H100, eager*
draws a high speedup curve because its baseline is slow (15.6 ms a step); the **tokens per second** chart below
shows that CUDA graphs make both sides faster and the ratio smaller. Why smaller: graphs cut a target step 10×
(15.6 → 1.47 ms) but a verify over 5 tokens only 7× (13.6 → 2.02 ms), so once launches no longer hide the
arithmetic a verify costs more than a step (v = 0.87 eager, 1.37 graphed) while c stays small (0.080, 0.082): at
α 0.65 and γ 4, γ c + v grows from 1.19 to 1.70 and the speedup falls from 2.12× to 1.49×. The *H100, CUDA
graphs* profile has c ≈ 0.08 for the bundled pair (a 1-layer draft). A deep draft is another story: a 30-layer
135M-shaped draft costs about as much on that GPU as a 24-layer 1.7B-shaped target, 3.3 vs 3.7 ms a step
graphed, so c ≈ 0.89: set **c** to 0.89 on that profile and drafting pays only if nearly every draft is
accepted.
"""


def load_profiles(path: Path = PROFILES_FILE) -> tuple[list[CostProfile], str]:
    """The committed profiles, read now; and what went wrong reading them, in words ('' if nothing)."""
    try:
        return profiles_from_json(json.loads(path.read_text(encoding="utf-8"))), ""
    except (OSError, ValueError) as err:
        return [], f"The committed cost profiles ({path.name}) could not be read: {err}."


def features_card_profile(path: Path = FEATURES_MEASUREMENTS) -> CostProfile | None:
    """The features drafter's costs as its model card measured them (`python -m specdec card
    --features`, read at each request like the committed profiles): the target's step and verify,
    and the drafter's own time per draft at T = 1, with that card's α in the name. None where the
    pair ships no features drafter or its measurements cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        cost = data["cost"]
        row = next(r for r in data["acceptance"] if r["drafter"] == FEATURES.name and r["temperature"] == 1.0)
        return CostProfile(
            name=f"this CPU, the bundled pair's features drafter (its card: α {row['alpha']:.2f} at T = 1)",
            where=f"the project's dev machine ({data.get('machine', 'one torch thread')})",
            when="with the features drafter's model card", device="cpu", dtype="float32", engine="eager", pair=BUNDLED,
            target_step_ms=cost["target_step_ms"], draft_step_ms=row["draft_ms_per_draft"],
            verify_ms_by_width={cost["gamma"] + 1: cost["verify_ms"]},
            source=(f"python -m specdec card --features ({path.parent.name}/{path.name}): a target step and a "
                    f"verify over {cost['gamma'] + 1} tokens timed alone; the draft step is the features drafter's "
                    f"time per draft over the card's {row['tested']}-draft runs (8 prompts x 3 seeds, T = 1, "
                    f"γ {row['gamma']}), where α = {row['alpha']:.3f}"))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def real_features_card_profile(path: Path = REAL_FEATURES_MEASURES) -> CostProfile | None:
    """SmolLM2-135M-Instruct's features drafter's costs and α at T = 1 as its own card measured them
    (`measures.json` beside its weights): each pair's drafter is named with its own numbers,
    never another pair's. None where they cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["measures"]
        row = next(r for r in data["acceptance"] if r["temperature"] == 1.0)
        return CostProfile(
            name=f"this CPU, SmolLM2-135M-Instruct's features drafter (its card: α {row['alpha']:.2f} at T = 1)",
            where=f"the project's dev machine ({data.get('machine', 'one torch thread')})",
            when="with that drafter's card", device="cpu", dtype=data.get("dtype", "float32"), engine="eager",
            pair=SMOLLM2_135M.key,
            target_step_ms=row["target_step_ms"], draft_step_ms=row["draft_ms_per_draft"],
            verify_ms_by_width={row["gamma"] + 1: row["verify_ms"]},
            source=(f"its card ({path.parent.name}/{path.name}): the target's step and verify over "
                    f"{row['gamma'] + 1} tokens and the drafter's time per draft over {row['tested']} tested drafts "
                    f"({data.get('timed_prompts', '?')} prompts, T = 1, γ {row['gamma']}), where "
                    f"α = {row['alpha']:.3f}"))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def model_card_profile(path: Path = PAIR_MEASUREMENTS) -> CostProfile | None:
    """The bundled pair's costs as its model cards measured them (`python -m specdec card`, read at
    each request): a copy kept in the profiles file went stale when the cards were measured again
    (3.71 ms a target step there, 7.78 ms in the card). None where they cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        cost = data["cost"]
        return CostProfile(
            name=CARD_PROFILE, where=f"the project's dev machine ({data.get('machine', 'one torch thread')})",
            when="with the model cards", device="cpu", dtype="float32", engine="eager", pair=BUNDLED,
            target_step_ms=cost["target_step_ms"], draft_step_ms=cost["draft_step_ms"],
            verify_ms_by_width={1: cost["target_step_ms"], cost["gamma"] + 1: cost["verify_ms"]},
            source=(f"python -m specdec card (assets/models/{path.name}: specdec.explain.measure.cost, 60 forwards "
                    f"of each width timed back to back on one prompt; only widths 1 and {cost['gamma'] + 1} measured)"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def all_profiles(point: RunPoint | None, path: Path = PROFILES_FILE) -> tuple[list[CostProfile], str]:
    """This run's profiles, the committed ones, and the features drafter's card's."""
    committed, problem = load_profiles(path)
    run = [p for p in (point.whole_loop, point.forwards_only) if p is not None] if point is not None else []
    card = model_card_profile()
    features = [p for p in (features_card_profile(), real_features_card_profile()) if p is not None]
    cpu = [p for p in committed if p.device == "cpu"] + ([card] if card is not None else [])   # side by side
    rest = [p for p in committed if p.device != "cpu"] + features
    return run + cpu + rest, problem


def _number(value, default: float, lo: float, hi: float) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return default
    return min(hi, max(lo, x)) if x == x else default


def default_profile(profiles: list[CostProfile], pair: str | None, device: str) -> CostProfile | None:
    """The profile the tab opens on before a run of its own: one measured with the pair in use on
    this kind of device, else with that pair on another, else the first (`where_measured` says so)."""
    ours = [p for p in profiles if p.pair == pair]
    return next((p for p in ours if p.device == device), ours[0] if ours else (profiles[0] if profiles else None))


def where_measured(profile: CostProfile, pair: str | None, device: str, own: bool = False) -> str:
    """A warning where the shown profile is not the page's pair on this kind of device ('' where it is,
    or for this run's own profiles): its numbers then describe another machine or another pair. `own`:
    a profile of the pair on this kind of device exists (the visitor picked another one)."""
    if pair is None or profile.name in speed_charts.RUN_COLOURS or (profile.pair, profile.device) == (pair, device):
        return ""
    theirs = PRESETS[profile.pair].label if profile.pair in PRESETS else "no pair of this page"
    ours = PRESETS[pair].label if pair in PRESETS else pair
    none = "" if own else ", for which no profile is committed yet"
    return (f"⚠ *{md_text(profile.name)}* was measured on {md_text(profile.where)} ({profile.device}) with "
            f"{md_text(theirs)}; this page runs {md_text(ours)} on a {device}{none}: these numbers describe that "
            "other machine or pair. Tick *compare with autoregressive* on the Decode tab for this machine's own.")


def explore(point: RunPoint | None, name, gamma, alpha, c, path: Path = PROFILES_FILE, pair: str | None = None,
            device: str = "cpu") -> dict:
    """Everything the tab shows for a profile, γ, α and c (c None: the profile's measured c); with no
    profile named, the one of `pair` on `device` (`default_profile`)."""
    profiles, problem = all_profiles(point, path)
    chosen = next((p for p in profiles if p.name == name), None) or default_profile(profiles, pair, device)
    gamma = int(_number(gamma, DEFAULT_GAMMA, 1, 8))
    alpha = _number(alpha, DEFAULT_ALPHA, 0.0, 1.0)
    c = chosen.c if chosen is not None and c is None else _number(c, chosen.c if chosen else 0.1, 0.0, 2.0)
    what_if = (chosen, c) if chosen is not None and abs(c - chosen.c) > 5e-4 else None
    named = chosen.name if chosen else None
    return dict(profile=gr.update(choices=[p.name for p in profiles], value=named),
                gamma=gamma, alpha=round(alpha, 3), c=round(c, 3),
                curves=speed_charts.curves_figure(chosen, gamma, alpha, None if what_if is None else c, point),
                compare=speed_charts.compare_figure(profiles, gamma, alpha, what_if, point, named),
                rates=speed_charts.rates_figure(profiles, gamma, alpha, point, named),
                table=pd.DataFrame(speed_charts.profile_rows(profiles, gamma, alpha),
                                   columns=speed_charts.PROFILE_HEADERS),
                costs=costs_markdown(profiles, point),
                note=note_markdown(point, chosen, what_if, pair, device, any(
                    (p.pair, p.device) == (pair, device) for p in profiles)) + (f"\n\n⚠ {problem}" if problem else ""))


def for_run_controls(point: RunPoint | None) -> dict:
    """The controls for a new run: its α and γ, its own whole-loop profile when it has one, and
    that profile's measured c (None)."""
    if point is None:
        return dict(name=None, gamma=DEFAULT_GAMMA, alpha=DEFAULT_ALPHA, c=None)
    name = point.whole_loop.name if point.whole_loop is not None else None
    return dict(name=name, gamma=min(point.gamma, 8), alpha=round(point.alpha, 3), c=None)


def for_run(point: RunPoint | None, path: Path = PROFILES_FILE) -> dict:
    """What the tab shows for a new run (`for_run_controls`)."""
    c = for_run_controls(point)
    return explore(point, c["name"], c["gamma"], c["alpha"], c["c"], path)


def run_lines(point: RunPoint | None) -> list[str]:
    """What the page can say about the current run's point, in words and numbers."""
    if point is None:
        return ["_No run yet: run one on the Decode tab, with **compare with autoregressive** ticked to put it "
                "on these curves._"]
    lo, hi = alpha_band(point.alpha, point.tested)
    head = (f"**This run**: γ = {point.gamma}, α = {point.alpha:.3f} from {point.tested} tested drafts; "
            f"α ± 2σ = {lo:.3f}–{hi:.3f} with σ = √(α(1 − α) / {point.tested}) (binomial: each tested draft "
            "passes or not).")
    prof = point.whole_loop
    if point.measured is None or prof is None:
        return [head, "It was not compared with the target alone, so this page has **no measured target step** "
                      "for this machine and draws no point for it (it invents none): tick **compare with "
                      "autoregressive** on the Decode tab and run again. The committed profiles are drawn."]
    v, _ = prof.verify_nearest(point.gamma)
    at, low, high = (speed_charts.curve(a, point.gamma, prof.c, v) for a in (point.alpha, lo, hi))
    inside = "within" if low - 1e-9 <= point.measured <= high + 1e-9 else "outside"
    return [head,
            f"Measured speedup **{point.measured:.2f}×** (as in the run's metrics). Its whole-loop costs: a target "
            f"step {prof.target_step_ms:.2f} ms (all the target-alone run spent per token{_forward_words(point)}), "
            f"a draft step {prof.draft_step_ms:.2f} ms (c = {prof.c:.3f}), and all else a round spent "
            f"{v * prof.target_step_ms:.2f} ms (v = {v:.2f}), so γ c + v is the run's time per round over the target "
            "alone's time per token and the point can differ from its curve only by the tokens its rounds gave "
            "against what α predicts.",
            f"Its curve gives **{at:.2f}×** at α (the metrics' “predicted from this run's costs”) and "
            f"{low:.2f}×–{high:.2f}× over α ± 2σ: the measured point is **{inside} its noise**. The curve *this run "
            "(forwards only)* leaves out the work around the forwards (sampling, bookkeeping), so it lies above the "
            "point: it is the speedup this machine would give if that work cost nothing."]


def _forward_words(point: RunPoint) -> str:
    """The forwards-only target step and c, worded as the Decode tab's metrics word them."""
    fw = point.forwards_only
    if fw is None:
        return ""
    return f"; of it, one target forward {fw.target_step_ms:.2f} ms, against which c = {fw.c:.2f}"


def costs_markdown(profiles: list[CostProfile], point: RunPoint | None) -> str:
    """Why this CPU's target steps differ from one profile to the next, with their numbers, and
    why an eager H100 verifies 5 tokens in less than a step: said where the costs stand side by
    side (the table), so that three numbers for one step do not read as an error."""
    by_name = {p.name: p for p in profiles}
    lines = [f"{md_text(speed_charts.UNMEASURED)}.\n\n"
             "**One target step, several costs.** Each profile timed something else, at another time:"]
    bench, card = by_name.get("this CPU, bench (every width)"), by_name.get(CARD_PROFILE)
    if bench is not None:
        lines.append(f"- *{bench.name}*: {bench.target_step_ms:.2f} ms, the median of forwards timed between the "
                     f"bench's runs ({bench.when}), on contexts that grow over its 8 prompts.")
    if card is not None:
        lines.append(f"- *{card.name}*: {card.target_step_ms:.2f} ms, 60 forwards of each width timed back to back "
                     "on one short prompt, when the model cards were written.")
    if point is not None and point.whole_loop is not None:
        forwards = point.forwards_only
        inner = f", of which one target forward {forwards.target_step_ms:.2f} ms" if forwards is not None else ""
        lines.append(f"- *this run*: {point.whole_loop.target_step_ms:.2f} ms a token for the target alone, "
                     f"timed now with everything a token costs (sampling, the loop, the trace){inner}, on the "
                     "machine serving this page, which it shares with every visitor.")
    lines.append("\nAll on one torch thread, float32, eager. What was timed (one forward, or a whole token), the "
                 "context's length and how busy the machine was move a CPU step a lot: the model cards' own command "
                 "gave 3.71 ms on 2026-11-22 and 7.78 ms when run again. Compare the ratios c and v within a "
                 "profile, not milliseconds across profiles.")
    eager = by_name.get("H100, eager, fp32")
    if eager is not None and eager.verify(4) is not None and eager.verify(4) < 1:
        lines.append(f"\n*{eager.name}*: v = {eager.verify(4):.2f} < 1 (5 tokens in {eager.verify_ms_by_width[5]:.1f} "
                     f"ms, one in {eager.target_step_ms:.1f} ms) does not mean 5 tokens are cheaper: an eager forward "
                     "on an H100 waits on its kernel launches (about 1 ms a layer, whatever the width), so both "
                     "widths cost the same launches, and the gap is how far launch time moved between the two "
                     "timings.")
    return "\n".join(lines)


def note_markdown(point: RunPoint | None, chosen: CostProfile | None, what_if, pair: str | None = None,
                  device: str = "cpu", own: bool = False) -> str:
    lines = run_lines(point)
    if chosen is not None:
        lines.append(f"**{md_text(chosen.name)}**: measured {md_text(chosen.when)} on {md_text(chosen.where)} "
                     f"({md_text(chosen.engine)}{', ' + md_text(chosen.dtype) if chosen.dtype else ''}); "
                     f"source: {md_text(chosen.source.rstrip('.'))}.")
        lines += [line for line in [where_measured(chosen, pair, device, own)] if line]
    if what_if is not None:
        lines.append(f"**What if** c = {what_if[1]:.3f} instead of the measured {chosen.c:.3f}: the other costs "
                     "stay this profile's.")
    return "\n\n".join(lines)


def build_speed_tab(speed_run: gr.State, tab: gr.Tab, preset: gr.Dropdown) -> gr.State:
    """Lay out the explorer inside the caller's current container (the app's "Speed explorer" tab);
    before a run of its own it opens on a profile of the pair in `preset` on this kind of device.
    Returns the state that says whether the tab is in view: the caller's other tabs set it False
    when selected (`hidden_by`), and a run that ends meanwhile is drawn when this tab opens."""
    device = pick_device()[0]
    v = SimpleNamespace()   # every component an output name refers to
    gr.Markdown(INTRO, elem_id="speed-intro", latex_delimiters=[])
    with gr.Row():
        v.profile = gr.Dropdown([], label="cost profile", elem_id="speed-profile", scale=2)
        v.gamma = gr.Slider(1, 8, value=DEFAULT_GAMMA, step=1, label="γ (drafts per round)", elem_id="speed-gamma")
        v.alpha = gr.Slider(0, 1, value=DEFAULT_ALPHA, step=0.001, label="α (acceptance rate)", elem_id="speed-alpha")
        v.c = gr.Slider(0, 2, value=0.1, step=0.001, label="c (draft step ÷ target step): what if",
                        elem_id="speed-c")
    v.note = gr.Markdown("", elem_id="speed-note", latex_delimiters=[])
    v.curves = gr.Plot(label="speedup against α, γ 1–8", elem_id="speed-curves")
    v.compare = gr.Plot(label="every measured profile at one γ", elem_id="speed-compare")
    v.rates = gr.Plot(label="tokens per second: target alone and speculative", elem_id="speed-rates")
    with gr.Accordion("The profiles as a table, and why their costs differ", open=False):
        # Widths that add up to the panel, with wrapping: sized by their content, the long names
        # pushed c, v, the speedup and best γ past the panel's right edge.
        # Tall enough for every profile: in a box of Gradio's default 500 px the last rows were cut.
        v.table = gr.Dataframe(headers=speed_charts.PROFILE_HEADERS, interactive=False, wrap=True,
                               column_widths=speed_charts.PROFILE_WIDTHS, elem_id="speed-table", max_height=4000)
        v.costs = gr.Markdown("", elem_id="speed-costs", latex_delimiters=[])
    # What the controls are set to, kept on the server: a run that ends while this tab is hidden,
    # and a click on the tab, each read it fresh (a control's value in the page can be stale then).
    v.chosen = gr.State(None)
    # Whether this tab is in view. Why: a run's end changes `speed_run`, and drawing the explorer
    # then costs the server 0.1-0.25 s and the browser three charts in a hidden tab, on the same
    # cores as the run's own step charts; opening the tab draws it (`tab.select`).
    v.open = gr.State(False)
    outputs = [getattr(v, n) for n in [*OUTPUTS, "chosen"]]

    def shown(point, chosen: dict, pair) -> dict:
        out = explore(point, chosen["name"], chosen["gamma"], chosen["alpha"], chosen["c"], pair=pair, device=device)
        return {getattr(v, n): value for n, value in out.items()} | {v.chosen: {
            **chosen, "name": out["profile"]["value"], "gamma": out["gamma"], "alpha": out["alpha"],
            "c": out["c"] if chosen["c"] is not None else None}}

    def on_show(point, chosen, pair):   # a new run, or another pair, sets the controls; else they stand
        key = point_key(point, pair)
        if chosen is None or chosen["run"] != key:
            chosen = for_run_controls(point) | {"run": key}
        return shown(point, chosen, pair)

    def on_control(point, chosen, pair, name, gamma, alpha, c):   # the visitor moved a slider
        return shown(point, {**(chosen or {"run": point_key(point, pair)}), "name": name, "gamma": gamma,
                             "alpha": alpha, "c": c if name else None}, pair)

    def on_profile(point, chosen, pair, name, gamma, alpha):   # another profile: c back to its measured value
        return shown(point, {**(chosen or {"run": point_key(point, pair)}), "name": name, "gamma": gamma,
                             "alpha": alpha, "c": None}, pair)

    def on_run(point, chosen, pair, open_):   # a run ended, or a trace was imported
        return on_show(point, chosen, pair) if open_ else gr.skip()

    quiet = dict(api_name=False, show_progress="hidden")
    speed_run.change(on_run, [speed_run, v.chosen, preset, v.open], outputs, **quiet)
    tab.select(lambda *args: {**on_show(*args), v.open: True}, [speed_run, v.chosen, preset], [*outputs, v.open],
               **quiet)
    v.profile.input(on_profile, [speed_run, v.chosen, preset, v.profile, v.gamma, v.alpha], outputs, **quiet)
    for slider in (v.gamma, v.alpha, v.c):
        slider.release(on_control, [speed_run, v.chosen, preset, v.profile, v.gamma, v.alpha, v.c], outputs, **quiet)
    return v.open


def hidden_by(tabs, open_: gr.State) -> None:
    """Selecting any of `tabs` puts the speed explorer out of view (`build_speed_tab`)."""
    for other in tabs:
        other.select(lambda: False, None, open_, queue=False, api_name=False, show_progress="hidden")


def point_key(point: RunPoint | None, pair: str | None = None) -> str:
    """What tells one run's point (and the pair in use) from another's (the page's state is a copy,
    not the object)."""
    if point is None:
        return repr((None, pair))
    costs = point.whole_loop.target_step_ms if point.whole_loop is not None else None
    return repr((point.alpha, point.tested, point.gamma, point.measured, costs, pair))
