"""Train the `features` drafter for a real chat target (any Llama-family model), on-policy, with a
frequency-ranked vocabulary subset (FR-Spec).

The pools come from `chat_pool` (the target's own questions, its answers greedy and at T = 1, raw
continuations), each position keeping the target's feature, the log of its full normaliser (`lse`)
and its argmax. The subset is the `draft_vocab` ids the target emitted most often in the training
pool (counts over its sampled tokens, ties by id). Training and evaluation read the head's subset
rows only: p on the subset is exp(logit - lse), its true mass there; q is 0 outside, so

    TV(p, q) = 1 - sum over the subset of min(p, q)   (what the acceptance test rejects, exactly)

and the KL term uses p renormalised on the subset (q cannot reach the rest). As in
`training.features`, the drafter is unrolled `unroll` steps as at test time and each step pays
TV + kl_weight * KL + reg_weight * smooth-L1 to the target's feature. All rows are scored at T = 1
(greedy rows too: their p at T = 1 ranks the tokens the argmax is chosen from).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class ChatFeaturesConfig:
    seed: int = 0
    draft_vocab: int = 8192        # ids q reads (0 = all); chosen by coverage against head cost
    intermediate_size: int = 1024  # the drafter layer's MLP (SmolLM2-135M's own is 1536)
    unroll: int = 2                # drafting steps trained as at test time (each costs a head product)
    steps: int = 6000
    minutes: float | None = None
    batch_size: int = 8
    lr: float = 2e-3
    warmup: int = 100
    kl_weight: float = 0.5
    reg_weight: float = 0.1
    eval_every: int = 200
    checkpoint_every: int = 50
    threads: int | None = 1
    init_from: str | None = None   # a saved drafter to go on from: its weights and its vocabulary subset
    feature_layers: tuple[int, ...] = ()   # the target's middle layers the net fuses (EAGLE-3), none by default
    sharp: float | None = None     # also train 1 - beta at this temperature (`sharp_terms`); None: T = 1 only


def rank_vocab(pool: dict, size: int, vocab_size: int) -> torch.Tensor:
    """The `size` token ids the target sampled most often in `pool` (positions from each row's
    start to its end), most frequent first, ties by id; ids never sampled fill up by id."""
    ids, starts, ends = pool["ids"], pool["starts"], pool["ends"]
    pos = torch.arange(ids.shape[1], device=ids.device)[None]
    sampled = (pos >= starts[:, None]) & (pos < ends[:, None])
    counts = torch.bincount(ids[sampled], minlength=vocab_size).double()
    order = torch.argsort(-counts + torch.arange(vocab_size, device=ids.device) / (2.0 * vocab_size))   # ties by id
    return order[:size].clone()


def widened_vocab(kept: torch.Tensor, ranked: torch.Tensor, size: int) -> torch.Tensor:
    """`size` token ids: `kept` (a saved drafter's subset, which its weights learned to read) in its
    order, then `ranked`'s ids it lacks, in `ranked`'s order."""
    return torch.cat([kept, ranked[~torch.isin(ranked, kept)]])[:size].clone()


def subset_weight(target, ids: torch.Tensor | None) -> torch.Tensor:
    """The head's rows for `ids` [N, d] (all its rows when None); the head is a bias-free Linear."""
    head = target.get_output_embeddings()
    if not (type(head) is torch.nn.Linear and head.bias is None):
        raise ValueError("training with a vocabulary subset needs a bias-free linear output head")
    w = head.weight.detach()
    return w if ids is None else w[ids].contiguous()


def step_masks(starts: torch.Tensor, ends: torch.Tensor, length: int, k: int) -> list[torch.Tensor]:
    """[B, n] bool per drafting step j: element i counts when the token it predicts (i + 2) was
    sampled before the row's end and the chain has its j - 1 earlier steps (i >= j - 1)."""
    i = torch.arange(length - 1, device=starts.device)[None]
    ok = (i + 2 >= starts[:, None]) & (i + 2 < ends[:, None])
    return [ok & (i >= j - 1) for j in range(1, k + 1)]


def target_terms(feats: torch.Tensor, lse: torch.Tensor, weight: torch.Tensor, sharp: float | None = None
                 ) -> dict[str, torch.Tensor]:
    """The target's side of `subset_terms` for its feats [M, d] and lse [M], which no gradient
    reaches: p on the subset (its true mass there), p renormalised on the subset, and the sum of
    p_hat log p_hat (the KL's constant part); with `sharp`, also p renormalised on the subset at
    that temperature (`sharp_terms`), from the same head product."""
    with torch.no_grad():
        z = feats @ weight.T
        log_p_hat = torch.log_softmax(z, -1)
        p_hat = log_p_hat.exp()
        out = {"p": torch.exp(z - lse[:, None]), "p_hat": p_hat, "neg_entropy": (p_hat * log_p_hat).sum(-1)}
        if sharp:
            out["p_sharp"] = sharp_softmax(z, sharp)
        return out


def subset_terms(g: torch.Tensor, feats: torch.Tensor | None, lse: torch.Tensor | None, weight: torch.Tensor,
                 target: dict[str, torch.Tensor] | None = None, top: bool = True, z: torch.Tensor | None = None
                 ) -> dict[str, torch.Tensor]:
    """Per row of drafter features g [M, d] against the target's feats [M, d] and lse [M] (or their
    `target_terms`, computed once for several drafting steps): beta = sum over the subset of
    min(p, q), KL(p renormalised on the subset || q), the p-mass inside the subset (the most beta
    can be), and q's argmax unless `top` is False. `z`: g's logits on the subset, when the caller
    has them already."""
    t = target if target is not None else target_terms(feats, lse, weight)
    log_q = torch.log_softmax(g @ weight.T if z is None else z, -1)
    beta = torch.minimum(t["p"], log_q.exp()).sum(-1)
    kl = t["neg_entropy"] - (t["p_hat"] * log_q).sum(-1)
    out = {"beta": beta, "kl": kl, "mass": t["p"].sum(-1)}
    if top:
        out["q_top"] = log_q.argmax(-1)
    return out


FLOOR = -30.0   # `sharp_softmax`'s floor on a logit below the row's largest, in units of the temperature


def sharp_softmax(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(z / temperature) over the last axis, each scaled logit floored at FLOOR below its row's
    largest: at a low temperature most of the subset's probabilities otherwise underflow into
    denormal floats, whose arithmetic (in the backward above all) is many times slower on x86 CPUs
    (a training step took 6x as long). A floored token keeps at most e^-30 of a row's mass, far
    below anything beta can show."""
    x = z / temperature
    return torch.softmax((x - x.max(-1, keepdim=True).values.detach()).clamp_min(FLOOR), -1)


def sharp_terms(z: torch.Tensor, p_sharp: torch.Tensor, inside: torch.Tensor, temperature: float) -> torch.Tensor:
    """1 - beta between q and p both at `temperature` (p_sharp [M, N]: the target's, renormalised on
    the subset), per row of the drafter's logits on the subset z [M, N]: what the acceptance test accepts at a low
    temperature, where p and q are near their argmax, so a loss at T = 1 alone spends the drafter on
    p's tail that greedy and the pair's sampling never draw. 0 where the target's argmax lies outside
    the subset (`inside` False): there p_sharp, renormalised on the subset, would point q at a token
    the target does not pick."""
    q_sharp = sharp_softmax(z, temperature)
    return (1 - torch.minimum(p_sharp, q_sharp).sum(-1)) * inside


def cropped(batch: dict) -> dict:
    """The batch without the columns after its last row's end (nothing there counts: a row ends at
    its end of turn, and a batch of short answers would otherwise run the drafter over padding), its
    target features in float32 (a pool keeps them as cached, in float16)."""
    width = int(batch["ends"].max())
    out = {k: v[:, :width] if v.dim() > 1 else v for k, v in batch.items()}
    return out | {"feats": out["feats"].float()}


def losses(net, target, batch: dict, cfg: ChatFeaturesConfig, weight: torch.Tensor
           ) -> tuple[torch.Tensor, list[float]]:
    from ..bundled.features import rows_of, unrolled_outputs

    batch = cropped(batch)
    ids, feats, lse = batch["ids"], batch["feats"], batch["lse"]
    outs = unrolled_outputs(net, target, ids, rows_of(batch), cfg.unroll)
    masks = step_masks(batch["starts"], batch["ends"], ids.shape[1], cfg.unroll)
    # Every step predicts the same positions' tokens (step j counts step 1's elements from the j-th
    # on): the target's side, a head product over the subset, is computed once for all steps.
    first = masks[0]
    f_all = feats[:, 1:][first]
    p_all = target_terms(f_all, lse[:, 1:][first], weight, cfg.sharp)
    if cfg.sharp:
        inside = torch.isin(batch["top"][:, 1:][first], net_ids(net))
    total, per_step = 0.0, []
    for g, m in zip(outs, masks):
        if not m.any():
            per_step.append(float("nan"))
            continue
        keep = m[first]
        f_next = f_all[keep]
        target_side = {k: v[keep] for k, v in p_all.items()}
        z = g[m] @ weight.T   # one head product a step, for both terms
        t = subset_terms(g[m], None, None, weight, target=target_side, top=False, z=z)
        reg = F.smooth_l1_loss(g[m], f_next, reduction="none").mean(-1)
        per = (1 - t["beta"]) + cfg.kl_weight * t["kl"] + cfg.reg_weight * reg
        if cfg.sharp:
            per = per + sharp_terms(z, target_side["p_sharp"], inside[keep], cfg.sharp)
        total = total + per.mean()
        per_step.append(float(1 - t["beta"].detach().mean()))
    return total / cfg.unroll, per_step


@torch.no_grad()
def evaluate(net, target, pool: dict, cfg: ChatFeaturesConfig, weight: torch.Tensor, batch: int = 16
             ) -> dict[str, float]:
    """On the held-out pool, per drafting step j: beta at T = 1 on the T = 1 rows (what the
    acceptance test accepts there), argmax agreement with the target on the greedy rows, and the
    p-mass the subset holds at T = 1."""
    from ..bundled.features import rows_of, unrolled_outputs

    sums: dict[str, list[float]] = {}

    def add(key: str, values: torch.Tensor) -> None:
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += float(values.sum())
        acc[1] += len(values)

    for a in range(0, len(pool["ids"]), batch):
        part = cropped({k: v[a:a + batch] for k, v in pool.items()})
        ids, feats, lse, temps = part["ids"], part["feats"], part["lse"], part["temps"]
        outs = unrolled_outputs(net, target, ids, rows_of(part), cfg.unroll)
        for j, (g, m) in enumerate(zip(outs, step_masks(part["starts"], part["ends"], ids.shape[1], cfg.unroll)), 1):
            for greedy in (False, True):
                rows = m & ((temps == 0) if greedy else (temps > 0))[:, None]
                if not rows.any():
                    continue
                t = subset_terms(g[rows], feats[:, 1:][rows], lse[:, 1:][rows], weight)
                if greedy:
                    add(f"greedy agreement step {j}", (net_ids(net)[t["q_top"]] == part["top"][:, 1:][rows]).float())
                else:
                    add(f"beta at T=1 step {j}", t["beta"])
                    if j == 1:
                        add("subset mass at T=1", t["mass"])
    return {key: s / max(n, 1) for key, (s, n) in sums.items()}


def widened_mlp(saved: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`saved` weights going on in a net whose MLP is wider (`fresh`: its state, freshly initialised):
    the saved units fill the first rows of gate and up and the first columns of down, the new units
    keep their fresh gate and up and get zero columns in down, so the wider net starts computing
    exactly what the saved one did and its new units grow from there. Anything else is as saved."""
    out = dict(saved)
    for name in ("gate_proj", "up_proj", "down_proj"):
        key = f"layer.mlp.{name}.weight"
        if key not in saved or key not in fresh or saved[key].shape == fresh[key].shape:
            continue
        old, new = saved[key], fresh[key]
        axis = 1 if name == "down_proj" else 0
        if old.shape[1 - axis] != new.shape[1 - axis] or old.shape[axis] > new.shape[axis]:
            raise ValueError(f"cannot widen {key} from {tuple(old.shape)} to {tuple(new.shape)}")
        grown = new.detach().clone().to(old.dtype)
        if name == "down_proj":
            grown.zero_()
        grown.narrow(axis, 0, old.shape[axis]).copy_(old)
        out[key] = grown
    return out


def net_ids(net) -> torch.Tensor:
    """Subset position -> token id (the identity when the net reads the whole vocabulary)."""
    if net.vocab is not None:
        return net.vocab
    return torch.arange(net.config.vocab_size, device=net.fc.weight.device)


def load_pools(work, names: dict[str, list[str]]) -> dict[str, dict]:
    """The pools drawn by `chat_pool.draw_chat_pool` into `work`: {"train": [files], "eval": [files]}."""
    out = {}
    for split, files in names.items():
        parts = [p for f in files if (work / f).exists() for p in torch.load(work / f)]
        if not parts:
            raise ValueError(f"no {split} pool in {work}: draw one first")
        width = max(p["ids"].shape[1] for p in parts)
        out[split] = {k: torch.cat([widened(p[k], width) for p in parts]) for k in parts[0]}
    return out


def widened(values: torch.Tensor, width: int) -> torch.Tensor:
    """A pool tensor [N, L, ...] padded with zeros to `width` columns (pools drawn with different row
    lengths; a row's padding lies past its end, where nothing counts); [N] tensors as they are."""
    if values.dim() < 2 or values.shape[1] >= width:
        return values
    pad = values.new_zeros(values.shape[0], width - values.shape[1], *values.shape[2:])
    return torch.cat([values, pad], 1)


def train_chat_features(target, pools: dict, out, cfg: ChatFeaturesConfig, log=print, progress: bool = False,
                        info: dict | None = None, stop_at: int | None = None) -> dict:
    """Rank the subset on the training pool, train a FeatureNet reading it, and save it to
    `out/specdec-features` (fp16 weights, the subset's ids, the training record); resumable from
    `out/.features-work/checkpoint.pt`."""
    import json
    from dataclasses import asdict
    from functools import partial
    from pathlib import Path

    from ...drafting import features as fx
    from ..bundled.features import train_net

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    for p in target.parameters():
        p.requires_grad_(False)
    work = out / ".features-work"
    work.mkdir(parents=True, exist_ok=True)
    ids, start = None, None
    if cfg.init_from:   # going on from a saved drafter: its subset too (its weights learned to read it)
        from safetensors.torch import load_file

        start = {k: v.float() if v.is_floating_point() else v
                 for k, v in load_file(Path(cfg.init_from) / "model.safetensors").items()}
        kept = start.pop("vocab", None)
        if kept is not None and not len(kept) <= cfg.draft_vocab:
            raise ValueError(f"{cfg.init_from} reads {len(kept)} token ids, more than draft_vocab {cfg.draft_vocab}")
        if kept is not None and not (work / "vocab.pt").exists():   # wider: its ids, then the pool's most sampled
            ranked = rank_vocab(pools["train"], cfg.draft_vocab, target.config.vocab_size)
            torch.save(widened_vocab(kept, ranked, cfg.draft_vocab), work / "vocab.pt")
    if cfg.draft_vocab:   # ranked once, on the pool the first call sees: a resumed run keeps it
        if not (work / "vocab.pt").exists():
            torch.save(rank_vocab(pools["train"], cfg.draft_vocab, target.config.vocab_size), work / "vocab.pt")
        ids = torch.load(work / "vocab.pt")
    weight = subset_weight(target, ids)
    torch.manual_seed(cfg.seed)
    device = target.get_output_embeddings().weight.device
    layers = tuple(cfg.feature_layers)
    net = fx.FeatureNet(fx.layer_config(target.config, cfg.intermediate_size, layers, cfg.draft_vocab)).to(device)
    if start is not None:   # a resumed run's checkpoint, if any, replaces these in train_net
        start = widened_mlp(start, net.state_dict())
        left = net.load_state_dict(start, strict=False)
        # A drafter saved without fusion goes on with it: its fuse starts at zero, so the net starts
        # as the saved one. Its subset is set below (`vocab.pt`, maybe wider).
        if [k for k in left.missing_keys if not k.startswith(("rotary.", "fuse.", "vocab"))] or left.unexpected_keys:
            raise ValueError(f"{cfg.init_from} does not fit this drafter's shape: {left}")
        log(f"going on from {cfg.init_from}")
    if ids is not None:
        ids = ids.to(device)
        net.vocab.copy_(ids)
    state = train_net(net, target, pools, cfg, work / "checkpoint.pt", log, progress, stop_at=stop_at,
                      loss_fn=partial(losses, weight=weight), eval_fn=partial(evaluate, weight=weight))
    record = {"config": asdict(cfg), **(info or {}), "params": sum(p.numel() for p in net.parameters()),
              "history": state["history"], "after": state["history"][-1], "steps": state["step"],
              "train_minutes": round(state["elapsed"] / 60, 1), "threads": torch.get_num_threads(),
              "pool_sequences": int(len(pools["train"]["ids"])), "torch": torch.__version__}
    folder = out / fx.FOLDER
    feature = "post-norm last hidden state" + (f", fused with the residual stream after layers {list(layers)}"
                                               if layers else "")
    fx.save(net.eval(), folder, {"target": (info or {}).get("target", "?"), "feature": feature,
                                 "draft_vocab": cfg.draft_vocab})
    (folder / "training.json").write_text(json.dumps(record, indent=2, default=str))
    log(f"done: {state['step']} steps in {state['elapsed'] / 60:.1f} min; saved to {folder}")
    return record


USES = (("chat", 1.0), ("chat", 0.0), ("text", 1.0))   # each question: answered at T = 1 and greedily, continued


def train_chat(folder, out, cfg: ChatFeaturesConfig, chunks: tuple[int, int] = (1, 24), batch: int = 64,
               length: int = 160, log=print, questions: str = "model") -> dict:
    """`specdec train --features --chat-target FOLDER`: draw the held-out and training pools from the
    chat model in FOLDER (`chunks` of `batch` questions each, rows of `length` tokens; who writes the
    questions: `chat_pool.draw_chat_pool`), then train. Every stage resumes from `out/.features-work`.
    Loaded safely: safetensors only, no remote code."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .chat_pool import draw_chat_pool

    folder, out = Path(folder), Path(out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{folder} has no chat template: the features drafter's chat training asks it questions")
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True,
                                                  trust_remote_code=False).eval()
    work = out / ".features-work"
    work.mkdir(parents=True, exist_ok=True)
    pools = {split: draw_chat_pool(target, tokenizer, n, USES, length, seed, work / f"pool-{split}.pt", log, batch,
                                   questions=questions)
             for split, n, seed in (("eval", chunks[0], cfg.seed + 7), ("train", chunks[1], cfg.seed))}
    info = {"target": folder.name, "pool": {"chunks": list(chunks), "batch": batch, "length": length,
                                            "uses": [list(u) for u in USES], "questions": questions}}
    return train_chat_features(target, pools, out, cfg, log, info=info)


def run_from_args(args, out: str) -> int:
    """The command line's `train --features --chat-target FOLDER` (`--tiny`: a smoke run)."""
    from pathlib import Path

    if getattr(args, "feature_layers", None):   # this path's pools keep the post-norm feature only
        raise ValueError("--feature-layers with --chat-target needs the cached rows of --data answers")
    cfg = ChatFeaturesConfig(minutes=args.minutes, threads=args.threads, seed=args.seed or 0,
                             init_from=str(args.init_from) if args.init_from else None)
    sizes: dict = {"chunks": (1, 24)}
    if args.tiny:
        cfg = ChatFeaturesConfig(**{**cfg.__dict__, "steps": 4, "eval_every": 2, "checkpoint_every": 2, "warmup": 1,
                                    "draft_vocab": 256, "batch_size": 2})
        sizes = {"chunks": (1, 1), "batch": 2, "length": 96}
    info = train_chat(args.chat_target, out, cfg, log=lambda msg: print(msg, flush=True),
                      questions=getattr(args, "questions", "model"), **sizes)
    print(f"features drafter trained in {info['train_minutes']:.1f} min; it is in {Path(out) / 'specdec-features'}")
    return 0
