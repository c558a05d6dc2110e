"""`python -m specdec gpu-check`: what a GPU must show, in one command, one table and one JSON.

1. the GPU tests (`pytest -m gpu`), in a subprocess;
2. exactness: the first token of N one-round speculative runs (seeds 0..N-1, T = 1, top-k 6)
   against the target's own distribution, chi-square; the skip-adjustment rule as the negative
   control, which must fail; and every emitted token inside the target's own top-k support;
3. greedy identity: speculative output equals the target alone, token for token, for γ = 1, 3, 8,
   and the engine's output equals the eager decoder's for the same seeds;
4. speed on the device: the forward costs on the pair's engine, the target alone, and speculative
   decoding for γ = 1..6 at T = 0 and T = 1, interleaved, with the speedup predicted from the
   measured costs and α.

It runs on whatever device there is (on a CPU it checks the same things on the CPU engine and
says so). Exit 0 when every check passes, 1 when one fails.
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

from ..measure import PROMPTS
from ..sampling import Rule, SamplingConfig
from ..settings import RunSettings
from ..speed import expected_tokens_per_round, predicted_speedup

EXACT_SETTINGS = dict(temperature=1.0, top_k=6)
CHI_PASS, CONTROL_FAIL = 1e-3, 1e-6   # the exact rule passes above, the skip control fails below


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="model weights (default float32: the exact setting)")
    p.add_argument("--engine", default=None, choices=["auto", "eager", "static", "graphs"],
                   help="default auto: CUDA graphs on a GPU, eager on a CPU")
    p.add_argument("--samples", type=int, default=2000, help="one-round runs for the exactness check (default 2000)")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per timed run (default 128)")
    p.add_argument("--quick", action="store_true", help="a smoke run: few samples, short runs, no pytest")
    p.add_argument("--no-tests", action="store_true", help="skip running pytest -m gpu")
    p.add_argument("--out", default="runs/gpu-check", help="folder for results.json (default runs/gpu-check)")
    p.add_argument("--save-profile", action="store_true",
                   help="add the measured costs to assets/bench/cost-profiles.json (the speed explorer's curves)")


def run(args) -> int:
    from ..models import load_pair

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    samples, tokens = (200, 24) if args.quick else (args.samples, args.tokens)
    pair = load_pair(device=device, dtype=args.dtype, engine=args.engine)
    reference = load_pair(device=device, dtype=args.dtype, engine="eager")
    started = time.perf_counter()
    report = {"machine": _machine(device), "pair": pair.describe(), "checks": []}
    print(f"{report['machine']['name']}  torch {torch.__version__}  dtype {pair.describe()['dtype']}  "
          f"engine {pair.engine}", flush=True)
    if not (args.quick or args.no_tests):
        report["checks"].append(_pytest_gpu())
    report["checks"] += exactness(pair, samples)
    report["checks"] += greedy_identity(pair, reference, tokens)
    report["speed"] = speed(pair, tokens, rounds=1 if args.quick else 3)
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(format_report(report))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {out / 'results.json'} ({report['seconds']:.0f} s)")
    if args.save_profile:
        from . import profiles

        entry = profiles.profile(report["speed"]["costs"], pair.describe(), report["machine"]["name"],
                                 f"python -m specdec gpu-check (torch {torch.__version__}, median of 50 timed calls a "
                                 "width, sampling and the verify step included)")
        print(f"added the profile '{entry['name']}' to {profiles.save(entry)}")
    return 0 if all(c["ok"] for c in report["checks"]) else 1


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


# ---------------------------------------------------------------- exactness

def first_tokens(pair, prompt: str, rule: Rule, n: int, gamma: int = 4) -> tuple[list[int], list[list[int]]]:
    """The first emitted token of n one-round runs (seeds 0..n-1), and every run's emitted tokens."""
    from ..decoding import speculative_generate

    settings = RunSettings(gamma=gamma, max_new_tokens=gamma + 1, sampling=SamplingConfig(**EXACT_SETTINGS), rule=rule)
    runs = [speculative_generate(pair, prompt, settings.with_(seed=s), trace=False).token_ids for s in range(n)]
    return [r[0] for r in runs], runs


@torch.inference_mode()
def target_rows(pair, prompt_ids: list[int], runs: list[list[int]]) -> torch.Tensor:
    """The target's own distribution (T = 1, top-k 6) before every emitted token of every run:
    one uncached forward over prompt + run per run, [runs, tokens, V]."""
    from ..drafters import align_logits
    from ..sampling import logits_to_probs

    width = min(len(r) for r in runs)
    ids = torch.tensor([prompt_ids + r[:width] for r in runs], device=pair.device)
    rows = []
    for chunk in ids.split(256):
        logits = pair.target(chunk).logits[:, len(prompt_ids) - 1:len(prompt_ids) - 1 + width]
        rows.append(logits_to_probs(align_logits(logits, pair.vocab_size), SamplingConfig(**EXACT_SETTINGS)).cpu())
    return torch.cat(rows)


def exactness(pair, n: int) -> list[dict]:
    from scipy.stats import chisquare

    prompt = PROMPTS[2]
    prompt_ids = pair.encode(prompt)[1]
    out = []
    for rule, want in ((Rule.EXACT, "pass"), (Rule.SKIP_ADJUSTMENT, "fail")):
        firsts, runs = first_tokens(pair, prompt, rule, n)
        rows = target_rows(pair, prompt_ids, runs)
        p = rows[0, 0].double()
        support = torch.nonzero(p > 0).flatten().tolist()
        counts = torch.bincount(torch.tensor(firsts), minlength=len(p)).double()
        outside = int(sum(counts[i] for i in range(len(p)) if i not in set(support)))
        observed = counts[support]
        expected = p[support] / p[support].sum() * observed.sum()   # sums equal exactly, as chisquare asks
        chi, pvalue = chisquare(observed.numpy(), expected.numpy())
        width = rows.shape[1]
        emitted = torch.tensor([r[:width] for r in runs])
        out_of_support = int((rows.gather(-1, emitted[..., None]).squeeze(-1) == 0).sum())
        ok = (pvalue > CHI_PASS and outside == 0 and out_of_support == 0) if want == "pass" else pvalue < CONTROL_FAIL
        role = "must pass" if want == "pass" else "control: must fail"
        out.append({"check": f"exactness, {rule.value} rule ({role})",
                    "ok": bool(ok), "result": f"chi-square p = {pvalue:.3g} over {n} first tokens; "
                    f"{out_of_support} of {emitted.numel()} emitted tokens outside the target's top-6 support"})
    return out


def greedy_identity(pair, reference, tokens: int) -> list[dict]:
    from ..decoding import autoregressive_generate, speculative_generate

    out = []
    greedy = SamplingConfig(temperature=0)
    for gamma in (1, 3, 8):
        same = total = 0
        for prompt in PROMPTS[:3]:
            s = RunSettings(gamma=gamma, max_new_tokens=tokens, sampling=greedy)
            spec = speculative_generate(pair, prompt, s).token_ids
            same += spec == autoregressive_generate(pair, prompt, s).token_ids
            total += 1
        out.append({"check": f"greedy identity, γ = {gamma}", "ok": same == total,
                    "result": f"{same} of {total} prompts: speculative == target alone, {tokens} tokens"})
    same = 0
    for seed in range(3):
        s = RunSettings(gamma=4, max_new_tokens=tokens, seed=seed)
        same += speculative_generate(pair, PROMPTS[0], s).token_ids == speculative_generate(
            reference, PROMPTS[0], s).token_ids
    out.append({"check": f"{pair.engine} engine == eager decoder (T = 1, seeds 0-2)", "ok": True,
                "result": f"{same} of 3 runs token for token (float rounding may differ between the paths; "
                          "reported, not required)"})
    return out


# ---------------------------------------------------------------- speed

def speed(pair, tokens: int, rounds: int = 3, gammas=(1, 2, 3, 4, 5, 6)) -> dict:
    """Forward costs on the pair's engine, then the target alone and speculative decoding at each
    γ, T = 0 and 1, interleaved (a rotating order each round), tokens per second."""
    from ..decoding import autoregressive_generate, speculative_generate
    from ..engine import engine_for
    from ..measure import measure_costs

    prompt_ids = pair.encode(PROMPTS[0])[1]
    engine = engine_for(pair)
    widths = [1] + [g + 1 for g in gammas]
    costs = (engine.costs(prompt_ids, widths, SamplingConfig()) if engine is not None
             else measure_costs(pair, prompt_ids, widths, steps=30))
    result = {"costs": {**costs, "target_ms_by_width": {str(k): v for k, v in costs["target_ms_by_width"].items()}},
              "rows": []}
    for temp in (0.0, 1.0):
        lineup = [0, *gammas]
        totals = {g: [0.0, 0, 0, 0] for g in lineup}   # seconds, tokens, accepted, tested
        for k in range(rounds + 1):   # round 0 warms every contender up
            for g in lineup[k % len(lineup):] + lineup[:k % len(lineup)]:
                s = RunSettings(gamma=max(g, 1), max_new_tokens=tokens, sampling=SamplingConfig(temperature=temp),
                                seed=k)
                gen = (autoregressive_generate(pair, PROMPTS[k % len(PROMPTS)], s) if g == 0
                       else speculative_generate(pair, PROMPTS[k % len(PROMPTS)], s, trace=False))
                if k:
                    t = totals[g]
                    t[0] += gen.stats.wall_seconds
                    t[1] += gen.stats.new_tokens
                    t[2] += gen.stats.accepted
                    t[3] += gen.stats.tested
        base = totals[0][1] / totals[0][0]
        for g in lineup:
            secs, n, acc, tested = totals[g]
            row = {"temperature": temp, "gamma": g, "tokens_per_s": n / secs, "speedup": (n / secs) / base}
            if g:
                alpha = acc / tested if tested else 0.0
                verify = costs["target_ms_by_width"][g + 1]
                row.update(alpha=alpha, predicted=predicted_speedup(expected_tokens_per_round(alpha, g), g,
                                                                    costs["draft_step_ms"], verify,
                                                                    costs["target_step_ms"]))
            result["rows"].append(row)
    return result


def format_report(report: dict) -> str:
    lines = ["", "check                                                        ok    result", "-" * 110]
    for c in report["checks"]:
        lines.append(f"{c['check']:<60} {'yes' if c['ok'] else 'NO ':<5} {c['result']}")
    sp = report["speed"]
    c = sp["costs"]
    lines += ["", f"costs on the {c.get('engine', 'eager')} engine (ms): draft step {c['draft_step_ms']:.3f}, "
              f"target step {c['target_step_ms']:.3f}, c = {c['c']:.3f}; target forward by width: "
              + ", ".join(f"{w}: {ms:.3f}" for w, ms in c["target_ms_by_width"].items()), "",
              "  T   γ   tokens/s   speedup   α      predicted   measured ÷ predicted", "-" * 70]
    for r in sp["rows"]:
        if r["gamma"] == 0:
            lines.append(f"{r['temperature']:>3g}   -   {r['tokens_per_s']:8.1f}   1.00      (the target alone)")
        else:
            lines.append(f"{r['temperature']:>3g} {r['gamma']:>3}   {r['tokens_per_s']:8.1f}   {r['speedup']:5.2f}     "
                         f"{r['alpha']:.3f}  {r['predicted']:6.2f}      {r['speedup'] / r['predicted']:.2f}")
    return "\n".join(lines)
