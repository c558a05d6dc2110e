"""Distil the draft on the target's own samples (on-policy for speculative decoding).

A speculative decoder's output follows p, so the contexts a draft meets are the target's own
generations, at the temperature the user picked. This phase samples continuations from the frozen
target (at T = 1, 0.7 and greedy, from prompts cut from the training text), keeps the target's
log-probabilities at every generated position (computed while sampling: no second target pass),
and trains the draft to match them at the sample's own temperature.

The loss is chosen by a short measured comparison (see the draft's model card): total variation
TV(p_T, q_T) is exactly what the acceptance test rewards (beta = 1 - TV), forward KL(p_T || q_T)
gives smoother gradients where q is far from p; `mix` is their mean.

    python -m specdec train --draft-only                   # this phase, on the bundled pair
    python -m specdec train --draft-only --compare-losses  # first the short loss comparison

Reproducible (seeded prompts, sampling and batches), resumable (a checkpoint every
`checkpoint_every` steps; the sample pool is saved once it is drawn), with a progress bar.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

LOSSES = ("kl", "tv", "mix")


@dataclass
class DistillConfig:
    seed: int = 0
    temperatures: tuple[float, ...] = (1.0, 0.7, 0.0)   # 0 = greedy continuations
    sequences: int = 1024          # sampled continuations per temperature
    eval_sequences: int = 64       # per temperature, from validation prompts (held out)
    prompt_tokens: tuple[int, int] = (8, 64)   # prompt length range, cut from the text
    context: int = 256             # prompt + continuation
    sample_batch: int = 256        # continuations sampled at once (throughput: 940 tokens/s at 256 on 2 cores)
    steps: int = 6000
    batch_size: int = 16
    lr: float = 1e-3               # fine-tuning a trained draft: a third of the recipe's peak
    warmup: int = 100
    # TV won the comparison (600 steps from the bundled draft, 170k sampled positions): beta at
    # T = 1 0.679 (KL 0.672, mix 0.676), at T = 0.7 0.717 (0.713, 0.717), greedy agreement 0.805
    # (0.792, 0.804). It is what the acceptance test rewards: beta = 1 - TV.
    loss: str = "tv"
    greedy_loss_temperature: float = 1.0   # greedy continuations are fitted at this temperature
    eval_every: int = 500
    checkpoint_every: int = 250
    threads: int | None = None


# ---------------------------------------------------------------- sampling from the target

@torch.no_grad()
def sample_continuations(model, prompts: list[torch.Tensor], length: int, temperature: float,
                         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Continue each prompt to `length` tokens with the model at `temperature` (0 = greedy).

    Prompts may differ in length: they are left-aligned and each row starts sampling where its
    own prompt ends (rows still in their prompt copy the prompt's token). Returns ids [B, length],
    the model's log-probabilities (T = 1, float16) at positions 0 .. length - 2, and each row's
    prompt length. A KV cache makes this one token-step per position for the whole batch.
    """
    from transformers import DynamicCache

    starts = torch.tensor([len(p) for p in prompts])
    batch = len(prompts)
    ids = torch.zeros(batch, length, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
    vocab = model.config.vocab_size
    logp = torch.empty(batch, length - 1, vocab, dtype=torch.float16)
    cache = DynamicCache(config=model.config)
    first = int(starts.min())
    out = model(ids[:, :first], past_key_values=cache, use_cache=True).logits.float()
    logp[:, :first] = torch.log_softmax(out, -1).half()
    for pos in range(first, length):
        step_logp = torch.log_softmax(out[:, -1], -1)
        if temperature == 0:
            nxt = step_logp.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(step_logp / temperature, -1), 1, generator=generator).squeeze(1)
        in_prompt = pos < starts
        ids[:, pos] = torch.where(in_prompt, ids[:, pos], nxt)
        if pos + 1 < length:
            out = model(ids[:, pos:pos + 1], past_key_values=cache, use_cache=True).logits.float()
            logp[:, pos] = torch.log_softmax(out[:, -1], -1).half()
    return ids, logp, starts


def random_prompts(text_ids: torch.Tensor, count: int, lengths: tuple[int, int],
                   generator: torch.Generator) -> list[torch.Tensor]:
    lo, hi = lengths
    sizes = torch.randint(lo, hi + 1, (count,), generator=generator).tolist()
    starts = torch.randint(0, len(text_ids) - hi - 1, (count,), generator=generator).tolist()
    return [text_ids[s:s + n] for s, n in zip(starts, sizes)]


@dataclass
class Pool:
    """Target samples: ids [N, L], target log-probs [N, L-1, V] (fp16), where each row's sampled
    part starts, and the temperature each row was sampled at."""

    ids: torch.Tensor
    logp: torch.Tensor
    starts: torch.Tensor
    temps: torch.Tensor

    @staticmethod
    def cat(parts: list[Pool]) -> Pool:
        return Pool(*(torch.cat([getattr(p, k) for p in parts]) for k in ("ids", "logp", "starts", "temps")))

    def __len__(self) -> int:
        return len(self.ids)


def draw_pool(target, text_ids, per_temperature: int, cfg: DistillConfig, seed: int, bar=None,
              done: list[Pool] | None = None, on_chunk=None) -> Pool:
    """`per_temperature` continuations at each of cfg.temperatures, in chunks of cfg.sample_batch
    (each chunk seeded on its own, so a resumed draw gives the same pool)."""
    parts = list(done or [])
    chunks = [(t, i) for t in cfg.temperatures for i in range(0, per_temperature, cfg.sample_batch)]
    for k, (temp, first) in enumerate(chunks):
        if k < len(parts):
            continue
        n = min(cfg.sample_batch, per_temperature - first)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        prompts = random_prompts(text_ids, n, cfg.prompt_tokens, gen)
        ids, logp, starts = sample_continuations(target, prompts, cfg.context, temp, gen)
        parts.append(Pool(ids, logp, starts, torch.full((n,), float(temp))))
        if on_chunk:
            on_chunk(parts)
        if bar is not None:
            bar.update(n * (cfg.context - int(starts.float().mean())))
    return Pool.cat(parts)


# ---------------------------------------------------------------- the loss

def position_mask(starts: torch.Tensor, length: int) -> torch.Tensor:
    """[B, length - 1] True where the position predicts a sampled token (not a prompt token)."""
    pos = torch.arange(length - 1)
    return pos[None, :] >= (starts[:, None] - 1)


def divergences(student_logits: torch.Tensor, teacher_logp: torch.Tensor, temps: torch.Tensor,
                greedy_temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """Per position: TV(p_T, q_T) and KL(p_T || q_T), T the row's temperature (greedy rows at
    `greedy_temperature`). [B, P] each."""
    t = torch.where(temps > 0, temps, torch.full_like(temps, greedy_temperature))[:, None, None]
    log_q = torch.log_softmax(student_logits.float() / t, -1)
    log_p = torch.log_softmax(teacher_logp.float() / t, -1)
    p = log_p.exp()
    tv = 0.5 * (p - log_q.exp()).abs().sum(-1)
    kl = (p * (log_p - log_q)).sum(-1)
    return {"tv": tv, "kl": kl}


def loss_of(kind: str, parts: dict[str, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    per = {"tv": parts["tv"], "kl": parts["kl"], "mix": 0.5 * (parts["tv"] + parts["kl"])}[kind]
    return (per * mask).sum() / mask.sum()


# ---------------------------------------------------------------- measuring agreement

@torch.no_grad()
def agreement_on(draft, pool: Pool, batch: int = 32) -> dict[str, float]:
    """On a pool of target samples, per temperature: mean beta = sum(min(p_T, q_T)) at sampled
    positions (the acceptance a draft would see there), and for greedy rows the share of positions
    where argmax q == argmax p."""
    sums: dict[float, list[float]] = {}
    for i in range(0, len(pool), batch):
        ids, logp, starts, temps = (x[i:i + batch] for x in (pool.ids, pool.logp, pool.starts, pool.temps))
        z = draft(ids[:, :-1]).logits.float()
        mask = position_mask(starts, ids.shape[1]).float()
        for temp in temps.unique().tolist():
            rows = temps == temp
            m = mask[rows]
            if temp == 0:
                hit = (z[rows].argmax(-1) == logp[rows].float().argmax(-1)).float()
            else:
                q = torch.softmax(z[rows] / temp, -1)
                p = torch.softmax(logp[rows].float() / temp, -1)
                hit = torch.minimum(p, q).sum(-1)
            acc = sums.setdefault(temp, [0.0, 0.0])
            acc[0] += (hit * m).sum().item()
            acc[1] += m.sum().item()
    return {("greedy agreement" if t == 0 else f"beta at T={t:g}"): s / n for t, (s, n) in sorted(sums.items())}


# ---------------------------------------------------------------- training

def lr_at(step: int, cfg: DistillConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def draw_pools(target, train_ids, val_ids, cfg: DistillConfig, work: Path, log=print,
               progress: bool = True) -> dict[str, Pool]:
    """The training pool (from training-text prompts) and the held-out evaluation pool (from
    validation-text prompts): drawn once and saved in `work`; a draw cut off resumes by chunk."""
    from tqdm.auto import tqdm

    pools = {}
    for name, text, count, seed in (("eval", val_ids, cfg.eval_sequences, cfg.seed + 7),
                                    ("train", train_ids, cfg.sequences, cfg.seed)):
        path, partial = work / f"pool-{name}.pt", work / f"pool-{name}.partial.pt"
        if path.exists():
            pools[name] = Pool(**torch.load(path))
            log(f"{name} pool: {len(pools[name])} samples reloaded from {path}")
            continue
        done = [Pool(**d) for d in torch.load(partial)] if partial.exists() else []
        total = count * len(cfg.temperatures) * (cfg.context - sum(cfg.prompt_tokens) // 2)
        bar = tqdm(total=total, desc=f"sampling the target ({name})", unit="tok", disable=not progress)

        def save(parts, partial=partial):
            torch.save([asdict(p) for p in parts], partial)

        pools[name] = draw_pool(target, text, count, cfg, seed, bar, done, on_chunk=save)
        bar.close()
        torch.save(asdict(pools[name]), path)
        partial.unlink(missing_ok=True)
    return pools


def distill(target, draft, train_ids, val_ids, cfg: DistillConfig, work: Path, log=print,
            progress: bool = True) -> dict:
    """Draw (or reload) the pools, then train `draft` in place for cfg.steps; resumable from `work`."""
    if cfg.loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {cfg.loss!r}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    work.mkdir(parents=True, exist_ok=True)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    t_start = time.perf_counter()
    pools = draw_pools(target, train_ids, val_ids, cfg, work, log, progress)
    sample_seconds = time.perf_counter() - t_start
    t_train = time.perf_counter()
    before, history = _train(draft, pools, cfg, work / "checkpoint.pt", log, progress)
    pool = pools["train"]
    return {"config": {**asdict(cfg)}, "before": before, "after": history[-1] if history else None,
            "history": history, "sample_seconds": round(sample_seconds, 1),
            "train_seconds": round(time.perf_counter() - t_train, 1),
            "pool_tokens": int(position_mask(pool.starts, pool.ids.shape[1]).sum())}


def _train(draft, pools: dict[str, Pool], cfg: DistillConfig, ckpt_path: Path, log, progress: bool):
    """The training loop, from its checkpoint if there is one: (agreement before, history)."""
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    history, step = [], 0
    before = agreement_on(draft.eval(), pools["eval"])
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        draft.load_state_dict(ck["draft"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        history, step, before = ck["history"], ck["step"], ck["before"]
        log(f"resumed at step {step}")
    log("before: " + ", ".join(f"{k} {v:.4f}" for k, v in before.items()))
    draft.train()
    pool = pools["train"]
    bar = tqdm(total=cfg.steps, initial=step, desc=f"distilling the draft ({cfg.loss})", unit="step",
               disable=not progress)
    t_train = time.perf_counter()
    while step < cfg.steps:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        rows = torch.randint(0, len(pool), (cfg.batch_size,), generator=gen)
        ids, logp, starts, temps = pool.ids[rows], pool.logp[rows], pool.starts[rows], pool.temps[rows]
        parts = divergences(draft(ids[:, :-1]).logits, logp, temps, cfg.greedy_loss_temperature)
        loss = loss_of(cfg.loss, parts, position_mask(starts, ids.shape[1]).float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        step += 1
        bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            now = agreement_on(draft.eval(), pools["eval"])
            draft.train()
            history.append({"step": step, "loss": round(loss.item(), 4), **{k: round(v, 4) for k, v in now.items()},
                            "seconds": round(time.perf_counter() - t_train, 1)})
            bar.write(f"step {step}/{cfg.steps}  {cfg.loss} {loss.item():.4f}  "
                      + "  ".join(f"{k} {v:.4f}" for k, v in now.items()))
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                        "history": history, "step": step, "before": before}, ckpt_path)
    bar.close()
    draft.eval()
    return before, history


def widen_mlp(model, size: int, seed: int = 0):
    """The same function with a wider MLP: new hidden units get random input weights and zero
    output weights, so the model's outputs are unchanged until training moves them."""
    gen = torch.Generator().manual_seed(seed)
    for layer in model.model.layers:
        mlp = layer.mlp
        old = mlp.gate_proj.out_features
        hidden = mlp.gate_proj.in_features
        new_gate = torch.nn.Linear(hidden, size, bias=False)
        new_up = torch.nn.Linear(hidden, size, bias=False)
        new_down = torch.nn.Linear(size, hidden, bias=False)
        with torch.no_grad():
            for new, cur in ((new_gate, mlp.gate_proj), (new_up, mlp.up_proj)):
                new.weight.copy_(torch.randn(size, hidden, generator=gen) * 0.02)
                new.weight[:old] = cur.weight
            new_down.weight.zero_()
            new_down.weight[:, :old] = mlp.down_proj.weight
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = new_gate, new_up, new_down
        mlp.intermediate_size = size
    model.config.intermediate_size = size
    return model




# ---------------------------------------------------------------- the command

def compare_losses(target, draft, train_ids, val_ids, cfg: DistillConfig, work: Path, steps: int, log=print,
                   progress=True) -> list[dict]:
    """The same short run from the same draft and the same sample pool for each loss: what each
    buys in beta at T = 1 and 0.7 and in greedy agreement (the card's table)."""
    import copy

    rows = []
    for kind in LOSSES:
        trial = copy.deepcopy(draft)
        short = DistillConfig(**{**asdict(cfg), "loss": kind, "steps": steps, "eval_every": steps,
                                 "checkpoint_every": steps, "warmup": min(cfg.warmup, steps // 10)})
        result = distill(target, trial, train_ids, val_ids, short, work, log, progress)
        (work / "checkpoint.pt").unlink(missing_ok=True)   # the next loss starts from the same draft
        rows.append({"loss": kind, "steps": steps, "before": result["before"], "after": result["after"]})
        log(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in result["after"].items()))
    return rows


def draft_only(source: Path, out: Path, cfg: DistillConfig, compare_steps: int = 0, widen: int = 0,
               log=print, progress=True, corpus_dir: str | None = None) -> dict:
    """Distil the draft of the pair in `source` on its target's own samples; write the pair to `out`
    (the target's files copied unchanged, the new draft beside them). Resumable: the sample pools
    and checkpoints are kept in `out/.distill-work` until the draft is saved."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .recipe import agreement, encode_docs, evaluate, fetch_corpus, read_corpus_dir, split_documents

    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(source / "specdec-target")
    load = dict(dtype=torch.float32, use_safetensors=True, trust_remote_code=False)
    target = AutoModelForCausalLM.from_pretrained(source / "specdec-target", **load).eval()
    draft = AutoModelForCausalLM.from_pretrained(source / "specdec-draft", **load)
    if widen:
        draft = widen_mlp(draft, widen, cfg.seed)
    texts = (read_corpus_dir(Path(corpus_dir)) if corpus_dir
             else fetch_corpus(Path(tempfile.gettempdir()) / "specdec-corpus", log))
    train_names, val_names = split_documents(texts)
    train_ids = encode_docs(tokenizer, [texts[n] for n in train_names])
    val_ids = encode_docs(tokenizer, [texts[n] for n in val_names])
    recipe_cfg = _recipe_config(source)
    before = {"val_loss": evaluate(draft, val_ids, recipe_cfg),
              "val_beta": agreement(target, draft, val_ids, recipe_cfg)}
    work = out / ".distill-work"
    # The pools are drawn here, once, so that their time is recorded as sampling: the comparison
    # and the distillation reload them (a resumed run records only what it drew this time).
    t_phase = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        draw_pools(target, train_ids, val_ids, cfg, work, log, progress)
    sample_seconds, t_phase = time.perf_counter() - t_phase, time.perf_counter()
    comparison = (compare_losses(target, draft, train_ids, val_ids, cfg, work, compare_steps, log, progress)
                  if compare_steps else [])
    compare_seconds = time.perf_counter() - t_phase
    result = distill(target, draft, train_ids, val_ids, cfg, work, log, progress)
    result.update(sample_seconds=round(sample_seconds, 1), compare_seconds=round(compare_seconds, 1))
    after = {"val_loss": evaluate(draft, val_ids, recipe_cfg), "val_beta": agreement(target, draft.eval(), val_ids,
                                                                                      recipe_cfg)}
    out.mkdir(parents=True, exist_ok=True)
    if (out / "specdec-target").resolve() != (source / "specdec-target").resolve():
        shutil.copytree(source / "specdec-target", out / "specdec-target", dirs_exist_ok=True)
    folder = out / "specdec-draft"
    folder.mkdir(parents=True, exist_ok=True)
    info = json.loads((source / "specdec-draft" / "training.json").read_text())
    draft.half().save_pretrained(folder, safe_serialization=True)   # halves the file; loading upcasts
    tokenizer.save_pretrained(folder)
    info["on_policy"] = {**result, "loss_comparison": comparison, "widened_mlp_to": widen or None,
                         "validation_text": {"before": before, "after": after},
                         "seconds": round(time.perf_counter() - t_start, 1), "threads": torch.get_num_threads()}
    info["shape"]["mlp"] = draft.config.intermediate_size
    info["params"] = sum(p.numel() for p in draft.parameters())
    info["val_loss"] = round(after["val_loss"], 4)
    info["loss"] = info.get("loss", "") + "; then on the target's own samples (" + cfg.loss + ")"
    (folder / "training.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    log(f"done in {info['on_policy']['seconds'] / 60:.1f} min; validation-text beta {before['val_beta']:.4f} -> "
        f"{after['val_beta']:.4f}; the pair is in {out}")
    return info


def _recipe_config(source: Path):
    """The bundled pair's own training config (context, evaluation windows) from its record."""
    from .recipe import ModelShape, TrainConfig

    saved = json.loads((source / "specdec-target" / "training.json").read_text())["config"]
    cfg = TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.__dataclass_fields__
                         and k not in ("draft", "target")})
    cfg.draft, cfg.target = ModelShape(**saved["draft"]), ModelShape(**saved["target"])
    return cfg
