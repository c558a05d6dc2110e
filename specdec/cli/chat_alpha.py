"""`specdec chat-alpha`: the α of SmolLM2-135M-Instruct's features drafter on three kinds of prompt: the
card's 8 hand-written chat prompts (`measure.CHAT_PROMPTS`), 8 other hand-written ones (none is a training question; two
share a subject with the templates: cookies, Python), and questions the model writes itself
(`training.chat.chat_pool.write_questions`, as its training pool does); and ShareGPT human turns held out
from `train --data sharegpt` (`--sets sharegpt`: `training.chat.sharegpt.held_out_prompts`, the pinned wheel).

Why: the card's α (0.42 greedy) is far below the held-out agreement its training reports (0.69),
and this tells a bug from a change of distribution: a drafter that agrees on the model's own
questions and not on the card's met new prompts, not a bug. A newly trained drafter is compared here
before it replaces the shipped one:

    specdec chat-alpha                       # the shipped drafter, all three sets (~10 min, 2 threads)
    specdec chat-alpha --drafter runs/chat-drafter/specdec-features --sets card other
    specdec chat-alpha --drafter assets/models/SmolLM2-135M-Instruct-features runs/new/specdec-features \
        --sets sharegpt card own --prompts 6     # several drafters: same prompts and seeds, one after the other
    specdec chat-alpha --drafter OLD NEW --sets card other more --samplings t1 --seeds 0 1 2 3   # a sampled decision

With several drafters, each after the first also gets its difference from the first, with a 90 % interval
that resamples the prompts (`difference_interval`): on 8 prompts a change of 0.02 is often inside it.
"""

from __future__ import annotations

import argparse
import json

from ..core.checks import whole_number
from .main import folder

OTHER_PROMPTS = ("My Python code raises a KeyError. What does that mean?", "Suggest a name for a small bakery.",
                 "Is it safe to eat raw cookie dough?", "Translate 'good morning' into Spanish.",
                 "What year did the Berlin Wall fall?", "How many legs does a spider have?",
                 "Draft a polite email declining a meeting invitation.", "What is a good vegetarian dinner idea?")
# 24 more, for decisions: with 8 prompts a set, a paired interval on α spans about ±0.02 greedy and
# ±0.05 at the pair's sampling, wider than the changes a training session makes. Hand-written as a
# visitor types; none is a templated question (tests/test_answers.py checks) or a ShareGPT opening.
MORE_PROMPTS = (
    "Why do cats purr?", "What is the difference between weather and climate?",
    "Give me a simple recipe for pancakes.", "How can I improve my sleep?",
    "Explain what a black hole is.", "Write a haiku about the ocean.", "What causes rainbows?",
    "How do vaccines work?", "List five fun things to do on a rainy day.", "What is the Pythagorean theorem?",
    "How should I prepare for a job interview?", "Why is the ocean salty?", "Describe the water cycle.",
    "What does a CPU do in a computer?", "Write a thank-you note to my teacher.", "How do plants make their food?",
    "What are some easy ways to save money?", "Explain the rules of chess briefly.",
    "What is the tallest mountain in the world?", "How do I reverse a list in Python?",
    "Why do leaves change color in the fall?", "Tell me something surprising about octopuses.",
    "What is the difference between a virus and a bacterium?", "How can I stay productive when working from home?",
)


SAMPLING_WORDS = {"greedy": "greedy", "pair": "pair's", "t1": "T = 1"}   # `training.chat.answers.SAMPLINGS`
LEVEL, DRAWS = 0.9, 4000   # the intervals' coverage, and bootstrap resamples (seeded: the same data prints the same)


def difference_interval(first: list[tuple[int, int]], second: list[tuple[int, int]], level: float = LEVEL,
                        draws: int = DRAWS, seed: int = 0) -> tuple[float, float, float]:
    """(pooled α of `second` less `first`'s, and its `level` interval) for two drafters measured on the same
    prompts ((accepted, tested) a prompt, in one order). The interval resamples prompts, not drafts: a
    prompt's drafts rise and fall together (one hard prompt moves hundreds), so a binomial interval over
    drafts is several times too narrow; and pairing each prompt with itself takes its difficulty out."""
    import torch

    one, two = (torch.tensor(rows, dtype=torch.float64).reshape(-1, 2) for rows in (first, second))
    if len(one) != len(two) or not len(one):
        raise ValueError("both drafters must be measured on the same prompts, at least one")
    picks = torch.randint(0, len(one), (draws, len(one)), generator=torch.Generator().manual_seed(seed))

    def pooled(rows: torch.Tensor, pick=slice(None)) -> torch.Tensor:
        got = rows[pick].sum(-2)
        return got[..., 0] / got[..., 1].clamp(min=1)

    spread = pooled(two, picks) - pooled(one, picks)
    tail = (1 - level) / 2
    return (float(pooled(two) - pooled(one)), float(spread.quantile(tail)), float(spread.quantile(1 - tail)))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--drafter", type=folder, nargs="+", default=None, metavar="FOLDER",
                    help="saved features drafter folders (default: the shipped one); several are measured in turn "
                         "on each set and temperature")
    ap.add_argument("--sets", nargs="+", choices=("card", "other", "more", "own", "sharegpt"),
                    default=("card", "other", "own"),
                    help="which prompts: the card's, 8 other hand-written ones, 24 more hand-written ones, the "
                         "model's own questions, ShareGPT's held out from `train --data sharegpt`")
    ap.add_argument("--prompts", type=int, default=None, help="the first N prompts of each set (default: all)")
    ap.add_argument("--own", type=int, default=12, help="how many questions the model writes itself")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens a prompt")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                    help="the sampled runs' seeds, each prompt seeded apart (default: 0 1; two seeds a prompt leave a "
                         "seed set's luck in a sampled α: decide a sampled change on four or more)")
    ap.add_argument("--samplings", nargs="+", choices=list(SAMPLING_WORDS), default=list(SAMPLING_WORDS),
                    help="greedy, the pair's own sampling (T 0.2, top-k 50, top-p 0.9), T = 1 (default: all three)")


def run(args) -> int:
    """Print α at greedy and T = 1 for each set of prompts, then all of it as one JSON line."""
    whole_number(args.own, "--own", 1)
    whole_number(args.tokens, "--tokens", 1)
    whole_number(args.threads, "--threads", 1)
    if args.prompts is not None:
        whole_number(args.prompts, "--prompts", 1)
    from ..core.checks import seed
    from ..training.chat.features_chat_card import SEEDS

    seeds = tuple(seed(s, "--seeds") for s in args.seeds) if args.seeds else SEEDS
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"--seeds repeats a seed: {' '.join(map(str, seeds))}")
    from pathlib import Path

    import torch

    from ..drafting import features as fx
    from ..explain.measure import CHAT_PROMPTS
    from ..models.pair import load_pair
    from ..training.chat.answers import SAMPLINGS
    from ..training.chat.chat_pool import chat_prompt, write_questions
    from ..training.chat.features_chat_card import acceptance

    torch.set_num_threads(args.threads)
    from ..core import threads
    threads.fix(args.threads)
    pair = load_pair(preset="smollm2-135m", drafter="features")
    nets = ({str(d): fx.load(Path(d), pair.target, pair.dtype) for d in args.drafter} if args.drafter
            else {str(fx.weights_folder(pair)): fx.net_for(pair)})
    texts = {"card": list(CHAT_PROMPTS), "other": list(OTHER_PROMPTS), "more": list(MORE_PROMPTS)}
    if "sharegpt" in args.sets:   # held out by hash; short enough for a training row's prompt
        from ..models.realmodel import cache_root
        from ..training.chat import sharegpt as sg

        texts["sharegpt"] = [t for t in sg.held_out_prompts(cache_root() / "sharegpt", 200, skip=100)
                             if len(chat_prompt(pair.tokenizer, t)) <= sg.DataConfig.max_prompt][:args.own]
    if "own" in args.sets:   # seeded apart from every training pool's seeds
        texts["own"] = write_questions(pair.target, pair.tokenizer, args.own, torch.Generator().manual_seed(4321),
                                       batch=args.own)
    from ..training.chat.prompt_kinds import weights_sha256

    # The sha256 ties these results to the weights (a card's); seeded_apart: each prompt's sampled runs
    # draw their own stream (`run_seed`).
    found = {"drafters": list(nets), "sha256": {d: weights_sha256(Path(d)) for d in nets}, "gamma": 4,
             "new_tokens": args.tokens, "prompts": {}, "seeds": list(seeds), "seeded_apart": True}
    for name in args.sets:
        found["prompts"][name] = texts[name][:args.prompts]
        prompts = [chat_prompt(pair.tokenizer, text) for text in texts[name][:args.prompts]]
        for sampling in args.samplings:   # the card's own measure: greedy one seed, sampled `seeds`
            first = None
            for drafter, net in nets.items():
                pair.feature_net = net
                row = acceptance(pair, prompts, SAMPLINGS[sampling].sampling, gamma=4, new=args.tokens, seeds=seeds)
                key = f"{name}, {SAMPLING_WORDS[sampling]}"
                key += f" | {drafter}" if len(nets) > 1 else ""
                found[key] = {"alpha": round(row["alpha"], 3), "tested": row["tested"], "per_prompt": row["per_prompt"]}
                than = ""
                if first is None:
                    first = row["per_prompt"]
                else:   # the decision a second drafter is measured for, with its noise
                    d, lo, hi = difference_interval(first, row["per_prompt"])
                    found[key]["minus_first"] = [round(d, 3), round(lo, 3), round(hi, 3)]
                    than = f"; {d:+.3f} on the first drafter, {LEVEL:.0%} over prompts {lo:+.3f} to {hi:+.3f}"
                print(f"{key:>16}: α {row['alpha']:.3f} ({row['tested']} drafts tested{than})", flush=True)
    print(json.dumps(found))
    return 0
