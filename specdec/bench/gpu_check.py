"""`python -m specdec gpu-check`: what a GPU must show, in one command, one table and one JSON.

1. the GPU tests (`pytest -m gpu`), in a subprocess;
2. exactness: the first two tokens of N traced speculative runs at γ = 1 (seeds 0..N-1, T = 1,
   top-k 6; a rejection and the next round, caches rolled back, sit inside the pair) against the
   target's own joint law, chi-square; the skip-adjustment rule as the negative control, which
   must fail (`--quick` skips the control and says so: 200 runs cannot fail it);
3. greedy identity: speculative output equals the target alone on the same engine and on the
   eager reference, token for token, for γ = 1, 3, 8; at T = 1 the engine's output is compared
   with the eager decoder's for the same seeds (reported: float rounding may differ);
4. speed on the device: the forward costs on the pair's engine, the target alone, and speculative
   decoding for γ = 1..6 at T = 0 and T = 1, interleaved, with the speedup predicted from the
   measured costs and α.

Where the pair has a features drafter (the bundled pair), checks 2 and 3 run with it too (its first
round drafts nothing, so its joint spans the prefill round and its first drafting round), and the
speed table has its rows (measured only: it has no model of its own to time alone).

Without CUDA it says so and exits 2, unless `--device cpu` asks for the same checks on the CPU
(which prove nothing about a GPU). Where graphs were asked for, or expected (auto on CUDA), a check
reads the engine: graphs on, and no step whose capture failed. Exit 0 when every check passes, 1
when one fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..core.registry import by_preference, fallback, kind_of
from ..core.sampling import Rule, SamplingConfig
from ..core.settings import RunSettings
from ..explain.measure import PROMPTS, prompts_for
from ..explain.speed import expected_tokens_per_round, predicted_speedup

EXACT_SETTINGS = dict(temperature=1.0, top_k=6)
CHI_PASS, CONTROL_FAIL = 1e-3, 1e-6   # the exact rule passes above, the skip control fails below


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, metavar="PRESET",
                   help="the pair to check (a preset key, e.g. smollm2-135m; default the bundled pair)")
    p.add_argument("--device", default=None,
                   help="cuda (default; without one gpu-check says so and exits 2) or cpu (the same checks on the CPU)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="model weights (default float32: the exact setting)")
    p.add_argument("--engine", default=None, choices=["auto", "eager", "static", "graphs"],
                   help="default auto: CUDA graphs on a GPU, eager on a CPU")
    p.add_argument("--samples", type=int, default=2000, help="one-round runs for the exactness check (default 2000)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per timed run (default 128)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: few samples (the skip control is skipped, and said so), short runs, no pytest")
    p.add_argument("--no-tests", action="store_true", help="skip running pytest -m gpu")
    p.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6], help="γ values the speed table times")
    p.add_argument("--speed-only", action="store_true",
                   help="only the speed table (e.g. of the eager engine beside a full check on graphs)")
    p.add_argument("--out", default="runs/gpu-check", help="folder for results.json (default runs/gpu-check)")
    p.add_argument("--save-profile", action="store_true",
                   help="add the measured costs to assets/bench/cost-profiles.json (the speed explorer's curves)")
    p.add_argument("--shapes", nargs="*", default=None, metavar="PAIR",
                   help="instead of the checks: time random-weight models shaped like the hub presets through the "
                        "engine, offline (pairs: smollm2, qwen2.5, smollm2-1.7b; default all three)")
    p.add_argument("--repeats", type=int, default=50, help="with --shapes: timed calls per width (default 50)")


NO_CUDA = ("no CUDA device here (torch {torch} sees none): gpu-check proves things about a GPU. Run it on a "
           "machine with one, or give --device cpu to run the same checks on this CPU")


def run(args) -> int:
    from ..models.pair import load_pair

    device = args.device or "cuda"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(NO_CUDA.format(torch=torch.__version__))
    if args.shapes is not None:
        return run_shapes(args, device)
    samples, tokens = (200, 24) if args.quick else (args.samples, args.tokens)
    pair = load_pair(preset=args.pair, device=device, dtype=args.dtype, engine=args.engine)
    # the eager reference of the greedy checks (a second copy of the weights: not for the speed alone)
    reference = None if args.speed_only else load_pair(preset=args.pair, device=device, dtype=args.dtype,
                                                       engine="eager")
    prompts = prompts_for(pair)
    started = time.perf_counter()
    report = {"machine": _machine(device), "pair": pair.describe(), "checks": []}
    print(f"{report['machine']['name']}  torch {torch.__version__}  dtype {pair.describe()['dtype']}  "
          f"engine {pair.engine}", flush=True)
    if not (args.quick or args.no_tests or args.speed_only):
        report["checks"].append(_pytest_gpu())
    drafters = drafters_to_check(pair)
    for drafter in drafters if not args.speed_only else []:
        report["checks"] += exactness(pair, samples, control=not args.quick, prompt=prompts[2], drafter=drafter)
        report["checks"] += greedy_identity(pair, reference, tokens, drafter=drafter, prompts=prompts)
    report["speed"] = speed(pair, tokens, rounds=1 if args.quick else 3, gammas=tuple(args.gammas), drafters=drafters,
                            prompts=prompts)
    report["checks"].append(graphs_in_use(pair))   # after every run: a capture may have failed in any
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(format_report(report))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {out / 'results.json'} ({report['seconds']:.0f} s)")
    if args.save_profile and report["speed"]["costs"]["draft_step_ms"] is None:
        print("no profile saved: this pair has no drafter whose step was timed")
    elif args.save_profile:
        from . import profiles

        d = pair.describe()   # a pair other than the bundled one is named in its profile's name
        name = None if pair.draft is not None else \
            f"{report['machine']['name']}, {Path(str(pair.target_name)).name}, {d['engine']}, {d['dtype']}"
        entry = profiles.profile(report["speed"]["costs"], d, report["machine"]["name"],
                                 f"python -m specdec gpu-check (torch {torch.__version__}, median of 50 timed calls a "
                                 "width, sampling and the verify step included)", name=name)
        print(f"added the profile '{entry['name']}' to {profiles.save(entry)}")
    return 0 if all(c["ok"] for c in report["checks"]) else 1


def run_shapes(args, device: str) -> int:
    """`--shapes`: each pair's costs on the engine (graphs on CUDA by default), one sampled run on
    it, and the graph check; profiles saved with `--save-profile`. Exit 1 when graphs were asked
    for (or expected) and a pair ran without them."""
    from ..models.pair import pick_device, pick_engine
    from . import profiles, shapes

    keys = args.shapes or list(shapes.PAIRS)
    unknown = [k for k in keys if k not in shapes.PAIRS]
    if unknown:
        raise ValueError(f"unknown shape pair {', '.join(unknown)}: choose from {', '.join(shapes.PAIRS)}")
    device, dtype = pick_device(device, args.dtype)
    engine = pick_engine(args.engine, device)
    machine = _machine(device)
    print(f"{machine['name']}  torch {torch.__version__}  dtype {str(dtype).replace('torch.', '')}  engine {engine}  "
          f"(random weights, the presets' shapes; {args.repeats} timed calls a width)", flush=True)
    rows = shapes.run_shapes(device, dtype, engine, keys, [1, 2, 3, 4, 5, 6, 7, 9], args.repeats,
                             24 if args.quick else args.tokens, graphs_in_use, log=lambda m: print(m, flush=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "shapes.json").write_text(json.dumps({"machine": machine, "pairs": rows}, indent=1, default=str),
                                     encoding="utf-8")
    print(f"wrote {out / 'shapes.json'}")
    if args.save_profile:
        for r in rows:
            source = (f"python -m specdec gpu-check --shapes {r['key']} (torch {torch.__version__}; random weights "
                      f"with the shapes of {r['label'].replace(' shapes', '')}: {r['why']}; median of "
                      f"{args.repeats} timed calls a width, sampling and the verify step included)")
            entry = profiles.profile(r["costs"], r["describe"], machine["name"], source,
                                     name=f"{machine['name']}, {r['label']}, {r['costs']['engine']}")
            print(f"added the profile '{entry['name']}' to {profiles.save(entry)}")
    return 0 if all(r["graphs"]["ok"] for r in rows) else 1


def _machine(device: str) -> dict:
    name = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU ({platform.machine()})"
    import transformers

    return {"name": name, "device": device, "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d")}


def _pytest_gpu() -> dict:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"],
                          capture_output=True, text=True)
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {"check": "pytest -m gpu", "ok": proc.returncode == 0, "result": last}


def graphs_in_use(pair) -> dict:
    """Where graphs were asked for (`--engine graphs`, or auto on CUDA), the engine must have them
    on, with no step whose capture failed; read from the engine itself."""
    from ..engine.engine import engine_for

    if pair.engine != "graphs":
        return {"check": "CUDA graphs in use", "ok": True, "result": f"not asked for (engine {pair.engine})"}
    engine = engine_for(pair)
    if not engine.graphs:
        return {"check": "CUDA graphs in use", "ok": False,
                "result": f"asked for but not in use on {pair.device} ({engine.failure or 'graphs need CUDA'})"}
    if engine.failures:
        return {"check": "CUDA graphs in use", "ok": False,
                "result": f"{len(engine.failures)} step(s) run without a graph: {engine.failure}"}
    return {"check": "CUDA graphs in use", "ok": True, "result": f"{len(engine._slots.graphs) if engine._slots else 0} "
            "graphs captured, none failed"}


def drafters_to_check(pair) -> list[str]:
    """The drafters the engine runs that the pair has, the draft model's first; a pair with no draft
    model (a real model) is checked with the drafter every pair has in its place."""
    from ..drafting.drafters import drafters_for

    on_engine = [d for d in by_preference(drafters_for(pair)) if kind_of(d).on_engine]
    with_model = any(kind_of(d).needs_draft_model for d in on_engine)
    return on_engine if with_model else [fallback(), *on_engine]


# ---------------------------------------------------------------- exactness

JOINT = 2   # the tokens whose joint law the exactness check tests


def early_tokens(pair, prompt: str, rule: Rule, n: int, drafter: str = "model") -> list[tuple[int, ...]]:
    """The first JOINT tokens of n traced runs (seeds 0..n-1) at γ = 1: a round emits one or two
    tokens, so the pair spans a rejection and the next round (the caches rolled back) about as
    often as an accepted draft and its bonus (with the features drafter: the prefill round's token,
    then its first draft's fate)."""
    from ..decoding.loop import speculative_generate

    settings = RunSettings(gamma=1, max_new_tokens=JOINT + 1, sampling=SamplingConfig(**EXACT_SETTINGS), rule=rule,
                           drafter=drafter)
    runs = [speculative_generate(pair, prompt, settings.with_(seed=s)).token_ids for s in range(n)]
    return [_ended(r[:JOINT], pair.eos_token_id) for r in runs]


def _ended(tokens: list[int], eos: int | None) -> tuple[int, ...]:
    """The tokens up to and including an end-of-sequence token (a run stops there)."""
    return tuple(tokens[:tokens.index(eos) + 1]) if eos in tokens else tuple(tokens)


@torch.inference_mode()
def _next_probs(pair, ids: list[int]) -> torch.Tensor:
    from ..core.sampling import logits_to_probs
    from ..drafting.drafters import align_logits

    logits = pair.target(torch.tensor([ids], device=pair.device)).logits[0, -1]
    return logits_to_probs(align_logits(logits, pair.vocab_size), SamplingConfig(**EXACT_SETTINGS)).double().cpu()


def joint_law(pair, prompt_ids: list[int]) -> dict[tuple[int, ...], float]:
    """The target's own law of the first JOINT tokens (T = 1, top-k 6): P(a, b) = p(a) p(b | a),
    one uncached forward per first token; a first token that ends the run stands alone."""
    first = _next_probs(pair, prompt_ids)
    law = {}
    for a in torch.nonzero(first > 0).flatten().tolist():
        if a == pair.eos_token_id:
            law[(a,)] = float(first[a])
            continue
        second = _next_probs(pair, prompt_ids + [a])
        for b in torch.nonzero(second > 0).flatten().tolist():
            law[(a, b)] = float(first[a] * second[b])
    return law


def chi_square(observed: list[tuple], law: dict[tuple, float]) -> tuple[float, int]:
    """(p-value, draws outside the law's support); cells expecting fewer than 5 draws are pooled."""
    from collections import Counter

    from scipy.stats import chisquare

    counts, n = Counter(observed), len(observed)
    outside = sum(c for cell, c in counts.items() if cell not in law)
    big = [cell for cell, pr in law.items() if pr * n >= 5]
    obs = [counts[c] for c in big]
    exp = [law[c] * n for c in big]
    rest_obs, rest_exp = n - outside - sum(obs), n * (1 - sum(law[c] for c in big))
    if rest_exp > 0:
        obs.append(rest_obs)
        exp.append(rest_exp)
    exp = [e * sum(obs) / sum(exp) for e in exp]   # equal sums, as chisquare asks (rounding only)
    return float(chisquare(obs, exp).pvalue), outside


def exactness(pair, n: int, control: bool = True, prompt=PROMPTS[2], drafter: str = "model") -> list[dict]:
    """The joint law of the first two tokens of traced multi-round runs against the target's
    own; the skip rule as the control, which must fail (skipped, and said so, when `control` is
    off: a few hundred runs have no power to fail it)."""
    law = joint_law(pair, pair.encode(prompt)[1])
    out = []
    for rule, want in ((Rule.EXACT, "pass"), (Rule.SKIP_ADJUSTMENT, "fail")):
        role = "must pass" if want == "pass" else "control: must fail"
        name = f"exactness, joint law of {JOINT} tokens, {rule.value} rule ({role})"
        name += "" if drafter == RunSettings.drafter else f", {drafter} drafter"
        if want == "fail" and not control:
            out.append({"check": name, "ok": True, "skipped": True,
                        "result": f"SKIPPED: {n} runs have no power to fail it (run without --quick)"})
            continue
        pvalue, outside = chi_square(early_tokens(pair, prompt, rule, n, drafter), law)
        ok = (pvalue > CHI_PASS and outside == 0) if want == "pass" else pvalue < CONTROL_FAIL
        out.append({"check": name, "ok": bool(ok), "result": f"chi-square p = {pvalue:.3g} over {n} traced runs "
                    f"(γ = 1, seeds 0-{n - 1}); {outside} outside the target's top-6 support"})
    return out


def greedy_identity(pair, reference, tokens: int, drafter: str = "model", prompts=PROMPTS) -> list[dict]:
    from ..decoding.loop import autoregressive_generate, speculative_generate

    out = []
    greedy = SamplingConfig(temperature=0)
    which = "" if drafter == RunSettings.drafter else f", {drafter} drafter"
    for gamma in (1, 3, 8):
        same = total = 0
        for prompt in prompts[:3]:
            s = RunSettings(gamma=gamma, max_new_tokens=tokens, sampling=greedy, drafter=drafter)
            spec = speculative_generate(pair, prompt, s).token_ids
            same += spec == autoregressive_generate(pair, prompt, s).token_ids
            same += spec == autoregressive_generate(reference, prompt, s).token_ids
            total += 2
        out.append({"check": f"greedy identity, γ = {gamma}{which}", "ok": same == total,
                    "result": f"{same} of {total}: speculative == target alone on this engine and on the eager "
                              f"reference (3 prompts, {tokens} tokens)"})
    same = 0
    for seed in range(3):
        s = RunSettings(gamma=4, max_new_tokens=tokens, seed=seed, drafter=drafter)
        same += speculative_generate(pair, prompts[0], s).token_ids == speculative_generate(
            reference, prompts[0], s).token_ids
    out.append({"check": f"{pair.engine} engine == eager decoder (T = 1, seeds 0-2){which}", "ok": True,
                "result": f"{same} of 3 runs token for token (float rounding may differ between the paths; "
                          "reported, not required)"})
    return out


# ---------------------------------------------------------------- speed

def speed(pair, tokens: int, rounds: int = 3, gammas=(1, 2, 3, 4, 5, 6), drafters=("model",), prompts=PROMPTS) -> dict:
    """Forward costs on the pair's engine, then the target alone and speculative decoding with each
    drafter at each γ, T = 0 and 1, interleaved (a rotating order each round), tokens per second.
    Where the pair has no draft model, the draft step's cost is the features drafter's, read off
    its runs (milliseconds per draft, sampling included), when it ran."""
    from ..decoding.loop import autoregressive_generate, speculative_generate
    from ..engine.engine import engine_for
    from ..explain.measure import measure_costs

    prompt_ids = pair.encode(prompts[0])[1]
    engine = engine_for(pair)
    widths = [1] + [g + 1 for g in gammas]
    costs = (engine.costs(prompt_ids, widths, SamplingConfig()) if engine is not None
             else measure_costs(pair, prompt_ids, widths, steps=30))
    result = {"costs": {**costs, "target_ms_by_width": {str(k): v for k, v in costs["target_ms_by_width"].items()}},
              "rows": []}
    for temp in (0.0, 1.0):
        lineup = [(RunSettings.drafter, 0)] + [(d, g) for d in drafters for g in gammas]   # γ 0: the target alone
        totals = {key: [0.0, 0, 0, 0, 0.0, 0] for key in lineup}   # seconds, tokens, accepted, tested, drafting, drafts
        for k in range(rounds + 1):   # round 0 warms every contender up
            for key in lineup[k % len(lineup):] + lineup[:k % len(lineup)]:
                drafter, g = key
                s = RunSettings(gamma=max(g, 1), max_new_tokens=tokens, sampling=SamplingConfig(temperature=temp),
                                seed=k, drafter=drafter)
                gen = (autoregressive_generate(pair, prompts[k % len(prompts)], s) if g == 0
                       else speculative_generate(pair, prompts[k % len(prompts)], s, trace=False))
                if k:
                    t = totals[key]
                    t[0] += gen.stats.wall_seconds
                    t[1] += gen.stats.new_tokens
                    t[2] += gen.stats.accepted
                    t[3] += gen.stats.tested
                    t[4] += gen.stats.draft_seconds if g else 0.0
                    t[5] += gen.stats.drafted if g else 0
        base = totals[lineup[0]][1] / totals[lineup[0]][0]
        for drafter, g in lineup:
            secs, n, acc, tested = totals[(drafter, g)][:4]
            row = {"temperature": temp, "gamma": g, "drafter": drafter, "tokens_per_s": n / secs,
                   "speedup": (n / secs) / base}
            if g and not kind_of(drafter).needs_draft_model:   # only the draft model's step was timed alone
                row.update(alpha=acc / tested if tested else 0.0, predicted=None)
            elif g:
                alpha = acc / tested if tested else 0.0
                verify = costs["target_ms_by_width"][g + 1]
                row.update(alpha=alpha, predicted=predicted_speedup(expected_tokens_per_round(alpha, g), g,
                                                                    costs["draft_step_ms"], verify,
                                                                    costs["target_step_ms"]))
            result["rows"].append(row)
    feats = [t for (d, g), t in totals.items() if kind_of(d).reads_features and g and t[5]]   # the last loop's: T = 1
    if result["costs"]["draft_step_ms"] is None and feats:
        ms = 1000 * sum(t[4] for t in feats) / sum(t[5] for t in feats)
        result["costs"].update(draft_step_ms=ms, c=ms / result["costs"]["target_step_ms"],
                               draft_from="the features drafter's runs (T = 1), ms per draft with sampling")
    return result


def _ms(value) -> str:
    return "none (no draft model)" if value is None else f"{value:.3f}"


def format_report(report: dict) -> str:
    lines = ["", "check                                                        ok    result", "-" * 110]
    for c in report["checks"]:
        mark = "skip" if c.get("skipped") else "yes" if c["ok"] else "NO"
        lines.append(f"{c['check']:<60} {mark:<5} {c['result']}")
    sp = report["speed"]
    c = sp["costs"]
    lines += ["", f"costs on the {c.get('engine', 'eager')} engine (ms): draft step {_ms(c['draft_step_ms'])}"
              + (f" ({c['draft_from']})" if c.get("draft_from") else "") + ", "
              f"target step {c['target_step_ms']:.3f}, c = {_ms(c['c'])}; target forward by width: "
              + ", ".join(f"{w}: {ms:.3f}" for w, ms in c["target_ms_by_width"].items()), "",
              "  T   γ   tokens/s   speedup   α      predicted   measured ÷ predicted", "-" * 70]
    for r in sp["rows"]:
        if r["gamma"] == 0:
            lines.append(f"{r['temperature']:>3g}   -   {r['tokens_per_s']:8.1f}   1.00      (the target alone)")
        elif r.get("predicted") is None:
            lines.append(f"{r['temperature']:>3g} {r['gamma']:>3}   {r['tokens_per_s']:8.1f}   {r['speedup']:5.2f}     "
                         f"{r['alpha']:.3f}  (the {r['drafter']} drafter: measured only)")
        else:
            lines.append(f"{r['temperature']:>3g} {r['gamma']:>3}   {r['tokens_per_s']:8.1f}   {r['speedup']:5.2f}     "
                         f"{r['alpha']:.3f}  {r['predicted']:6.2f}      {r['speedup'] / r['predicted']:.2f}")
    return "\n".join(lines)
