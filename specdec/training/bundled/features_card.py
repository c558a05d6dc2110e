"""The features drafter's model card: measured, never typed by hand (like `cards` for the pair).

`python -m specdec card --features --out FOLDER` loads the pair in FOLDER with its
`specdec-features` drafter as the app does, measures α at T = 1 and greedy (γ = 4, the cards'
8 prompts x 3 seeds) for the features drafter and, in the same interleaved runs, for the draft
model, the cost of a drafting step (from the runs' own draft time) against a target step, and
writes `specdec-features/README.md` from its `training.json`.
"""

from __future__ import annotations

import json
import platform
import statistics
from pathlib import Path

import torch

from ...core.sampling import SamplingConfig
from ...core.settings import RunSettings
from ...decoding.loop import speculative_generate
from ...drafting.features import FOLDER
from ...explain import measure
from ...explain.speed import predicted_speedup, speedup
from ...models.pair import load_pair


def acceptance(pair, drafter: str, gamma: int = 4, temperature: float = 1.0, max_new_tokens: int = 64) -> dict:
    """Pooled α over measure.PROMPTS x measure.SEEDS with one drafter, and its draft time per draft."""
    settings = RunSettings(gamma=gamma, max_new_tokens=max_new_tokens, drafter=drafter,
                           sampling=SamplingConfig(temperature=temperature))
    accepted = tested = drafted = 0
    draft_seconds, tpf = 0.0, []
    for prompt in measure.PROMPTS:
        for seed in measure.SEEDS:
            s = speculative_generate(pair, prompt, settings.with_(seed=seed), trace=False).stats
            accepted, tested, drafted = accepted + s.accepted, tested + s.tested, drafted + s.drafted
            draft_seconds += s.draft_seconds
            tpf.append(s.tokens_per_target_forward)
    return {"drafter": drafter, "alpha": accepted / tested if tested else 0.0, "tested": tested,
            "tokens_per_target_forward": statistics.mean(tpf), "draft_ms_per_draft": 1000 * draft_seconds / drafted,
            "gamma": gamma, "temperature": temperature}


def measured_speedup(pair, drafter: str, gamma: int = 4, temperature: float = 1.0) -> float:
    """Tokens per second against the target alone, pooled over measure.PROMPTS (seed 0), each pair
    of runs timed fairly by `measure.compare_with_target` (warmed up, A B B A)."""
    settings = RunSettings(gamma=gamma, max_new_tokens=64, drafter=drafter,
                           sampling=SamplingConfig(temperature=temperature))
    ratios = [speedup(*(g.stats for g in measure.compare_with_target(pair, prompt, settings)))
              for prompt in measure.PROMPTS]
    return statistics.mean(ratios)


def measure_all(pair, gamma: int = 4, quick: bool = False) -> dict:
    """α of both drafters at T = 1 and greedy, the costs and the speedups (one torch thread, as the
    bench); `quick`: only the features drafter's α at T = 1 and the costs (a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cost = measure.cost(pair, gamma)
        runs = [(1.0, "features")] if quick else [(t, d) for t in (1.0, 0.0) for d in ("features", "model")]
        rows = [acceptance(pair, d, gamma, t) for t, d in runs]
        for r in rows:
            r["measured_speedup"] = None if quick else measured_speedup(pair, r["drafter"], gamma, r["temperature"])
    finally:
        torch.set_num_threads(threads)
    step = cost["target_step_ms"]
    for r in rows:
        r["c"] = r["draft_ms_per_draft"] / step
        r["predicted_speedup"] = predicted_speedup(r["tokens_per_target_forward"], gamma, r["c"],
                                                   cost["verify_over_step"], 1.0)
    machine = f"{platform.processor() or platform.machine()}, 1 torch thread"
    return {"cost": cost, "acceptance": rows, "machine": machine}


def _fusion(cfg: dict) -> str:
    layers = cfg.get("feature_layers") or []
    if not layers:
        return ""
    return (f" As EAGLE-3 does, it also reads the target's residual stream after layers "
            f"{', '.join(map(str, layers))} (of the same verify forward): each RMS-normalised without weights, "
            f"mapped by a linear layer ({len(layers)} x 128 -> 128) and added to the last hidden state before the "
            "first linear layer; the fusion started at zero, so training began from the drafter without it.")


def _loss(value: float | None) -> str:
    """A history row's training loss; "–" where none was recorded (an evaluation after a run that
    ended on time, in records that kept it as null, or as NaN before they did)."""
    return "–" if value is None or value != value else f"{value:.3f}"


def _history(info: dict) -> str:
    keys = [k for k in info["history"][-1] if k not in ("step", "loss", "minutes")]
    head = "| step | loss | " + " | ".join(keys) + " | minutes |\n|---:|---:|" + "---:|" * len(keys) + "---:|\n"
    rows = "".join(f"| {h['step']} | {_loss(h['loss'])} | " + " | ".join(f"{h[k]:.3f}" for k in keys)
                   + f" | {h['minutes']:.1f} |\n" for h in info["history"])
    missing = any(_loss(h["loss"]) == "–" for h in info["history"])
    return head + rows + ("\nLoss –: an evaluation made when a stage's time ran out, after its last step; that step's "
                          "loss was not recorded.\n" if missing else "")


def _who(measures: dict) -> str:
    if any(r["measured_speedup"] is None for r in measures["acceptance"]):
        return "the features drafter alone (`--quick`: the draft model's α is on its own card)"
    return "both drafters in the same session"


def _x(ratio) -> str:
    return "not measured (--quick)" if ratio is None else f"{ratio:.2f}x"


def _schedule(cfg: dict) -> str:
    return f"min({cfg['steps']} steps, {cfg['minutes']:g} min)" if cfg["minutes"] else f"{cfg['steps']} steps"


def card(info: dict, measures: dict, size_mb: float) -> str:
    cfg = info["config"]
    temps = ", ".join("greedy" if t == 0 else f"T = {t:g}" for t in cfg["temperatures"])
    rows = "".join(f"| {r['drafter']} | {'greedy' if r['temperature'] == 0 else 'T = 1'} | {r['alpha']:.3f} "
                   f"({r['tested']} tested) | {r['tokens_per_target_forward']:.2f} | {r['c']:.3f} | "
                   f"{r['predicted_speedup']:.2f}x | {_x(r['measured_speedup'])} |\n" for r in measures["acceptance"])
    c = measures["cost"]
    return f"""---
license: mit
language: en
tags: [speculative-decoding, specdec, eagle, shakespeare, tiny]
---

# specdec-features

The **features drafter** of specdec's bundled pair (EAGLE-style, Li et al., ICML 2024): it drafts
from the target's own last hidden state instead of running a separate language model. Its input at
position t is the target's post-norm last hidden state at t (the vector the target's output head
reads, taken from the verify forward the target runs anyway) and the target's embedding of token
t + 1; a linear layer (2 x 128 -> 128) and one Llama decoder layer (4 heads, MLP {cfg['intermediate_size']}, its
own KV cache) predict the target's next feature, and the target's own final norm and output head turn
it into q. Drafts 2 onward read the drafter's own predicted feature.{_fusion(cfg)} Only the drafter's own weights
are here ({info['params'] / 1e6:.2f} M parameters, fp16 safetensors, {size_mb:.2f} MB); the
embedding, norm and head are the target's (`specdec-target`), frozen and shared. Load it with
`specdec.drafting.features.load(folder, target)`, or choose the drafter `features` on the page or in
`python -m specdec generate --drafter features`.

## Training (`python -m specdec train --features`)

On the target's own samples (on-policy): {', '.join(str(n) for n in cfg['sequences'])} continuations at
{temps} from prompts cut from the training works ({info['pool_sequences']} sequences of {cfg['context']}
tokens, the target's features kept while sampling; {info['sample_seconds'] / 60:.1f} min). The drafter is
unrolled {cfg['unroll']} drafting steps as at test time (steps 2.. read its own features and attend to
the exact elements before the chain, as in EAGLE-3's training-time test); each step pays
TV(p, q) + {cfg['kl_weight']} KL(p || q) + {cfg['reg_weight']} smooth-L1(feature, target feature).
AdamW (lr {cfg['lr']}, betas 0.9/0.95), warm-up {cfg['warmup']} steps then cosine to 10 % over
{_schedule(cfg)}:
{info['steps']} steps of {cfg['batch_size']} sequences in {info['train_minutes']:.1f} min on {info['threads']} torch
thread(s) of a machine shared with other work; seed {cfg['seed']}. β per drafting step on held-out
target samples (validation-work prompts; β = Σ min(p, q), what the acceptance test accepts there):

{_history(info)}
{info.get('note', '')}

## As a drafter (measured by `python -m specdec card --features`)

α at γ = 4 over the cards' {len(measure.PROMPTS)} prompts x {len(measure.SEEDS)} seeds, 64 new tokens,
{_who(measures)}. c = the run's draft time per draft / one target decode step
({c['target_step_ms']:.2f} ms); a verify over γ + 1 tokens costs {c['verify_over_step']:.2f} target steps. The
predicted speedup is the cost model's (`specdec.explain.speed.predicted_speedup`) from these numbers; the
measured one is tokens per second against the target alone, mean over the 8 prompts (seed 0), each
pair of runs warmed up and timed A B B A (`measure.compare_with_target`), eager engine.

| drafter | T | α | tokens per target forward | c | predicted speedup | measured speedup |
|---|---|---:|---:|---:|---:|---:|
{rows}
Measured on {measures['machine']}.

## Limitations

Its weights only make sense with this target: they read its features and reuse its head. The
first round of a run drafts nothing (the target has computed no feature yet: that verify forward is
the prompt's prefill). The static-cache engine and its CUDA graphs run it (the verify step writes the
target's feature rows); on the CPU they give the eager drafter's tokens, but no GPU has run it yet.
"""


def write_features_card(out_dir: str = "assets/models", quick: bool = False) -> dict:
    out = Path(out_dir)
    pair = load_pair(target=str(out / "specdec-target"), draft=str(out / "specdec-draft"))
    folder = out / FOLDER
    info = json.loads((folder / "training.json").read_text())
    measures = measure_all(pair, quick=quick)
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    (folder / "README.md").write_text(card(info, measures, size_mb), encoding="utf-8")
    (folder / "measurements.json").write_text(json.dumps(measures, indent=2))
    return measures
