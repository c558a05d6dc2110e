"""Train the `features` drafter (specdec.drafting.features) on the target's own samples and features.

On-policy, like `train --draft-only`: continuations sampled from the frozen bundled target (T = 1
and greedy, from prompts cut from the training works; the evaluation pool from the held-out
works), keeping the target's post-norm last hidden state at every position while sampling (no
second target pass). The target's p at a position is its output head applied to that feature, so
the pool stores features, not 2048-wide log-probabilities.

The loss follows what the acceptance test rewards, at every drafting step a run takes: the
drafter is unrolled `unroll` steps as at test time (step 1 reads the target's feature, steps
2.. read the drafter's own previous output, attending to the exact elements before the chain
and to the chain itself: EAGLE-3's "training-time test"), and each step pays
TV(p, q) + kl_weight * KL(p || q) (TV is 1 - beta; KL gives gradients where q is far from p) plus
`reg_weight` * smooth-L1 between its feature and the target's (EAGLE's feature regression).

    python -m specdec train --features --out runs/features      # ~40 min on 1 thread
    python -m specdec train --features --minutes 20 ...          # a time budget instead of steps

Seeded, resumable (the pools and a checkpoint every `checkpoint_every` steps live in
`out/.features-work`), with a progress bar and a held-out evaluation every `eval_every` steps.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...drafting import features as fx
from .distill import divergences, random_prompts


@dataclass
class FeaturesConfig:
    seed: int = 0
    temperatures: tuple[float, ...] = (1.0, 0.0)   # 0 = greedy continuations
    sequences: tuple[int, ...] = (768, 256)         # per temperature
    eval_sequences: int = 48                        # per temperature, from the held-out works
    prompt_tokens: tuple[int, int] = (8, 48)
    context: int = 128             # the cards' runs: a ~12-token prompt + 64 new tokens
    sample_batch: int = 128
    intermediate_size: int = 512   # the drafter layer's MLP (the target's own width)
    unroll: int = 3                # drafting steps trained as at test time
    steps: int = 4000
    minutes: float | None = None   # a time budget: the schedule ends at whichever comes first
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 100
    kl_weight: float = 0.5
    reg_weight: float = 0.1
    eval_every: int = 250
    checkpoint_every: int = 100
    threads: int | None = 1
    feature_layers: tuple[int, ...] = ()   # the target's middle layers the net fuses (EAGLE-3), none by default
    init_from: str | None = None   # a saved features drafter to start from (its fusion, if new, starts at zero)


# ---------------------------------------------------------------- the pool

@torch.no_grad()
def sample_with_features(target, prompts: list[torch.Tensor], length: int, temperature: float,
                         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Continue each prompt to `length` tokens (0 = greedy); ids [B, L], the target's features at
    every position [B, L, d] (float32), each row's prompt length. Rows still in their prompt copy it."""
    from transformers import DynamicCache

    starts = torch.tensor([len(p) for p in prompts])
    ids = torch.zeros(len(prompts), length, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
    feats = torch.empty(len(prompts), length, target.config.hidden_size)
    cache = DynamicCache(config=target.config)
    first = int(starts.min())
    logits, feats[:, :first] = fx.forward_with_features(target, ids[:, :first], cache)
    for pos in range(first, length):
        z = logits[:, -1].float()
        if temperature == 0:
            nxt = z.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(z / temperature, -1), 1, generator=generator).squeeze(1)
        ids[:, pos] = torch.where(pos < starts, ids[:, pos], nxt)
        logits, h = fx.forward_with_features(target, ids[:, pos:pos + 1], cache)
        feats[:, pos] = h[:, -1]
    return ids, feats, starts


def draw_pool(target, text_ids, counts, cfg: FeaturesConfig, seed: int, path: Path, log, bar=None) -> dict:
    """Samples at each temperature in chunks (each seeded on its own), saved after every chunk so a
    cut-off draw resumes where it stopped."""
    parts = torch.load(path) if path.exists() else []
    chunks = [(t, i, min(cfg.sample_batch, n - i)) for t, n in zip(cfg.temperatures, counts)
              for i in range(0, n, cfg.sample_batch)]
    for k, (temp, _, n) in enumerate(chunks):
        if k < len(parts):
            continue
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        prompts = random_prompts(text_ids, n, cfg.prompt_tokens, gen)
        ids, feats, starts = sample_with_features(target, prompts, cfg.context, temp, gen)
        parts.append({"ids": ids, "feats": feats, "starts": starts, "temps": torch.full((n,), float(temp))})
        torch.save(parts, path)
        if bar is not None:
            bar.update(n)
    return {k: torch.cat([p[k] for p in parts]) for k in ("ids", "feats", "starts", "temps")}


@torch.no_grad()
def layer_rows(target, pool: dict, layers: tuple[int, ...], path: Path, batch: int = 128) -> torch.Tensor:
    """The residual stream after each of `layers` at every pool position [N, L, len(layers) * d]
    (float16: a pool of 15,000 sequences stays near a gigabyte), from one teacher-forced forward
    over the pool's tokens (the same positions sampling computed), saved beside the pool."""
    if path.exists():
        saved = torch.load(path)
        if saved["layers"] == list(layers) and len(saved["rows"]) == len(pool["ids"]):
            return saved["rows"]
    ids = pool["ids"]
    rows = torch.empty(*ids.shape, len(layers) * target.config.hidden_size, dtype=torch.float16)
    for a in range(0, len(ids), batch):
        rows[a:a + batch] = fx.rows_after(target, ids[a:a + batch], layers).half()
    torch.save({"layers": list(layers), "rows": rows}, path)
    return rows


def rows_of(batch: dict) -> torch.Tensor:
    """What the net reads of the target at each position: the post-norm feature, then the fused
    layers' rows when the pool has them (`FeatureNet.row_width`)."""
    if "layer_rows" not in batch:
        return batch["feats"]
    return torch.cat([batch["feats"], batch["layer_rows"].float()], -1)


# ---------------------------------------------------------------- the unrolled drafter

def unroll_mask(n: int, k: int, device=None) -> torch.Tensor:
    """[1, 1, k*n, k*n] boolean: query (copy j, element i) may see copy 1 (exact features) at
    elements <= i - j + 1 and copy s (2 <= s <= j) at element i - j + s: the drafting chain that
    started after exact element i - j + 1, exactly what drafting step j sees at test time."""
    j = torch.arange(1, k + 1, device=device).repeat_interleave(n)[:, None]
    i = torch.arange(n, device=device).repeat(k)[:, None]
    s = torch.arange(1, k + 1, device=device).repeat_interleave(n)[None, :]
    e = torch.arange(n, device=device).repeat(k)[None, :]
    exact = (s == 1) & (e <= i - j + 1)
    chain = (s >= 2) & (s <= j) & (e == i - j + s)
    return (exact | chain)[None, None]


def unrolled_outputs(net, target, ids: torch.Tensor, feats: torch.Tensor, k: int):
    """The drafter's features [B, n, d] at each of k drafting steps (n = L - 1 elements; element i
    predicts token i + 2), as at test time (see `unroll_mask`); `feats`: the target's rows
    (`rows_of`). Each step's keys and values stay in a cache (gradients flow through it), so step j
    computes only its own n elements."""
    from transformers import DynamicCache

    b, length, _ = feats.shape
    n = length - 1
    embeds = target.get_input_embeddings()(ids[:, 1:])
    norm = target.get_decoder().norm
    pos = torch.arange(n, device=feats.device)[None].expand(b, -1)
    mask = unroll_mask(n, k, feats.device)
    cache = DynamicCache(config=net.config)
    step_in, outs = net.fused(feats[:, :-1]), []
    for j in range(1, k + 1):
        y = net(step_in, embeds, pos, mask[..., (j - 1) * n:j * n, :j * n], cache)
        g = norm(y)
        outs.append(g)
        step_in = torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], 1)   # step j+1 at i reads step j at i-1
    return outs


def step_masks(starts: torch.Tensor, length: int, k: int) -> list[torch.Tensor]:
    """[B, n] float per step j: element i counts when the token it predicts (i + 2) was sampled and
    the chain has its j - 1 earlier steps (i >= j - 1)."""
    i = torch.arange(length - 1)[None]
    return [((i + 2 >= starts[:, None]) & (i >= j - 1)).float() for j in range(1, k + 1)]


def losses(net, target, batch: dict, cfg: FeaturesConfig) -> tuple[torch.Tensor, list[float]]:
    ids, feats, starts, temps = batch["ids"], batch["feats"], batch["starts"], batch["temps"]
    head = target.get_output_embeddings()
    p_logits = head(feats[:, 1:])
    total, per_step = 0.0, []
    outs = unrolled_outputs(net, target, ids, rows_of(batch), cfg.unroll)
    for g, m in zip(outs, step_masks(starts, ids.shape[1], cfg.unroll)):
        parts = divergences(head(g), p_logits, temps)
        reg = F.smooth_l1_loss(g, feats[:, 1:], reduction="none").mean(-1)
        per = parts["tv"] + cfg.kl_weight * parts["kl"] + cfg.reg_weight * reg
        loss = (per * m).sum() / m.sum().clamp_min(1)
        total = total + loss
        per_step.append(float((parts["tv"].detach() * m).sum() / m.sum().clamp_min(1)))
    return total / cfg.unroll, per_step


@torch.no_grad()
def evaluate(net, target, pool: dict, cfg: FeaturesConfig, batch: int = 16) -> dict[str, float]:
    """On the held-out pool: per drafting step j, beta = sum(min(p, q)) at T = 1 (what the
    acceptance test accepts there) and, on greedy rows, argmax agreement."""
    head = target.get_output_embeddings()
    sums: dict[str, list[float]] = {}
    for a in range(0, len(pool["ids"]), batch):
        part = {k: v[a:a + batch] for k, v in pool.items()}
        ids, feats, starts, temps = (part[k] for k in ("ids", "feats", "starts", "temps"))
        p_logits = head(feats[:, 1:]).float()
        outs = unrolled_outputs(net, target, ids, rows_of(part), cfg.unroll)
        for j, (g, m) in enumerate(zip(outs, step_masks(starts, ids.shape[1], cfg.unroll)), 1):
            q_logits = head(g).float()
            for greedy in (False, True):
                rows = (temps == 0) if greedy else (temps > 0)
                if not rows.any():
                    continue
                if greedy:
                    hit = (q_logits[rows].argmax(-1) == p_logits[rows].argmax(-1)).float()
                else:
                    hit = torch.minimum(torch.softmax(q_logits[rows], -1), torch.softmax(p_logits[rows], -1)).sum(-1)
                acc = sums.setdefault(f"{'greedy agreement' if greedy else 'beta at T=1'} step {j}", [0.0, 0.0])
                acc[0] += float((hit * m[rows]).sum())
                acc[1] += float(m[rows].sum())
    return {key: s / n for key, (s, n) in sums.items()}


# ---------------------------------------------------------------- training

def lr_at(step: int, elapsed: float, cfg: FeaturesConfig) -> tuple[float, float]:
    """(learning rate, fraction of the schedule done): warmup, then cosine to a tenth, over steps or
    minutes, whichever ends first."""
    done = step / cfg.steps
    if cfg.minutes:
        done = max(done, elapsed / (60 * cfg.minutes))
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup, done
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))), done


def train_net(net, target, pools: dict, cfg: FeaturesConfig, ckpt: Path, log, progress: bool = True,
              loss_fn=None, eval_fn=None, stop_at: int | None = None) -> dict:
    """Train `net` on pools["train"] (seeded, resumable from `ckpt`); `loss_fn` and `eval_fn` take
    (net, target, batch or pool, cfg) (default: this module's `losses` and `evaluate`); `stop_at`:
    pause at that step (checkpointed; a later call resumes the same schedule, e.g. on a grown pool)."""
    from tqdm.auto import tqdm

    loss_fn, eval_fn = loss_fn or losses, eval_fn or evaluate

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    state = {"step": 0, "elapsed": 0.0, "history": []}
    if ckpt.exists():
        ck = torch.load(ckpt, weights_only=False)
        net.load_state_dict(ck["net"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        state = ck["state"]
        log(f"resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min in)")
    pool, n_pool = pools["train"], len(pools["train"]["ids"])
    bar = tqdm(total=cfg.steps, initial=state["step"], desc="training the features drafter", unit="step",
               disable=not progress)
    t0, base = time.perf_counter(), state["elapsed"]
    net.train()
    while True:
        state["elapsed"] = base + time.perf_counter() - t0
        lr, done = lr_at(state["step"], state["elapsed"], cfg)
        if done >= 1 or (stop_at is not None and state["step"] >= stop_at):
            break
        for group in opt.param_groups:
            group["lr"] = lr
        rows = torch.randint(0, n_pool, (cfg.batch_size,), generator=gen).to(pool["ids"].device)
        loss, tv = loss_fn(net, target, {k: v[rows] for k, v in pool.items()}, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["loss"] = loss.item()   # the last step's, for an evaluation after the loop
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", tv=" ".join(f"{t:.3f}" for t in tv))
        if not progress and state["step"] % 10 == 0:   # a log file instead of a bar
            log(f"step {state['step']} lr {lr:.2e} loss {loss.item():.4f} 1-beta " + " ".join(f"{t:.3f}" for t in tv)
                + f" ({state['elapsed'] / 60:.1f} min)")
        if state["step"] % cfg.eval_every == 0:
            _evaluate_into(net, target, pools, cfg, state, loss.item(), bar.write, eval_fn)
        if state["step"] % cfg.checkpoint_every == 0:
            torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "state": state},
                       ckpt)
    bar.close()
    if not state["history"] or state["history"][-1]["step"] != state["step"]:
        # The run ended between evaluations (its time was up): record the last step's loss, or
        # None (JSON null) when no step ran at all; never NaN, which strict JSON readers refuse.
        _evaluate_into(net, target, pools, cfg, state, state.get("loss"), log, eval_fn)
    torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "state": state}, ckpt)
    return state


def _evaluate_into(net, target, pools, cfg, state, loss: float | None, write, eval_fn=None) -> None:
    now = (eval_fn or evaluate)(net.eval(), target, pools["eval"], cfg)
    net.train()
    state["history"].append({"step": state["step"], "loss": None if loss is None else round(loss, 4),
                             "minutes": round(state["elapsed"] / 60, 1), **{k: round(v, 4) for k, v in now.items()}})
    write(f"step {state['step']}  loss {'–' if loss is None else f'{loss:.4f}'}  "
          + "  ".join(f"{k} {v:.4f}" for k, v in now.items()))


def train_features(source: Path, out: Path, cfg: FeaturesConfig, log=print, progress: bool = True,
                   corpus_dir: str | None = None) -> dict:
    """Sample (or reload) the pools from the target in `source`, train a FeatureNet, and save it to
    `out/specdec-features` with its training record. Resumable from `out/.features-work`."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .recipe import encode_docs, fetch_corpus, read_corpus_dir, split_documents

    t_start = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(source / "specdec-target")
    target = AutoModelForCausalLM.from_pretrained(source / "specdec-target", dtype=torch.float32,
                                                  use_safetensors=True, trust_remote_code=False).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    texts = (read_corpus_dir(Path(corpus_dir)) if corpus_dir
             else fetch_corpus(Path(tempfile.gettempdir()) / "specdec-corpus", log))
    train_names, val_names = split_documents(texts)
    work = out / ".features-work"
    work.mkdir(parents=True, exist_ok=True)
    pools = {}
    for name, names, counts, seed in (("eval", val_names, (cfg.eval_sequences,) * len(cfg.temperatures), cfg.seed + 7),
                                      ("train", train_names, cfg.sequences, cfg.seed)):
        text_ids = encode_docs(tokenizer, [texts[n] for n in names])
        bar = tqdm(total=sum(counts), desc=f"sampling the target ({name})", unit="seq", disable=not progress)
        pools[name] = draw_pool(target, text_ids, counts, cfg, seed, work / f"pool-{name}.pt", log, bar)
        bar.close()
        if cfg.feature_layers:
            pools[name]["layer_rows"] = layer_rows(target, pools[name], tuple(cfg.feature_layers),
                                                   work / f"pool-{name}-layers.pt")
    sample_seconds = time.perf_counter() - t_start
    torch.manual_seed(cfg.seed)
    net = fx.FeatureNet(fx.layer_config(target.config, cfg.intermediate_size, tuple(cfg.feature_layers)))
    if cfg.init_from:   # its layer and fc; a fusion it lacks starts at zero (the same drafter)
        from safetensors.torch import load_file

        start = {k: v.float() for k, v in load_file(Path(cfg.init_from) / "model.safetensors").items()}
        left = net.load_state_dict(start, strict=False)
        log(f"started from {cfg.init_from}; new: {sorted(k for k in left.missing_keys if not k.startswith('rotary.'))}")
    state = train_net(net, target, pools, cfg, work / "checkpoint.pt", log, progress)
    info = {"config": asdict(cfg), "source": "the bundled target (assets/models/specdec-target)",
            "params": sum(p.numel() for p in net.parameters()), "history": state["history"],
            "after": state["history"][-1], "steps": state["step"], "train_minutes": round(state["elapsed"] / 60, 1),
            "sample_seconds": round(sample_seconds, 1), "threads": torch.get_num_threads(),
            "pool_sequences": int(len(pools["train"]["ids"])), "torch": torch.__version__}
    folder = out / fx.FOLDER
    feature = "post-norm last hidden state" + (f", fused with the residual stream after layers "
                                               f"{list(cfg.feature_layers)}" if cfg.feature_layers else "")
    fx.save(net.eval(), folder, {"target": "specdec-target", "feature": feature})
    (folder / "training.json").write_text(json.dumps(info, indent=2))
    log(f"done: {state['step']} steps in {state['elapsed'] / 60:.1f} min; " + ", ".join(
        f"{k} {v}" for k, v in state["history"][-1].items()) + f"; saved to {folder}")
    return info
