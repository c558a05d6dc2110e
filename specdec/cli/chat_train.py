"""`specdec chat-train`: train the features drafter for SmolLM2-135M-Instruct on a GPU, in one go, and put it where the
real pair finds it (`assets/models/SmolLM2-135M-Instruct-features`, recorded in that folder's
manifest).

The same recipe as `python -m specdec train --features --chat-target FOLDER` (the target's own
questions and answers, `training.chat.chat_pool`; the loss and schedule of `training.chat.features_chat`),
with what a GPU changes: the pools are drawn in big batches and kept in memory (saving a
multi-gigabyte pool after every chunk would take longer than drawing it), and the drafter's
training uses TF32 products (the pools, drawn before, keep the target's float32 p; the drafter's
weights only change how often drafts are accepted, never what the decoder outputs).

    specdec chat-train --gguf FILE --minutes 3            # on a GPU
    specdec chat-train --tiny --device cpu                  # a smoke run here
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from ..core.checks import whole_number
from .main import folder

COUNTS = ("steps", "batch", "length", "batch_size", "unroll", "intermediate", "vocab")   # each at least 1


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--gguf", default=None, help="the model's GGUF file (else the cache or the installed wheel)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run with --tiny")
    ap.add_argument("--minutes", type=float, default=3.0, help="the training's time budget")
    ap.add_argument("--steps", type=int, default=100_000,
                    help="the schedule ends at --steps or --minutes, whichever comes first")
    ap.add_argument("--chunks", type=int, nargs=2, default=(1, 4), metavar=("EVAL", "TRAIN"),
                    help="chunks of --batch questions in the held-out and the training pool")
    ap.add_argument("--batch", type=int, default=1024, help="questions a chunk")
    ap.add_argument("--length", type=int, default=160, help="tokens a row (prompt and answer)")
    ap.add_argument("--batch-size", type=int, default=64, help="rows a training step")
    ap.add_argument("--unroll", type=int, default=3, help="drafting steps trained as at test time")
    ap.add_argument("--intermediate", type=int, default=1536, help="the drafter layer's MLP width")
    ap.add_argument("--vocab", type=int, default=8192, help="the drafter's vocabulary subset (most used token ids)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    ap.add_argument("--questions", choices=("model", "templates", "mixed"), default="mixed",
                    help="who writes the questions (training.chat.chat_pool.draw_chat_pool)")
    ap.add_argument("--init-from", type=folder, default=None, metavar="FOLDER",
                    help="a saved drafter folder to go on from (its vocabulary too)")
    ap.add_argument("--out", default="runs/chat-drafter", metavar="FOLDER",
                    help="the run's folder; without --tiny the drafter is also placed in assets/models")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: a few rows, a few steps, a small vocabulary")


def run(args) -> int:
    """Draw the pools in memory, train, and (without --tiny) ship the drafter in assets/models."""
    for name in COUNTS:
        whole_number(getattr(args, name), "--" + name.replace("_", "-"), 1)
    for count in args.chunks:
        whole_number(count, "--chunks", 1)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..drafting import features as fx
    from ..models import manifest, realmodel
    from ..training.chat.chat_pool import draw_chat_pool
    from ..training.chat.features_chat import USES, ChatFeaturesConfig, train_chat_features

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("no CUDA device here: run it on a GPU, or with --device cpu --tiny for a smoke run")

    def log(msg: str) -> None:
        print(msg, flush=True)

    t0 = time.perf_counter()
    folder = realmodel.prepare(realmodel.SMOLLM2_135M, gguf=args.gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True,
                                                  trust_remote_code=False).to(args.device).eval()
    log(f"loaded {folder.name} on {args.device} in {time.perf_counter() - t0:.0f} s")
    if args.tiny:
        args.chunks, args.batch, args.length = (1, 1), 4, 96
    t1 = time.perf_counter()
    pools = {split: draw_chat_pool(target, tokenizer, n, USES, args.length, seed, None, log, args.batch,
                                   questions=args.questions)
             for split, n, seed in (("eval", args.chunks[0], 7), ("train", args.chunks[1], 0))}
    if len(pools["eval"]["ids"]) > 512:   # every k-th row: the three uses mixed, an evaluation in seconds
        step = len(pools["eval"]["ids"]) // 384
        pools["eval"] = {k: v[::step] for k, v in pools["eval"].items()}
    pool_seconds = time.perf_counter() - t1
    log(f"pools drawn in {pool_seconds:.0f} s: {len(pools['train']['ids'])} training rows, "
        f"{int((pools['train']['ends'] - pools['train']['starts']).sum())} sampled tokens; "
        f"{len(pools['eval']['ids'])} held-out rows")
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True   # the drafter's training only (the pools are drawn)
    cfg = ChatFeaturesConfig(draft_vocab=args.vocab, intermediate_size=args.intermediate, unroll=args.unroll,
                             steps=args.steps, minutes=args.minutes, batch_size=args.batch_size, lr=args.lr,
                             warmup=200, eval_every=1000, checkpoint_every=10 ** 9, threads=None,
                             init_from=args.init_from)
    if args.tiny:
        cfg = ChatFeaturesConfig(**{**cfg.__dict__, "steps": 4, "minutes": None, "eval_every": 2, "warmup": 1,
                                    "draft_vocab": 256, "batch_size": 2, "intermediate_size": 64})
    out = Path(args.out)
    shutil.rmtree(out / ".features-work", ignore_errors=True)   # a fresh run: no resume of another's
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    info = {"target": folder.name, "device": device_name, "pool_seconds": round(pool_seconds, 1),
            "pool": {"chunks": list(args.chunks), "batch": args.batch, "length": args.length,
                     "uses": [list(u) for u in USES], "questions": args.questions,
                     "drawn": "in memory, specdec chat-train"}}
    record = train_chat_features(target, pools, out, cfg, log, info=info)
    shipped = fx.BUNDLED / f"{folder.name}-features"
    if not args.tiny:
        shutil.rmtree(shipped, ignore_errors=True)
        shutil.copytree(out / fx.FOLDER, shipped)
        manifest.write(fx.BUNDLED)
        log(f"placed in {shipped} and recorded in {fx.BUNDLED / manifest.NAME}")
    log(json.dumps(record["after"]))
    log(f"all in {time.perf_counter() - t0:.0f} s")
    return 0
