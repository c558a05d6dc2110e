"""From the bench's runs to its rows, summary and text: pure functions over records and costs.

One row per contender x T x gamma: tokens/s (median and quartiles over runs), counted forwards,
alpha, c, the verify cost, the measured speedup against the faster target-alone loop, Leviathan
et al.'s predicted speedup and the one from the measured costs; the greedy agreement check; the
fixed-width table and the summary the CLI prints.
"""

from __future__ import annotations

import math
import statistics

from ..core.registry import find
from ..explain.speed import leviathan_speedup, predicted_speedup
from .contenders import (
    BASELINES,
    HF_ASSISTED,
    KINDS,
    SPECDEC_AR,
    SPECDEC_FEATURES,
    SPECDEC_MODEL,
    SPECDEC_UNTRACED,
    Run,
)

# The goals, checked (not asserted) in the summary.
GOALS = {"speedup_t1": 1.6, "speedup_t0": 1.4, "specdec_over_assisted": 0.8, "measured_over_predicted": 0.9}
# Issue 28's goals for the features drafter: its best gamma at T = 1 and T = 0, and its time per
# token over transformers' assisted generation (distilled draft model) at equal gamma.
FEATURES_GOALS = {"speedup_t1": 1.8, "speedup_t0": 2.5, "over_assisted": 0.7}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile); a single value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3



def verify_cost_steps(widths: dict[str, int], target_ms_by_width: dict) -> float | None:
    """Mean cost of the counted target forwards (prefills left out) in target decode steps, from
    the measured cost of a forward of each width (wider than measured: the widest measured)."""
    costs = {int(w): ms for w, ms in target_ms_by_width.items()}   # measured for widths 1..max gamma + 1
    n = sum(widths.values())
    if not n:
        return None
    total = sum(count * costs[min(int(w), max(costs))] for w, count in widths.items())
    return total / n / costs[1]


def aggregate(records: list[dict], costs: dict) -> list[dict]:
    """One row per contender: tokens/s (median and quartiles over runs), counted forwards, alpha,
    c, verify cost, and both predicted speedups. Measured speedups are added by `add_speedups`."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["kind"], r["temperature"], r["gamma"]), []).append(r)
    step_ms, draft_ms = costs["target_step_ms"], costs["draft_step_ms"] or 0.0   # None: no draft model
    rows = []
    for (kind, t, gamma), runs in groups.items():
        rates = [r["new_tokens"] / r["seconds"] for r in runs if r["seconds"] > 0]
        q1, med, q3 = quartiles(rates)
        tokens = sum(r["new_tokens"] for r in runs)
        target_fw = sum(r["target_forwards"] for r in runs)
        draft_fw = sum(r["draft_forwards"] for r in runs)
        widths: dict[str, int] = {}
        for r in runs:
            for w, n in r["target_widths"].items():
                widths[w] = widths.get(w, 0) + n
        tested = sum(r["tested"] for r in runs)
        alpha = sum(r["accepted"] for r in runs) / tested if tested else None
        drafter = find(KINDS[kind].drafter)   # None: the target alone
        # The draft's cost per step: the draft model's, timed alone; none for a drafter that runs no model.
        c = None if drafter is None else costs["c"] if drafter.needs_draft_model else 0.0
        row_draft_ms = draft_ms
        if drafter is not None and drafter.reads_features:   # no model of its own to time alone: its drafting time here
            drafted = sum(r.get("drafted", 0) for r in runs)
            row_draft_ms = 1000 * sum(r.get("draft_seconds", 0.0) for r in runs) / drafted if drafted else 0.0
            c = row_draft_ms / step_ms if drafted else None
        verify = verify_cost_steps(widths, costs["target_ms_by_width"]) or 1.0
        tokens_per_round = tokens / target_fw if target_fw else 0.0
        draft_steps_per_round = draft_fw / target_fw if target_fw else 0.0
        rows.append(dict(
            kind=kind, label=KINDS[kind].label, family=KINDS[kind].family, temperature=t, gamma=gamma,
            runs=len(runs), new_tokens=tokens, tok_s=med, tok_s_q1=q1, tok_s_q3=q3,
            tok_s_min=min(rates), tok_s_max=max(rates),
            target_forwards_per_token=target_fw / tokens if tokens else None,
            tokens_per_target_forward=tokens_per_round, draft_forwards_per_round=draft_steps_per_round,
            target_widths=dict(sorted(widths.items(), key=lambda kv: int(kv[0]))),
            eos_stops=sum(r["new_tokens"] < r["max_new_tokens"] for r in runs),
            alpha=alpha, c=c, verify_steps=verify,
            leviathan=leviathan_speedup(alpha, gamma, c) if alpha is not None and gamma and c is not None else None,
            predicted=predicted_speedup(tokens_per_round, draft_steps_per_round, row_draft_ms / 1000,
                                        verify * step_ms / 1000, step_ms / 1000) if target_fw else None))
    return rows


def drafted_gamma(row: dict) -> bool:
    """Whether a row's rounds drafted gamma tokens (verify forwards gamma + 1 wide). With a
    constant schedule and no confidence threshold only the rounds just before max_new_tokens draft
    fewer, at most gamma of them per run; transformers' defaults would draft 20 or stop early."""
    widths = {int(w): n for w, n in row["target_widths"].items()}
    narrower = sum(n for w, n in widths.items() if w < row["gamma"] + 1)
    return max(widths, default=0) <= row["gamma"] + 1 and narrower <= row["gamma"] * row["runs"]


def add_speedups(rows: list[dict]) -> dict:
    """Measured speedup of every row against the faster target-alone loop at its temperature,
    and each specdec row's time per token over its transformers counterpart's. Returns the baselines."""
    index = {(r["kind"], r["temperature"], r["gamma"]): r for r in rows}
    baselines = {}
    for t in sorted({r["temperature"] for r in rows}):
        candidates = [index[(k, t, None)] for k in BASELINES if (k, t, None) in index]
        fastest = max(candidates, key=lambda r: r["tok_s"])
        baselines[t] = {"kind": fastest["kind"], "label": fastest["label"], "tok_s": fastest["tok_s"]}
    for r in rows:
        base = baselines[r["temperature"]]["tok_s"]
        r["speedup"] = r["tok_s"] / base
        r["speedup_q1"], r["speedup_q3"] = r["tok_s_q1"] / base, r["tok_s_q3"] / base
        r["measured_over_predicted"] = r["speedup"] / r["predicted"] if r.get("predicted") else None
        other = index.get((KINDS[r["kind"]].counterpart, r["temperature"], r["gamma"]))
        r["over_transformers"] = other["tok_s"] / r["tok_s"] if other else None   # time per token ratio
    return baselines


def add_paired_speedups(rows: list[dict], records: list[dict], baselines: dict) -> None:
    """Each row's paired speedup: the geometric mean, over its runs, of the baseline's time per
    token on the same prompt and seed (same pass) over the row's. A ratio of medians mixes prompts
    that decode at different speeds and drifts with the machine; each pair ran within seconds of
    itself, so on a machine whose speed wanders the paired figure is the steadier one."""
    per_token: dict[tuple, dict] = {}   # (kind, gamma) -> {(T, prompt, seed, n): seconds per token}
    counts: dict[tuple, int] = {}
    for r in records:
        who = (r["kind"], r["gamma"], r["temperature"], r["prompt"], r["seed"])
        n = counts[who] = counts.get(who, -1) + 1   # the n-th pass pairs with the baseline's n-th
        if r["new_tokens"] and r["seconds"] > 0:
            per_token.setdefault(who[:2], {})[who[2:] + (n,)] = r["seconds"] / r["new_tokens"]
    for row in rows:
        base = per_token.get((baselines[row["temperature"]]["kind"], None), {})
        mine = per_token.get((row["kind"], row["gamma"]), {})
        logs = [math.log(base[k] / v) for k, v in mine.items() if k[0] == row["temperature"] and k in base]
        row["paired_speedup"] = math.exp(statistics.fmean(logs)) if logs else None


def check_greedy(runs: list[Run]) -> dict:
    """At T = 0 every contender must produce the same tokens for the same prompt as specdec's
    autoregressive loop (whole outputs: everyone stops at the same EOS or max_new_tokens)."""
    reference = {(r.prompt, r.seed): r.token_ids for r in runs
                 if r.contender.temperature == 0 and r.contender.kind == SPECDEC_AR}
    mismatches, compared = [], 0
    for r in runs:
        if r.contender.temperature != 0 or r.contender.kind == SPECDEC_AR:
            continue
        ref = reference.get((r.prompt, r.seed))
        if ref is None:
            continue
        compared += 1
        if r.token_ids != ref:
            first = next((i for i, (a, b) in enumerate(zip(ref, r.token_ids)) if a != b),
                         min(len(ref), len(r.token_ids)))   # one is a prefix of the other
            mismatches.append(dict(kind=r.contender.kind, label=r.contender.label, gamma=r.contender.gamma,
                                   prompt=r.prompt, seed=r.seed, first_difference=first,
                                   lengths=[len(ref), len(r.token_ids)]))
    return {"checked": bool(reference) and compared > 0, "agree": not mismatches, "compared": compared,
            "mismatches": mismatches,
            "how": "whole outputs token for token against specdec's autoregressive loop; every contender "
                   "stops at the same EOS id or after max_new_tokens"}


SMOKE_NOTE = ("a smoke run (--quick) checks that every contender runs and that greedy outputs agree; its few "
              "short runs measure no speed worth holding against the goals, which apply to the full bench "
              "(python -m specdec bench)")


def summarize(rows: list[dict], baselines: dict, greedy: dict, smoke: bool = False) -> dict:
    """Best gamma per temperature, specdec/assisted ratios, greedy verdict and the issue's goals
    (none for a smoke run: its numbers cannot meet or miss them)."""
    best, goals = {}, []
    for t in sorted(baselines):
        spec = [r for r in rows if r["temperature"] == t and r["family"] == "specdec" and r["gamma"]
                and r["kind"] != SPECDEC_UNTRACED]   # the headline is a traced run, as the app runs
        top = max(spec, key=lambda r: r["speedup"], default=None)
        model_rows = [r for r in spec if r["kind"] == SPECDEC_MODEL]
        best_model = max(model_rows, key=lambda r: r["speedup"], default=None)
        assisted = [r for r in rows if r["temperature"] == t and r["kind"] == HF_ASSISTED]
        best[f"{t:g}"] = {
            "baseline": baselines[t],
            "specdec": _brief(top), "specdec_model": _brief(best_model),
            "assisted": _brief(max(assisted, key=lambda r: r["speedup"], default=None))}
        target = {0.0: GOALS["speedup_t0"], 1.0: GOALS["speedup_t1"]}.get(float(t))
        if top and target:
            goals.append(dict(goal=f"specdec speculative at T={t:g}, best gamma >= {target}x the faster "
                                   f"target-alone loop",
                              value=top["speedup"], met=top["speedup"] >= target))
        if top and top.get("measured_over_predicted"):
            goals.append(dict(goal=f"T={t:g} best gamma: measured >= {GOALS['measured_over_predicted']} x predicted "
                                   f"from measured costs", value=top["measured_over_predicted"],
                              met=top["measured_over_predicted"] >= GOALS["measured_over_predicted"]))
        features = max((r for r in spec if r["kind"] == SPECDEC_FEATURES), key=lambda r: r["speedup"], default=None)
        if features:
            best[f"{t:g}"]["specdec_features"] = _brief(features)
            target = {0.0: FEATURES_GOALS["speedup_t0"], 1.0: FEATURES_GOALS["speedup_t1"]}.get(float(t))
            if target:
                goals.append(dict(goal=f"features drafter at T={t:g}, best gamma >= {target}x the faster "
                                       "target-alone loop", value=features["speedup"],
                                  met=features["speedup"] >= target))
    ratios = [r for r in rows if r["kind"] == SPECDEC_MODEL and r.get("over_transformers")]
    worst = max(ratios, key=lambda r: r["over_transformers"], default=None)
    least = min(ratios, key=lambda r: r["over_transformers"], default=None)
    if worst:
        goals.append(dict(goal=f"specdec time / assisted time <= {GOALS['specdec_over_assisted']} at every gamma and T",
                          value=worst["over_transformers"],
                          met=worst["over_transformers"] <= GOALS["specdec_over_assisted"]))
    over = [r for r in rows if r["kind"] == SPECDEC_FEATURES and r.get("over_transformers")]
    worst_features = max(over, key=lambda r: r["over_transformers"], default=None)
    if worst_features:
        goals.append(dict(goal=f"features drafter time / assisted time <= {FEATURES_GOALS['over_assisted']} at "
                               "every gamma and T", value=worst_features["over_transformers"],
                          met=worst_features["over_transformers"] <= FEATURES_GOALS["over_assisted"]))
    return {"best": best, "specdec_over_assisted": {"min": _brief(least), "max": _brief(worst)},
            "greedy_agree": greedy["agree"] if greedy["checked"] else None,
            "goals": [] if smoke else goals, **({"smoke_run": SMOKE_NOTE} if smoke else {})}


def tracing_cost(rows: list[dict]) -> dict:
    """What recording the trace costs: per T and gamma, the traced run's time per token over the
    same run's untraced time per token, minus one (both contenders ran interleaved)."""
    bare = {(r["temperature"], r["gamma"]): r for r in rows if r["kind"] == SPECDEC_UNTRACED}
    costs = {}
    for r in rows:
        twin = bare.get((r["temperature"], r["gamma"]))
        if r["kind"] == SPECDEC_MODEL and twin and r["tok_s"] and twin["tok_s"]:
            costs[(r["temperature"], r["gamma"])] = twin["tok_s"] / r["tok_s"] - 1
    values = sorted(costs.values())
    return {"by_run": {f"T={t:g} γ={g}": v for (t, g), v in sorted(costs.items())},
            "median": values[len(values) // 2] if values else None}


def _brief(row: dict | None) -> dict | None:
    """The summary's view of a row."""
    if row is None:
        return None
    keys = ("kind", "label", "temperature", "gamma", "tok_s", "speedup", "paired_speedup", "predicted", "leviathan",
            "measured_over_predicted", "over_transformers", "alpha")
    return {k: row.get(k) for k in keys}



# ---------------------------------------------------------------- text output (pure)

COLUMNS = [  # header, width, row -> text
    ("contender", 26, lambda r: r["label"]),
    ("T", 3, lambda r: f"{r['temperature']:g}"),
    ("γ", 2, lambda r: str(r["gamma"]) if r["gamma"] else "-"),
    ("tok/s", 6, lambda r: f"{r['tok_s']:.0f}"),
    ("[q1–q3]", 11, lambda r: f"[{r['tok_s_q1']:.0f}–{r['tok_s_q3']:.0f}]"),
    ("fwd/tok", 7, lambda r: _f(r["target_forwards_per_token"], 2)),
    ("α", 5, lambda r: _f(r["alpha"], 2)),
    ("c", 5, lambda r: _f(r["c"], 2)),
    ("verify", 6, lambda r: _f(r["verify_steps"], 2)),
    ("speedup", 7, lambda r: _f(r["speedup"], 2, "x")),
    ("Leviathan", 9, lambda r: _f(r["leviathan"], 2, "x")),
    ("predicted", 9, lambda r: _f(r["predicted"], 2, "x")),
    ("÷HF", 5, lambda r: _f(r["over_transformers"], 2)),
]


def _f(x, digits: int, suffix: str = "") -> str:
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def format_table(rows: list[dict]) -> str:
    """Fixed-width table, one row per contender x T x gamma; a blank line before each block
    (the two target-alone loops, then each speculative contender over gamma)."""
    cells = [[fmt(r) for _, _, fmt in COLUMNS] for r in rows]
    # each column as wide as its widest cell (a long contender name must not push the others right)
    widths = [max([w] + [len(c[i]) for c in cells]) for i, (_, w, _) in enumerate(COLUMNS)]

    def line(texts):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(texts, widths)))

    header = line([h for h, _, _ in COLUMNS])
    out = [header, "-" * len(header)]
    previous = None
    for r, texts in zip(rows, cells):
        block = (r["temperature"], r["kind"] if r["gamma"] else "target alone")
        if previous is not None and block != previous:
            out.append("")
        out.append(line(texts))
        previous = block
    return "\n".join(out)


LEGEND = ("tok/s: median over runs, [q1–q3] its quartiles (prompts differ, so they spread); fwd/tok: target "
          "forwards per token; α: accepted/tested drafts; c: draft step / target step; verify: mean target "
          "forward cost in target steps; speedup: tok/s ÷ the faster target-alone loop at the same T; "
          "Leviathan: (1-α^(γ+1))/((1-α)(γc+1)); predicted: from the measured costs and counted forwards; "
          "÷HF: specdec time per token ÷ transformers' (generate, assisted, prompt lookup)")


def format_summary(results: dict) -> str:
    s = results["summary"]
    lines = []
    for t, b in s["best"].items():
        base = b["baseline"]
        line = f"T={float(t):g}: baseline {base['label']} {base['tok_s']:.0f} tok/s"
        for key in ("specdec", "specdec_model", "specdec_features", "assisted"):
            r = b.get(key)
            if r and not (key in ("specdec_model", "specdec_features") and r["kind"] == b["specdec"]["kind"]):
                line += (f"; best {r['label']} γ={r['gamma']}: {r['speedup']:.2f}x"
                         + (f" (paired {r['paired_speedup']:.2f}x)" if r.get("paired_speedup") else "")
                         + (f" (predicted {r['predicted']:.2f}x, measured/predicted {r['measured_over_predicted']:.2f})"
                            if key.startswith("specdec") and r.get("predicted") else ""))
        lines.append(line)
    ratio = s["specdec_over_assisted"]
    if ratio["min"]:
        lo, hi = ratio["min"], ratio["max"]
        lines.append(f"specdec + draft model time ÷ transformers assisted time at equal γ: "
                     f"min {lo['over_transformers']:.2f} "
                     f"(T={lo['temperature']:g}, γ={lo['gamma']}), max {hi['over_transformers']:.2f} "
                     f"(T={hi['temperature']:g}, γ={hi['gamma']})")
    tracing = results.get("tracing_cost") or {}
    if tracing.get("median") is not None:
        lines.append(f"tracing cost (traced ÷ untraced time per token − 1, same runs interleaved): median "
                     f"{tracing['median']:+.1%} over {len(tracing['by_run'])} settings")
    g = results["greedy"]
    if not g["checked"]:
        lines.append("greedy agreement: not checked (no T=0 runs)")
    elif g["agree"]:
        lines.append(f"greedy agreement: OK, {g['compared']} T=0 runs matched specdec's autoregressive output "
                     f"token for token (whole outputs: all stop at the same EOS or max new tokens)")
    else:
        lines.append(f"greedy agreement: FAILED, {len(g['mismatches'])} of {g['compared']} T=0 runs differ:")
        for m in g["mismatches"][:10]:
            lines.append(f"  {m['label']} γ={m['gamma']} prompt {m['prompt']} seed {m['seed']}: first difference "
                         f"at token {m['first_difference']} (lengths {m['lengths'][0]} vs {m['lengths'][1]})")
    for goal in s["goals"]:
        lines.append(f"goal: {goal['goal']}: {goal['value']:.2f} {'met' if goal['met'] else 'NOT met'}")
    if s.get("smoke_run"):
        lines.append(f"goals: not checked: {s['smoke_run']}")
    for w in results.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)

