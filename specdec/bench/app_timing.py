"""How fast the app feels, measured server-side on the bundled pair (`python -m specdec bench-app`).

No browser, no HTTP. The run goes through the library the way the app's Run handler drives it
(`speculative_generate` with a per-round callback): the time until the first round is decoded
and the time for the whole run. The step viewer's switch to another round goes through the
app's own handler, with its figures and tables serialised as Gradio would send them.

`--browser` measures the page itself instead (`app_browser`: a real server, chromium, a class of
visitors), against the decoder it shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# ---------------------------------------------------------------- the one place that knows ui's shape

def switch_step(gen, round_index: int) -> dict:
    """What the app computes when the step viewer moves to `round_index` (0-based), by output name.

    Assumes `handlers.open_round(gen, round_number)` (1-based) returns {output name: value}: the
    handler behind the round slider, which redraws the text and timeline with that round outlined
    as well as the step view (`views.step_view`). Point this function elsewhere if the handlers
    change shape.
    """
    from ..app.page import handlers

    return handlers.open_round(gen, round_index + 1)


def serialise(values: dict) -> None:
    """What Gradio does with figures and tables before sending them: JSON."""
    import pandas as pd
    import plotly.graph_objects as go

    for value in values.values():
        if isinstance(value, go.Figure):
            value.to_json()
        elif isinstance(value, pd.DataFrame):
            value.to_json(orient="split")


# ---------------------------------------------------------------- measurements

def timed_run(pair, prompt: str, settings) -> tuple[float, float, object]:
    """(seconds until the first round is decoded, seconds for the whole run, the Generation)."""
    from ..decoding.loop import speculative_generate

    first: list[float] = []
    t0 = time.perf_counter()

    def on_round(_round, _gen) -> None:
        if not first:
            first.append(time.perf_counter() - t0)

    gen = speculative_generate(pair, prompt, settings, on_round=on_round)
    total = time.perf_counter() - t0
    return (first[0] if first else total), total, gen


def step_switch_ms(gen) -> list[float]:
    """Milliseconds to switch the step viewer to each round of `gen`, serialisation included.
    One untimed switch first: a running app has imported gradio and plotly's validators already."""
    serialise(switch_step(gen, 0))
    times = []
    for r in range(len(gen.rounds)):
        t0 = time.perf_counter()
        serialise(switch_step(gen, r))
        times.append(1000 * (time.perf_counter() - t0))
    return times


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", default="To be, or not to be")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--seed", type=int, default=0, help="run k uses seed + k")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1, the app's default; SPECDEC_THREADS sets the app's)")
    parser.add_argument("--browser", action="store_true",
                        help="time the page in chromium against the decoder, and a class of visitors (app_browser)")
    parser.add_argument("--preset", default=None,
                        help="with --browser: the pair the page runs (default the bundled pair; smollm2-135m: the real "
                             "model with its features drafter, asked a chat question)")
    parser.add_argument("--app-root", default=None,
                        help="with --browser: the checkout whose app.py to serve (default: this one)")
    parser.add_argument("--class-size", type=int, default=30,
                        help="with --browser: visitors sending requests at once (0: skip the class)")
    parser.add_argument("--gradio-client", action="store_true",
                        help="with --browser: the class's visitors are gradio_client Clients (heavier on this "
                             "machine's CPU) instead of lean clients of Gradio's queue protocol")


def run(args: argparse.Namespace) -> int:
    """Print the three numbers (with --browser, the page's figures: `app_browser`); bad values
    raise ValueError before any model loads."""
    if args.browser:
        from . import app_browser

        return app_browser.run(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch

    from ..app.server import limits
    from ..core.checks import whole_number
    from ..core.settings import RunSettings
    from ..models.pair import BUNDLED, load_pair

    if not args.prompt.strip():
        raise ValueError("the prompt is empty: type at least one word")
    whole_number(args.repeats, "--repeats", 1)
    whole_number(args.threads, "--threads", 1)
    settings = [RunSettings(gamma=args.gamma, max_new_tokens=args.max_new_tokens, seed=args.seed + k).validate()
                for k in range(args.repeats)]
    for s in settings:
        limits.check_run(s)
    torch.set_num_threads(args.threads)   # this process is the benchmark: the global count is ours
    from ..core import threads
    threads.fix(args.threads)

    t0 = time.perf_counter()
    pair = load_pair(preset=BUNDLED)
    load_s = time.perf_counter() - t0

    first, total = [], []
    for s in settings:
        t_first, t_total, gen = timed_run(pair, args.prompt, s)
        first.append(t_first)
        total.append(t_total)
    switch = step_switch_ms(gen)   # the last run's rounds

    print(f"specdec app benchmark (bundled pair, {pair.device}, {args.threads} torch thread(s), "
          f"{args.repeats} runs, γ={args.gamma}, T=1)")
    rows = [("load the pair (once per process)", f"{load_s:7.2f} s"),
            ("Run → first round decoded (median)", f"{statistics.median(first):7.3f} s"),
            (f"whole {args.max_new_tokens}-token run (median)",
             f"{statistics.median(total):7.3f} s  ({len(gen.rounds)} rounds)"),
            ("switch the step viewer (server side)", f"{statistics.median(switch):7.1f} ms median, "
                                                     f"{max(switch):.1f} ms max over {len(switch)} rounds")]
    for label, value in rows:
        print(f"  {label + ':':<40}{value}")
    return 0
