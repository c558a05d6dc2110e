"""The card of a features drafter trained for a real chat target (`features_chat`): measured, never
typed by hand. α at γ = 4 (greedy, the pair's own sampling, T = 1) on hand-written chat prompts the training never saw,
the drafting cost c against a target step, the speedup over the target alone, and the p-mass the
drafter's vocabulary subset holds where the target answers.

`measure_chat` on a pair whose `feature_net` is the drafter; `coverage` on a held-out pool.
"""

from __future__ import annotations

import platform
import statistics
import zlib

import torch

from ...core.sampling import SamplingConfig
from ...core.settings import RunSettings
from ...decoding.loop import speculative_generate
from ...explain import measure
from ...explain.speed import predicted_speedup, speedup

PROMPTS = measure.CHAT_PROMPTS   # chat questions a visitor might type; none is among the training's topics' wording
SEEDS = (0, 1)


def run_seed(seed: int, ids: list[int]) -> int:
    """The seed of one prompt's sampled run: the crc32 of `seed` and the prompt's ids (32 bits, because
    torch's CPU generator, a Mersenne twister, keeps only a seed's low 32 bits).

    Why: α's interval resamples prompts, so the prompts' runs must be independent draws. Seeded alike,
    every prompt's answer would open on the same random numbers, a lucky seed would lift them all
    together, and the interval would not see it."""
    return zlib.crc32(f"{seed}:{','.join(map(str, ids))}".encode())


def chat_ids(tokenizer) -> list[list[int]]:
    from .chat_pool import chat_prompt

    return [chat_prompt(tokenizer, p) for p in PROMPTS]


def acceptance(pair, prompts: list[list[int]], sampling: float | SamplingConfig, gamma: int = 4, new: int = 64,
               seeds: tuple[int, ...] = SEEDS) -> dict:
    """Pooled α of the features drafter over the prompts (greedy: one seed; sampled: `seeds`, each prompt's
    runs seeded apart by `run_seed`), at a temperature (top-k and top-p off) or a whole sampling."""
    if not isinstance(sampling, SamplingConfig):
        sampling = SamplingConfig(temperature=sampling)
    temperature = sampling.temperature
    settings = RunSettings(gamma=gamma, max_new_tokens=new, drafter="features", sampling=sampling)
    drafted, seconds, tpf, per_prompt = 0, 0.0, [], []   # per_prompt: (accepted, tested) over its seeds
    for ids in prompts:
        accepted = tested = 0
        for seed in seeds[:1] if temperature == 0 else seeds:
            s = speculative_generate(pair, ids, settings.with_(seed=run_seed(seed, ids)), trace=False).stats
            accepted, tested, drafted = accepted + s.accepted, tested + s.tested, drafted + s.drafted
            seconds += s.draft_seconds
            tpf.append(s.tokens_per_target_forward)
        per_prompt.append((accepted, tested))
    accepted, tested = (sum(column) for column in zip(*per_prompt)) if per_prompt else (0, 0)
    return {"temperature": temperature, "gamma": gamma, "alpha": accepted / tested if tested else 0.0,
            "tested": tested, "tokens_per_target_forward": statistics.mean(tpf),
            "draft_ms_per_draft": 1000 * seconds / max(drafted, 1), "per_prompt": per_prompt}


def card_samplings(own: SamplingConfig) -> dict[str, SamplingConfig]:
    """What the card measures, by name: greedy, the pair's `own` sampling (what its page, CLI and API
    start with), and T = 1 (top-k and top-p off: the full distribution)."""
    return {"greedy": SamplingConfig(temperature=0.0), "the pair's own": own, "T = 1": SamplingConfig(temperature=1.0)}


def measure_chat(pair, prompts: list[list[int]], own: SamplingConfig, gamma: int = 4, timed: int | None = None,
                 picked=lambda sampling: None) -> dict:
    """α at `gamma` for each of `card_samplings(own)`, in the threads a run of the pair takes here
    (`core.threads`: the cores free when it starts), then the speedup over the target alone at the γ
    the pair picks for that sampling (`picked(sampling)`, None: `gamma`), each prompt's pair of runs
    warmed up and timed A B B A (`measure.compare_with_target`). A target step is the target-alone
    runs' time per token; a verify, the speculative runs' time per target forward. `timed`: how many
    of the prompts are timed (all by default; fewer on a loaded machine)."""
    from ...core.threads import run_threads, threads_for_model

    with run_threads(threads_for_model(pair.target)) as threads:
        rows = []
        for name, sampling in card_samplings(own).items():
            r = acceptance(pair, prompts, sampling, gamma) | {"sampling": name, "alpha_gamma": gamma}
            r["gamma"] = picked(sampling) or gamma
            settings = RunSettings(gamma=r["gamma"], max_new_tokens=64, drafter="features", sampling=sampling)
            runs = [measure.compare_with_target(pair, ids, settings.with_(seed=run_seed(SEEDS[0], ids)))
                    for ids in prompts[:timed]]
            rows.append(r | timed_row(runs, r["draft_ms_per_draft"], r["gamma"]))
    dtype = str(pair.dtype).replace("torch.", "")
    return {"acceptance": rows, "timed_prompts": len(prompts[:timed]), "dtype": dtype, "threads": threads,
            "machine": f"{platform.processor() or platform.machine()}, {threads} torch thread(s), {dtype}"}


def timed_row(runs, draft_ms: float, gamma: int) -> dict:
    """The measured and predicted speedups of (speculative, target alone) run pairs at `gamma`, and
    the costs the prediction reads (tokens per target forward from the timed runs themselves)."""
    step = 1000 * sum(b.stats.wall_seconds for _, b in runs) / sum(b.stats.new_tokens for _, b in runs)
    verify = 1000 * sum(a.stats.verify_seconds for a, _ in runs) / sum(a.stats.target_forwards for a, _ in runs)
    per_forward = sum(a.stats.new_tokens for a, _ in runs) / sum(a.stats.target_forwards for a, _ in runs)
    c = draft_ms / step
    return {"measured_speedup": statistics.mean(speedup(a.stats, b.stats) for a, b in runs),
            "target_step_ms": step, "verify_ms": verify, "c": c, "timed_tokens_per_target_forward": per_forward,
            "predicted_speedup": predicted_speedup(per_forward, gamma, c, verify / step, 1.0)}


@torch.no_grad()
def coverage(target, pool: dict, ids: torch.Tensor) -> dict:
    """Mean and median p-mass (T = 1) inside the subset `ids`, and how often the target's argmax lies
    in it, at the sampled positions of a pool (`chat_pool`: position i holds p of token i + 1)."""
    pos = torch.arange(pool["ids"].shape[1])[None]
    m = (pos + 1 >= pool["starts"][:, None]) & (pos + 1 < pool["ends"][:, None])
    feats, lse = pool["feats"][m].float(), pool["lse"][m]
    weight = target.get_output_embeddings().weight.detach()[ids].float()   # a bfloat16 head: its products in float32
    mass = torch.cat([torch.exp(f @ weight.T - z[:, None]).sum(-1) for f, z in zip(feats.split(1024), lse.split(1024))])
    return {"size": len(ids), "mean_mass": float(mass.mean()), "median_mass": float(mass.median()),
            "argmax_inside": float(torch.isin(pool["top"][m], ids).float().mean()), "positions": int(m.sum())}


def _sampling_words(row: dict) -> str:
    """A card row's sampling, in words (rows measured before the pair's own sampling had one: by T)."""
    if "sampling" in row:
        return row["sampling"]
    return "greedy" if row["temperature"] == 0 else f"T = {row['temperature']:g}"


def _alpha_gamma(measures: dict) -> int:
    rows = measures["acceptance"]
    return rows[0].get("alpha_gamma", rows[0]["gamma"])


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _steps(measures: dict) -> str:
    """What a target step and a verify cost where the speedups were measured (they set the speedup
    as much as α does, and differ from machine to machine): the first row's (greedy)."""
    row = measures["acceptance"][0]
    step, verify = row["target_step_ms"], row["verify_ms"]
    bound = ": on this CPU a verify is bound by arithmetic, not only by reading the weights"
    why = bound if verify > 1.5 * step else ""
    return (f"a target step took {step:.0f} ms there and a verify of γ + 1 = {row['gamma'] + 1} tokens "
            f"{verify:.0f} ms ({verify / step:.1f} steps{why}).")


def _where_trained(record: dict) -> str:
    if record.get("device", "CPU") == "CPU":
        return "`python -m specdec train --features --chat-target FOLDER`"
    return ("`python -m specdec chat-train`: the pools and loss of `python -m specdec train --features "
            "--chat-target FOLDER`, on a GPU")


def _on_what(record: dict) -> str:
    """Where the steps ran, in words (a GPU run also says how its pools were drawn)."""
    if record.get("device", "CPU") == "CPU":
        return f"on {record['threads']} torch thread(s) of a 2-core machine"
    pool = record.get("pool", {})
    return (f"on one {record['device']} (TF32 products in training; the pools, {pool.get('batch', '?')} "
            f"questions a batch, drawn in float32 in {record.get('pool_seconds', 0):.0f} s and kept in memory)")


def _data_text(record: dict) -> str:
    """Where the training rows came from, in words (`training.chat.sharegpt` records its data)."""
    data = record.get("data")
    if not data:
        return ("On-policy, no data download: the target wrote its own questions (asked to write one about a topic "
                "from a fixed list, T = 0.7), answered them under its chat template at T = 1 and greedily, and "
                f"continued some as raw text; {record['pool_sequences']} training rows.")
    steps, batch = record["steps"] - record.get("start_step", 0), record["config"]["batch_size"]
    before = f" Went on from {record['init_from_text']}." if record.get("init_from_text") else ""
    answer = "its gpt answer"
    if data.get("answers_from", "").startswith("the target's own"):   # `training.chat.answers`
        answer = ("the target's own answer to it (made by `specdec chat-answers`: "
                  f"{data['answers_from'].split('(')[-1].rstrip(')').replace(',', ', ')}, interleaved)")
    templated = sum(s["rows"] for s in data.get("prompt_sets", []) if s["questions"] == "templates")
    if templated:   # `answers.template_humans`
        answer += ("; interleaved with them row by row, its answers to questions as visitors type them (`chat_pool."
                   "template_questions`: forms such as \"What is {topic}?\" over fixed lists of topics and tasks; no "
                   f"download; {templated:,} rows made)")
    return (f"ShareGPT's prompts ({data['source']}, sha256 {data['sha256'][:12]}…; licence: {data['licence']}): "
            f"each kept conversation's opening human turn under the chat template, then {answer}, "
            f"{data['length']} tokens a row, the target's features and p computed once ({data['forward']}) "
            f"and kept in float16 on disk. Filter: {data['filter_text']}. {data['rows']} training rows "
            f"({data['tokens']:,} tokens), {data['eval_rows']} held out; {steps * batch / data['rows']:.1f} epochs. "
            f"Vocabulary subset: {data['vocab']}.{before}")


def _fused(cfg: dict) -> str:
    """The card's words for EAGLE-3's fusion, when the drafter has it."""
    layers = cfg.get("feature_layers") or []
    if not layers:
        return ""
    return (f" (fused with its residual stream after layers {', '.join(map(str, layers))} of the target, "
            "EAGLE-3, Li et al. 2025: each RMS-normalised, one linear map onto the feature)")


def _loss(cfg: dict) -> str:
    text = f"TV + {cfg['kl_weight']} KL + {cfg['reg_weight']} smooth-L1"
    if cfg.get("sharp"):   # `features_chat.sharp_terms`
        text += f" + (1 − β at T = {cfg['sharp']}: p and q both at that temperature)"
    return text


def card(record: dict, measures: dict, cover: dict, size_mb: float, target_name: str, kinds: dict | None = None
         ) -> str:
    """The drafter's README.md from its training record, its measures and its subset's coverage, and
    its α on three kinds of prompt where measured (`prompt_kinds.kinds_of`)."""
    from .prompt_kinds import kinds_section

    cfg = record["config"]
    rows = "".join(f"| {_sampling_words(r)} | {r['alpha']:.3f} ({r['tested']} tested) | {r['gamma']} | "
                   f"{r.get('timed_tokens_per_target_forward', r['tokens_per_target_forward']):.2f} | {r['c']:.3f} | "
                   f"{r['verify_ms'] / r['target_step_ms']:.2f} | {r['predicted_speedup']:.2f}x | "
                   f"{r['measured_speedup']:.2f}x |\n" for r in measures["acceptance"])
    last = record["after"]
    betas = ", ".join(f"{k} {v:.3f}" for k, v in last.items() if k.startswith(("beta", "greedy", "subset")))
    return f"""---
license: apache-2.0
language: en
tags: [speculative-decoding, specdec, eagle, fr-spec, smollm2]
---

# specdec-features for {target_name}

A **features drafter** (EAGLE-style, Li et al. 2024) trained by specdec for {target_name}: one Llama
decoder layer (MLP {cfg['intermediate_size']} wide) over the target's post-norm last hidden state{_fused(cfg)}
and the next token's embedding, read through the target's own final norm and output head.
q is computed through a **frequency-ranked vocabulary subset** (FR-Spec, Zhao et al. 2025): the
{cover['size']:,} token ids the target emitted most often in its own training answers. q is 0 outside
it; the exact rule still gives exactly p (a token outside can only come from the residual).
Weights in fp16 ({record['params'] / 1e6:.2f} M parameters, {size_mb:.1f} MB), q computed in float32.

## Training ({_where_trained(record)})

{_data_text(record)} {record['steps']} steps of
{cfg['batch_size']} rows in {record['train_minutes']:.1f} min {_on_what(record)}; unroll {cfg['unroll']},
lr {cfg['lr']}, {_loss(cfg)}, read through the subset.
Held out at the end: {betas}.

## Coverage of the subset (held-out answers, T = 1)

Mean p-mass inside: {_pct(cover['mean_mass'])} (median {_pct(cover['median_mass'])}); the target's
argmax lies inside at {_pct(cover['argmax_inside'])} of {cover['positions']:,} positions. α cannot exceed the mass
q can reach.

## As a drafter (64 new tokens, {len(PROMPTS)} hand-written chat prompts, {measures['timed_prompts']} timed)

α at γ = {_alpha_gamma(measures)}; the speedups at the γ the pair picks for that sampling on this machine
(the page's and the CLI's start), with the tokens each target forward gave in the timed runs.

| sampling | α | γ | tokens per target forward | c | verify ÷ step | predicted speedup | measured speedup |
|---|---:|---:|---:|---:|---:|---:|---:|
{rows}
Measured on {measures['machine']}: {_steps(measures)}
""" + ("\n" + kinds_section(kinds) if kinds else "")
