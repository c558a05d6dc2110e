"""How fast the app feels, measured server-side on the bundled pair (`python -m specdec bench-app`).

Calls the Run handler generator directly (no browser, no HTTP): time until the first round is
yielded, time for a whole run, and the server-side time to switch the step viewer to another
round (building the figures and serialising them as Gradio would).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _serialise(outputs) -> None:
    """What Gradio does with Plotly figures before sending them: JSON."""
    import plotly.graph_objects as go

    for out in outputs:
        if isinstance(out, go.Figure):
            out.to_json()


def main(argv=None) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    parser = argparse.ArgumentParser(prog="specdec bench-app", description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="To be, or not to be")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from . import ui
    from .models import BUNDLED

    t = time.perf_counter()
    ui.get_pair(BUNDLED)
    load_s = time.perf_counter() - t

    first, total, rounds = [], [], 0
    gen = None
    for k in range(args.repeats):
        t0 = time.perf_counter()
        t_first = None
        last = None
        for out in ui.run_generation(args.prompt, BUNDLED, "model", args.gamma, args.max_new_tokens, 1.0, 0, 1.0,
                                     args.seed + k, False, False):
            if t_first is None and isinstance(out[0], str) and out[0].startswith("Round"):
                _serialise(out)
                t_first = time.perf_counter() - t0
            last = out
        total.append(time.perf_counter() - t0)
        first.append(t_first if t_first is not None else total[-1])
        gen = last[4]
        rounds = len(gen.rounds)

    switch = []
    for r in range(1, rounds + 1):
        t0 = time.perf_counter()
        _serialise(ui.show_step(gen, r, None))
        switch.append(time.perf_counter() - t0)

    result = {
        "load_pair_s": load_s,
        "first_round_s_median": statistics.median(first),
        "run_s_median": statistics.median(total),
        "tokens": args.max_new_tokens, "rounds": rounds,
        "step_switch_ms_median": 1000 * statistics.median(switch),
        "step_switch_ms_max": 1000 * max(switch),
    }
    print(f"specdec app benchmark (bundled pair, CPU, {args.repeats} runs, γ={args.gamma}, T=1)")
    print(f"  load the pair (once per process):      {load_s:7.2f} s")
    print(f"  Run → first round yielded (median):    {result['first_round_s_median']:7.3f} s")
    print(f"  whole {args.max_new_tokens}-token run, streamed (median): {result['run_s_median']:7.2f} s"
          f"  ({rounds} rounds)")
    print(f"  switch the step viewer (server side):  {result['step_switch_ms_median']:7.1f} ms median, "
          f"{result['step_switch_ms_max']:.1f} ms max over {len(switch)} rounds")
    return result


if __name__ == "__main__":
    main()
