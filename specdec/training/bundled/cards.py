"""Model cards for the bundled pair: measured, never typed by hand.

`python -m specdec card` loads the pair from its folders exactly as the app does, measures the
acceptance rate and the cost gap (`specdec.explain.measure`), draws a few samples, and writes README.md in
each model folder from the folder's `training.json` (written by `python -m specdec train`).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

from ...core.sampling import SamplingConfig
from ...core.settings import RunSettings
from ...decoding.loop import autoregressive_generate
from ...explain import measure
from ...models.pair import ModelPair, load_pair

SAMPLE_PROMPTS = ["ROMEO.\n", "To be, or not to be,", "KING LEAR.\nBlow, winds,"]


def _samples(pair: ModelPair, model: str) -> list[str]:
    """Greedy and T=1 continuations of SAMPLE_PROMPTS by one of the two models alone."""
    solo = ModelPair(pair.tokenizer, getattr(pair, model), None, model, "-")
    out = []
    for prompt in SAMPLE_PROMPTS:
        for label, temp in (("greedy", 0.0), ("T=1, seed 0", 1.0)):
            g = autoregressive_generate(solo, prompt, RunSettings(max_new_tokens=60,
                                                                  sampling=SamplingConfig(temperature=temp)))
            out.append(f"*{label}* — `{prompt.strip()}`\n\n```text\n{prompt}{g.text}\n```")
    return out


def _distill_table(info: dict) -> str:
    """The draft's second phase (distillation toward the final target), when it had one."""
    rows = info.get("distill_history")
    if not rows:
        return ""
    lines = "\n".join(f"| {h['step']} | {h['train_loss']:.3f} | {h['val_loss']:.3f} | {h['val_beta']:.3f} | "
                      f"{h['seconds'] / 60:.1f} |" for h in rows)
    return ("\nThen the draft alone, distilled toward the final target (KL(p || q), "
            f"{info['config'].get('distill_steps')} steps):\n\n"
            "| step | KL | validation loss | mean β on validation text | minutes |\n|---:|---:|---:|---:|---:|\n"
            + lines + "\n")


def _on_policy_section(info: dict) -> str:
    """The draft's last phase: distilled on the target's own samples (`train --draft-only`)."""
    on = info.get("on_policy")
    if not on:
        return ""
    cfg = on["config"]
    temps = ", ".join("greedy" if t == 0 else f"T = {t:g}" for t in cfg["temperatures"])
    keys = [k for k in on["history"][-1] if k not in ("step", "loss", "seconds")]
    head = "| step | loss | " + " | ".join(keys) + " | minutes |\n|---:|---:|" + "---:|" * len(keys) + "---:|\n"
    before = "| 0 | – | " + " | ".join(f"{on['before'][k]:.3f}" for k in keys) + " | 0 |\n"
    rows = "".join(f"| {h['step']} | {h['loss']:.3f} | " + " | ".join(f"{h[k]:.3f}" for k in keys)
                   + f" | {h['seconds'] / 60:.1f} |\n" for h in on["history"])
    text = on["validation_text"]
    out = (f"\nThen on the target's own samples (on-policy, `python -m specdec train --draft-only`): "
           f"{cfg['sequences']} continuations at each of {temps} from prompts cut from the training works, "
           f"{on['pool_tokens']:,} sampled positions with the target's probabilities kept; loss **{cfg['loss']}** "
           f"at each sample's own temperature, {cfg['steps']} steps of {cfg['batch_size']} sequences, lr {cfg['lr']}, "
           f"seed {cfg['seed']}. Sampling {on['sample_seconds'] / 60:.1f} min, "
           + (f"the loss comparison {on['compare_seconds'] / 60:.1f} min, " if on.get("compare_seconds") else "")
           + f"training {on['train_seconds'] / 60:.1f} min, {on['seconds'] / 60:.1f} min in all on {on['threads']} "
           f"threads"
           + (f"; the MLP widened to {on['widened_mlp_to']} first (new units start silent)" if on.get('widened_mlp_to')
              else "") + ". β and agreement on held-out target samples (validation-work prompts):\n\n"
           + head + before + rows
           + f"\nMean β on the validation text (T = 1): {text['before']['val_beta']:.3f} before, "
             f"**{text['after']['val_beta']:.3f} after**; validation loss {text['before']['val_loss']:.3f} → "
             f"{text['after']['val_loss']:.3f}.\n")
    if on.get("loss_comparison"):
        out += ("\nThe loss was chosen by a short comparison (same draft, same samples, "
                f"{on['loss_comparison'][0]['steps']} steps each):\n\n| loss | " + " | ".join(keys) + " |\n|---|"
                + "---:|" * len(keys) + "\n" + "".join(f"| {r['loss']} | " + " | ".join(f"{r['after'][k]:.4f}"
                                                                                       for k in keys) + " |\n"
                                                    for r in on["loss_comparison"]))
    return out


def _acceptance_grid(measures: dict) -> str:
    """α for γ = 1..8 at each measured temperature (the draft's card)."""
    grid = measures.get("acceptance_grid")
    if not grid:
        return ""
    temps = sorted({r["temperature"] for r in grid})
    gammas = sorted({r["gamma"] for r in grid})
    cell = {(r["temperature"], r["gamma"]): r["alpha"] for r in grid}
    return ("\nAcceptance rate α by γ and temperature (the same prompts and seeds):\n\n| T | "
            + " | ".join(f"γ = {g}" for g in gammas) + " |\n|---|" + "---:|" * len(gammas) + "\n"
            + "".join(f"| {'0 (greedy)' if t == 0 else f'{t:g}'} | " + " | ".join(f"{cell[(t, g)]:.3f}" for g in gammas)
                      + " |\n" for t in temps))


def _card(name: str, info: dict, role: str, other: dict, measures: dict, samples: list[str],
          folder: Path) -> str:
    shape = info["shape"]
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    hist = "\n".join(f"| {h['step']} | {h['train_loss']:.3f} | {h['val_loss']:.3f} | {h['seconds'] / 60:.1f} |"
                     for h in info["history"])
    c, a = measures["cost"], measures["acceptance"]
    return f"""---
license: mit
language: en
library_name: transformers
pipeline_tag: text-generation
tags: [speculative-decoding, specdec, shakespeare, tiny]
---

# {name}

The **{role}** of specdec's bundled pair: a tiny Llama-style causal LM trained from scratch on
Shakespeare, shipped so that speculative decoding runs offline. Its partner is
`{other['shape']['name']}`. Load it like any hub model:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("assets/models/{name}")
tokenizer = AutoTokenizer.from_pretrained("assets/models/{name}")
```

## Training

- Corpus: {info['corpus']} — Project Gutenberg texts of Shakespeare's works (public domain),
  distributed by the Open Knowledge Foundation's `shakespeare` package (MIT). Fetched by the
  training command; not stored in the repository.
- Split: whole works held out for validation ({', '.join(info['validation_works'])});
  {info['train_tokens']:,} training tokens, {info['val_tokens']:,} validation tokens.
- Tokenizer: byte-level BPE trained with `tokenizers` on the training works, {info['config']['vocab_size']} tokens,
  `<|endoftext|>` as EOS (shared by both models).
- Architecture: `LlamaForCausalLM`, {shape['layers']} layer(s), width {shape['width']}, {shape['heads']} heads,
  MLP {shape['mlp']}, context {info['config']['context']}, tied embeddings; {info['params'] / 1e6:.2f} M parameters,
  stored as fp16 safetensors ({size_mb:.1f} MB).
- Optimisation: AdamW (lr {info['config']['lr']}, betas 0.9/0.95, weight decay 0.1), warm-up
  {info['config']['warmup']} steps then cosine to 10 %, {info['config']['steps']} steps of
  {info['config']['batch_size']} x {info['config']['context']} tokens ({info['tokens_seen']:,} tokens seen),
  seed {info['config']['seed']}.
- Hardware: {info['device']} ({info.get('threads', '?')} torch threads), torch {info['torch']}; wall time
  {info['train_seconds'] / 60:.1f} min (the machine was shared with other work, so this is an upper bound).
- Reproduce: `python -m specdec train` (both models train together; this one took
  {info['train_seconds'] / 60:.0f} min).

| step | train loss | validation loss | minutes |
|---:|---:|---:|---:|
{hist}
{_distill_table(info)}{_on_policy_section(info)}
**Validation loss: {info['val_loss']:.3f} nats/token** (partner: {other['val_loss']:.3f}).

## As a speculative-decoding pair (measured by `python -m specdec card`)

| measure | value |
|---|---|
| acceptance rate α at T = 1, γ = {a['gamma']} ({a['runs']} runs: {len(measure.PROMPTS)} prompts x \
{len(measure.SEEDS)} seeds, {a['tested']} drafts tested) | {a['alpha']:.3f} |
| tokens per target forward (same runs) | {a['tokens_per_target_forward']:.2f} |
| one draft decode step / one target decode step (KV cache), c | {c['draft_step_ms']:.2f} ms / \
{c['target_step_ms']:.2f} ms = {c['c']:.3f} |
| one target forward over γ + 1 = {c['gamma'] + 1} tokens / one target decode step | {c['verify_over_step']:.2f} |

Measured on {measures['machine']}.
{_acceptance_grid(measures) if role == "draft" else ""}
## Samples (this model alone)

{chr(10).join(samples)}

## Limitations

A toy: a few million parameters trained for minutes on one author. It produces
Shakespeare-flavoured text, not sense. It exists to make speculative decoding visible offline.
"""


def write_cards(out_dir: str = "assets/models", quick: bool = False) -> None:
    out = Path(out_dir)
    pair = load_pair(target=str(out / "specdec-target"), draft=str(out / "specdec-draft"))
    infos = {n: json.loads((out / n / "training.json").read_text()) for n in ("specdec-draft", "specdec-target")}
    if quick:   # the smoke test: cheap stand-ins, clearly labelled
        measures = {"cost": {"draft_step_ms": 0, "target_step_ms": 0, "c": 0, "verify_over_step": 0, "gamma": 4},
                    "acceptance": {"alpha": 0, "tested": 0, "runs": 0, "tokens_per_target_forward": 0, "gamma": 4},
                    "machine": "not measured (--quick)"}
    else:
        # One torch thread, as the bench measures: these models' ops are too small to split, and
        # two threads on two cores made a target step 1.5x slower (12.0 ms against 7.8 ms, minutes apart).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            measures = {"cost": measure.cost(pair), "acceptance": measure.acceptance(pair),
                        "acceptance_grid": measure.acceptance_grid(pair),
                        "machine": f"{platform.processor() or platform.machine()}, 1 torch thread"}
        finally:
            torch.set_num_threads(threads)
    for name, role, other, model in (("specdec-target", "target", "specdec-draft", "target"),
                                     ("specdec-draft", "draft", "specdec-target", "draft")):
        samples = [] if quick else _samples(pair, model)
        (out / name / "README.md").write_text(
            _card(name, infos[name], role, infos[other], measures, samples, out / name), encoding="utf-8")
    (out / "measurements.json").write_text(json.dumps(measures, indent=2))
