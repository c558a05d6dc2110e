"""`python -m specdec bench`: speculative decoding against the target alone, and against
`transformers`' own assisted generation, measured in one process. Numbers from one run, never timed tests.

Every contender decodes the same prompts with the same seeds and settings, interleaved (each
pass over a prompt and seed runs every contender once, in a rotating order), after one warm-up
run each:

- the target alone: specdec's autoregressive loop and `transformers` `generate`;
- specdec speculative decoding with the draft model and with the n-gram drafter, gamma = 1..8;
- `transformers` assisted generation with the same draft and gamma, and its prompt lookup;

at T = 0 (greedy: every contender must produce the same tokens) and T = 1. Forward passes are
counted by hooks on the two models, the same way for every contender. The costs behind the
predictions (one cached draft step, one cached target step, one target forward over k tokens)
are timed in steps spread between the passes, so they see the same machine as the runs.

Measured speedup = a contender's tokens/s / the faster target-alone loop's tokens/s, at the same T.
Predicted speedups: Leviathan et al.'s closed form from alpha, gamma and c, and the one from the
measured costs and the counted forwards (what the run would give with zero overhead outside forwards).

The pieces: `contenders` (who runs, one timed run), `specdec.explain.measure` (the forward costs),
`report` (rows, summary, table), `chart` (the figure); this module resolves the options, runs
the whole bench and writes its results.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..app.server import limits
from ..core import threads
from ..core.checks import whole_number
from ..core.sampling import SamplingConfig
from ..drafting import features as fx
from ..engine.engine import engine_for
from ..explain.measure import COST_WARMUP, PROMPTS, CostMeter, prompts_for
from .contenders import HF_ASSISTED, Contender, ForwardCounter, Run, contenders, rotated, run_contender
from .report import (
    LEGEND,
    add_paired_speedups,
    add_speedups,
    aggregate,
    check_greedy,
    drafted_gamma,
    format_summary,
    format_table,
    summarize,
    tracing_cost,
)

SCHEMA = "specdec.bench"
SCHEMA_VERSION = 1

# Settings: the default run fits in 10 minutes on a 2-core CPU; --quick is a smoke run of under a minute.
DEFAULTS = dict(gammas="1-8", temperatures="0,1", max_new_tokens=64, prompts=8, seeds=2, repeats=1,
                cost_steps=40, out="runs/bench")
QUICK = dict(gammas="1,3", temperatures="0,1", max_new_tokens=12, prompts=1, seeds=1, repeats=1,
             cost_steps=5, out="runs/bench-quick")   # its own folder: never over a full bench's results

DESCRIPTION = ("Speculative decoding against the target alone and against transformers' assisted generation: "
               "same prompts, seeds and settings, interleaved in one process; prints a table, writes JSON and a chart.")

# The goals, checked (not asserted) in the summary.


def parse_gammas(text: str) -> list[int]:
    """'1-8', '1,2,4' or '4' -> sorted distinct gammas; ValueError with a one-line message."""
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-"))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"--gammas takes whole numbers like '1-8' or '1,2,4', got {text!r}") from None
    for g in (min(out), max(out)):
        whole_number(g, "gamma (drafts per round)", 1, limits.MAX_GAMMA)
    return sorted(out)


def parse_temperatures(text: str) -> list[float]:
    """'0,1' -> [0.0, 1.0], each checked like a run's temperature."""
    try:
        temps = [float(x) for x in str(text).replace(" ", "").split(",")]
    except ValueError:
        raise ValueError(f"--temperatures takes numbers like '0,1', got {text!r}") from None
    for t in temps:
        SamplingConfig(temperature=t).validate()
    return sorted(set(temps))



@dataclass
class BenchConfig:
    gammas: list[int]
    temperatures: list[float]
    max_new_tokens: int
    prompts: list[str]
    seeds: list[int]
    repeats: int
    threads: int
    cost_steps: int
    out: Path
    progress: bool
    quick: bool = False   # a smoke run: no goals checked, no chart written
    top_k: int = 0        # above T = 0 (0 and 1: the whole of p; a pair's own, e.g. smollm2-135m 50 and 0.9)
    top_p: float = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench's options (the CLI's `bench` subparser, or `main` here)."""
    d, q = DEFAULTS, QUICK
    add = parser.add_argument
    add("--gammas", default=None, help=f"drafts per round: '1-8', '1,2,4' (default {d['gammas']}; quick {q['gammas']})")
    add("--temperatures", default=None, help=f"comma-separated, 0 = greedy (default {d['temperatures']})")
    add("--top-k", type=int, default=0, help="above T = 0 (0 = off; smollm2-135m's own: --temperatures 0.2 "
                                             "--top-k 50 --top-p 0.9)")
    add("--top-p", type=float, default=1.0, help="above T = 0 (1 = off)")
    add("--max-new-tokens", type=int, default=None, help=f"tokens per run (default {d['max_new_tokens']})")
    add("--prompts", type=int, default=None,
        help=f"how many of the {len(PROMPTS)} built-in prompts (default {d['prompts']})")
    add("--seeds", type=int, default=None, help=f"seeds 0..N-1 per prompt (default {d['seeds']})")
    add("--repeats", type=int, default=None, help="passes over all prompts and seeds (default 1)")
    add("--cost-steps", type=int, default=None, help=f"timed forwards per cost (default {d['cost_steps']})")
    add("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    add("--out", default=None, help=f"folder for results.json and speedup.html (default {d['out']}; "
                                   f"quick {q['out']})")
    add("--quick", action="store_true", help="a smoke run in under a minute (small settings): checks that "
                                            "everything runs; no goals checked, no chart, results.json only")
    add("--no-progress", action="store_true", help="no progress bar (off anyway when stderr is not a terminal)")
    add("--save-profile", action="store_true",
        help="add the measured forward costs to assets/bench/cost-profiles.json (the speed explorer's curves)")
    add("--preset", default=None, help="model pair preset (default: the bundled pair)")
    add("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    add("--dtype", default=None, choices=["float32", "bfloat16", "float16"], help="model weights (default float32)")
    add("--engine", default=None, choices=["auto", "eager", "static", "graphs"],
        help="auto (default): CUDA graphs on a GPU, eager on a CPU")
    add("--target", help="target model: folder or hub id (with --draft)")
    add("--draft", help="draft model: folder or hub id (with --target)")


def config_from_args(args) -> BenchConfig:
    """Resolve --quick and the defaults, and check every value (ValueError, one line)."""
    base = QUICK if getattr(args, "quick", False) else DEFAULTS

    def pick(name):
        value = getattr(args, name, None)
        return base.get(name, DEFAULTS.get(name)) if value is None else value

    def whole(name, value, lo, hi=None):
        return whole_number(value, f"--{name}", lo, hi, strict=True)

    gammas = parse_gammas(pick("gammas"))
    temperatures = parse_temperatures(pick("temperatures"))
    max_new = whole("max-new-tokens", pick("max_new_tokens"), 1, limits.MAX_NEW_TOKENS)
    n_prompts = whole("prompts", pick("prompts"), 1, len(PROMPTS))
    n_seeds = whole("seeds", pick("seeds"), 1)
    repeats = whole("repeats", pick("repeats"), 1)
    cost_steps = whole("cost-steps", pick("cost_steps"), 1, 200)
    threads = whole("threads", 1 if getattr(args, "threads", None) is None else args.threads, 1, 512)
    top_k, top_p = getattr(args, "top_k", 0), getattr(args, "top_p", 1.0)
    SamplingConfig(temperature=1.0, top_k=top_k, top_p=top_p).validate()   # a bad value: one line
    return BenchConfig(gammas, temperatures, max_new, PROMPTS[:n_prompts], list(range(n_seeds)), repeats,
                       threads, cost_steps, Path(pick("out") or DEFAULTS["out"]),
                       progress=not getattr(args, "no_progress", False), quick=bool(getattr(args, "quick", False)),
                       top_k=top_k, top_p=top_p)


def benchmark(pair, cfg: BenchConfig, bar=None) -> dict:
    """Warm up, run every contender on every prompt and seed (interleaved), time the forward
    costs between the passes, and return the results dict (rows, summary, greedy check, raw runs)."""
    tick = bar.update if bar is not None else (lambda n=1: None)
    prompt_ids = [pair.encode(p)[1] for p in cfg.prompts]
    longest = max(len(ids) for ids in prompt_ids)
    limit = pair.context_length
    if limit and longest + cfg.max_new_tokens > limit:
        raise ValueError(f"the longest prompt is {longest} tokens and max new tokens is {cfg.max_new_tokens}, "
                         f"but the models' context holds {limit} tokens: lower --max-new-tokens to {limit - longest}")
    widths = list(range(1, max(cfg.gammas) + 2))
    # The cost contexts grow by one token a step: keep them inside the models' context.
    steps = cfg.cost_steps if not limit else max(1, min(cfg.cost_steps, limit - len(prompt_ids[0]) - len(widths) - 4))
    lineup = contenders(cfg.gammas, cfg.temperatures, features := fx.available(pair), model=pair.draft is not None)
    passes = [(r, i, s) for r in range(cfg.repeats) for i in range(len(cfg.prompts)) for s in cfg.seeds]
    # Cost steps before each pass (spread over the run, like the runs they predict).
    steps_before = [steps * (k + 1) // len(passes) - steps * k // len(passes) for k in range(len(passes))]
    if bar is not None:
        bar.reset(total=COST_WARMUP + steps + len(lineup) * (1 + len(passes)))
        bar.set_description("warm-up")
    engine, cut = engine_for(pair), (cfg.top_k, cfg.top_p)   # above T = 0: the sampling cut
    meter = CostMeter(pair, prompt_ids[0], widths) if engine is None else None
    counter = ForwardCounter(pair)
    try:
        for _ in range(COST_WARMUP):
            if meter is not None:
                meter.step(timed=False)
            tick()
        for c in lineup:
            run_contender(pair, c, prompt_ids[0], min(16, cfg.max_new_tokens), 0, counter, 0, *cut)
            tick()
        gc.collect()
        gc.freeze()   # the loaded models' objects are never garbage: keep collections short and even
        if bar is not None:
            bar.set_description("timed")
        runs: list[Run] = []
        for k, (_, i, seed) in enumerate(passes):
            for _ in range(steps_before[k]):
                if meter is not None:
                    meter.step()
                tick()
            for c in rotated(lineup, k, len(passes)):
                runs.append(run_contender(pair, c, prompt_ids[i], cfg.max_new_tokens, seed, counter, i, *cut))
                tick()
    finally:
        gc.unfreeze()
        counter.close()
    # On an engine (static caches, CUDA graphs) the costs are its own steps, timed after the runs.
    costs = meter.result() if meter is not None else engine.costs(prompt_ids[0], widths, SamplingConfig())

    records = [dict(r.record(), max_new_tokens=cfg.max_new_tokens) for r in runs]
    rows = aggregate(records, costs)
    where = pair.describe()
    for r in rows:   # every row says where it ran
        r.update(device=where["device"], dtype=where["dtype"], engine=where["engine"])
    order = {c: n for n, c in enumerate(lineup)}
    rows.sort(key=lambda r: order[Contender(r["kind"], r["temperature"], r["gamma"])])
    baselines = add_speedups(rows)
    add_paired_speedups(rows, records, baselines)
    greedy = check_greedy(runs)
    warnings = [f"{r['label']} γ={r['gamma']} T={r['temperature']:g}: verify forwards were not γ + 1 tokens wide "
                f"({r['target_widths']}): the assistant's settings may not have reached transformers"
                for r in rows if r["kind"] == HF_ASSISTED and not drafted_gamma(r)]
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION,
        "settings": dict(gammas=cfg.gammas, temperatures=cfg.temperatures, max_new_tokens=cfg.max_new_tokens,
                         prompts=cfg.prompts, seeds=cfg.seeds, repeats=cfg.repeats, threads=torch.get_num_threads(),
                         quick=cfg.quick, cost_steps=steps, top_k=cut[0], top_p=cut[1], eos_token_id=pair.eos_token_id,
                         features=features, stop="every contender stops at the pair's EOS id or after max_new_tokens"),
        "pair": pair.describe(),
        "versions": _versions(),
        "costs": {**costs, "target_ms_by_width": {str(w): ms for w, ms in costs["target_ms_by_width"].items()}},
        "baselines": {f"{t:g}": b for t, b in baselines.items()},
        "rows": rows,
        "greedy": greedy,
        "summary": summarize(rows, baselines, greedy, smoke=cfg.quick),
        "tracing_cost": tracing_cost(rows),
        "warnings": warnings,
        "runs": records,
    }


def _versions() -> dict:
    import platform

    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "machine": platform.processor() or platform.machine()}


def run(args) -> int:
    """`python -m specdec bench`: prints the table and summary, writes results.json and speedup.html.
    0 on success, 1 when greedy outputs disagree; ValueError for bad option values."""
    started = time.perf_counter()
    cfg = config_from_args(args)   # before loading anything
    try:
        cfg.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create --out folder {cfg.out}: {err.strerror}") from None
    torch.set_num_threads(cfg.threads)
    threads.fix(cfg.threads)   # the benchmark's count, every contender alike (not the run policy)

    from transformers.utils import logging as hf_logging

    from ..models.pair import load_pair

    hf_logging.set_verbosity_error()   # the output is the table, not transformers' notices
    hf_logging.disable_progress_bar()
    pair = load_pair(target=getattr(args, "target", None), draft=getattr(args, "draft", None),
                     preset=getattr(args, "preset", None), device=getattr(args, "device", None),
                     dtype=getattr(args, "dtype", None), engine=getattr(args, "engine", None))
    if pair.has_chat_template:   # a chat model is asked questions under its template, not Shakespeare
        cfg = replace(cfg, prompts=prompts_for(pair)[:len(cfg.prompts)])
    lineup = len(contenders(cfg.gammas, cfg.temperatures, fx.available(pair), model=pair.draft is not None))
    passes = cfg.repeats * len(cfg.prompts) * len(cfg.seeds)
    if cfg.quick:
        print("smoke run (--quick): a few short runs to check that everything works; its numbers are not a "
              "benchmark and no goal is checked")
    where = pair.describe()
    print(f"pair: {pair.label}  [{where['device']}, {where['dtype']}, {where['engine']} engine]  "
          f"torch threads: {torch.get_num_threads()}")
    print(f"{lineup} contenders (T = {', '.join(f'{t:g}' for t in cfg.temperatures)}; γ = "
          f"{', '.join(map(str, cfg.gammas))}) x {passes} pass{'es' * (passes != 1)} ({len(cfg.prompts)} "
          f"prompt{'s' * (len(cfg.prompts) != 1)} x {len(cfg.seeds)} seed{'s' * (len(cfg.seeds) != 1)} x "
          f"{cfg.repeats}), {cfg.max_new_tokens} new tokens each, interleaved"
          + (f"; above T = 0, top-k {cfg.top_k} and top-p {cfg.top_p:g}" if (cfg.top_k, cfg.top_p) != (0, 1.0) else ""),
          flush=True)

    from tqdm.auto import tqdm

    with tqdm(file=sys.stderr, unit="run", leave=False,
              disable=not (cfg.progress and sys.stderr.isatty())) as bar:
        results = benchmark(pair, cfg, bar)
    results["elapsed_s"] = time.perf_counter() - started

    costs = results["costs"]
    draft = (f"draft step {costs['draft_step_ms']:.2f} ms, " if costs["draft_step_ms"] is not None
             else "no draft model, ")
    print(f"costs: {draft}target step {costs['target_step_ms']:.2f} ms, "
          + (f"c = {costs['c']:.3f}; " if costs["c"] is not None else "") + "target forward over k tokens, in steps: "
          + " ".join(f"{k}:{ms / costs['target_step_ms']:.2f}" for k, ms in costs["target_ms_by_width"].items()))
    print()
    print(format_table(results["rows"]))
    print()
    print(textwrap.fill(LEGEND, width=110))
    print()
    print(format_summary(results))

    json_path, html_path = cfg.out / "results.json", cfg.out / "speedup.html"
    from .chart import speedup_figure

    try:
        json_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
        if not cfg.quick:   # the whole plotly.js inside the file (about 5 MB): it opens offline, with no CDN
            speedup_figure(results).write_html(str(html_path), include_plotlyjs=True)
    except OSError as err:
        raise ValueError(f"cannot write to {cfg.out}: {err.strerror}") from None
    written = json_path if cfg.quick else f"{json_path} and {html_path}"
    print(f"wrote {written}; elapsed {_duration(results['elapsed_s'])}")
    if getattr(args, "save_profile", False) and not cfg.quick:
        from . import profiles

        entry = profiles.bench_profile(results, pair, getattr(args, "preset", None), json_path)
        print(f"added the profile '{entry['name']}' to {profiles.save(entry)}" if entry is not None else
              "no profile saved: this pair has no draft model and no features drafter whose step the bench timed")
    return 0 if results["greedy"]["agree"] else 1


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m specdec.bench`): the same options and exit codes as the CLI."""
    from ..models.pair import ModelLoadError

    parser = argparse.ArgumentParser(prog="python -m specdec bench", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, ModelLoadError) as err:
        print(f"specdec: error: {err}", file=sys.stderr)
        return 2


