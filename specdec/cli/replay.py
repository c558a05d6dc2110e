"""`specdec replay TRACE.json`: an exported run shown in the terminal without any model, as `generate`
shows a run (the page's Import does the same in the browser). The trace is checked as the page checks
an import (`trace.validate.load_trace`, within the server's import limits) before anything is shown.

    specdec generate --prompt 'ROMEO:' --json run.json     # a run, exported
    specdec replay run.json                                  # the same rounds, later, anywhere
"""

from __future__ import annotations

import argparse


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("trace", metavar="TRACE.json", help="a trace exported by `generate --json` or the page's Export")
    ap.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                    help="colour the accepted, rejected and resampled tokens (auto: when the output is a terminal)")


def header(gen) -> str:
    """What ran: the models, the settings and the seed, as the trace records them."""
    from .main import settings_words

    models = gen.models or {}
    who = " + ".join(str(models[k]) for k in ("target", "draft") if models.get(k)) or "models not recorded"
    return f"replayed from a trace ({who}; no model runs)  {settings_words(gen.settings)}"


def run(args) -> int:
    from ..app.server import limits
    from ..explain.terminal import run_text
    from ..trace.validate import load_trace, read_trace_file
    from .main import shown_prompt, use_colour

    bounds = limits.import_limits()
    try:
        gen = load_trace(read_trace_file(args.trace, bounds), bounds)
    except ValueError as err:
        raise ValueError(f"{args.trace} is not a specdec trace this can show: {err}") from None
    if not gen.settings.speculative or not gen.rounds:
        raise ValueError(f"{args.trace} has no speculative rounds to show (an autoregressive run?)")
    print(header(gen) + (f"\n“{gen.title}”" if gen.title else ""))
    print(run_text(gen, shown_prompt(gen), use_colour(args.color)))
    return 0
