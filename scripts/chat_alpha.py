"""α of SmolLM2-135M-Instruct's features drafter on three kinds of prompt: the card's 8 hand-written
chat prompts (`measure.CHAT_PROMPTS`), 8 other hand-written ones (none is a training question; two
share a subject with the templates: cookies, Python), and questions the model writes itself
(`training.chat_pool.write_questions`, as its training pool does).

Why: the card's α (0.42 greedy) is far below the held-out agreement its training reports (0.69),
and this tells a bug from a change of distribution. Measured 2026-11-26 on the shipped drafter
(greedy, γ 4, 48 new tokens): 0.62 on 12 of the model's own questions, 0.42 on the card's. A newly
trained drafter is compared here before it replaces the shipped one:

    python scripts/chat_alpha.py                       # the shipped drafter, all three sets (~10 min, 2 threads)
    python scripts/chat_alpha.py --drafter runs/chat-drafter/specdec-features --sets card other
"""

from __future__ import annotations

import argparse
import json

OTHER_PROMPTS = ("My Python code raises a KeyError. What does that mean?", "Suggest a name for a small bakery.",
                 "Is it safe to eat raw cookie dough?", "Translate 'good morning' into Spanish.",
                 "What year did the Berlin Wall fall?", "How many legs does a spider have?",
                 "Draft a polite email declining a meeting invitation.", "What is a good vegetarian dinner idea?")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", default=None, help="a saved features drafter folder (default: the shipped one)")
    ap.add_argument("--sets", nargs="+", choices=("card", "other", "own"), default=("card", "other", "own"))
    ap.add_argument("--own", type=int, default=12, help="how many questions the model writes itself")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from pathlib import Path

    import torch

    from specdec import features as fx
    from specdec.decoding import speculative_generate
    from specdec.measure import CHAT_PROMPTS
    from specdec.models import load_pair
    from specdec.sampling import SamplingConfig
    from specdec.settings import RunSettings
    from specdec.training.chat_pool import chat_prompt, write_questions

    torch.set_num_threads(args.threads)
    pair = load_pair(preset="smollm2-135m", drafter="features")
    if args.drafter:
        pair.feature_net = fx.load(Path(args.drafter), pair.target)
    texts = {"card": list(CHAT_PROMPTS), "other": list(OTHER_PROMPTS)}
    if "own" in args.sets:   # seeded apart from every training pool's seeds
        texts["own"] = write_questions(pair.target, pair.tokenizer, args.own, torch.Generator().manual_seed(4321),
                                       batch=args.own)
    found = {"drafter": args.drafter or str(fx.weights_folder(pair)), "gamma": 4, "new_tokens": args.tokens}
    for name in args.sets:
        for temperature, seeds in ((0.0, (0,)), (1.0, (0, 1))):
            accepted = tested = 0
            for text in texts[name]:
                for seed in seeds:
                    settings = RunSettings(gamma=4, max_new_tokens=args.tokens, drafter="features", seed=seed,
                                           sampling=SamplingConfig(temperature=temperature))
                    stats = speculative_generate(pair, chat_prompt(pair.tokenizer, text), settings, trace=False).stats
                    accepted, tested = accepted + stats.accepted, tested + stats.tested
            key = f"{name}, {'greedy' if temperature == 0 else 'T = 1'}"
            found[key] = {"alpha": round(accepted / max(tested, 1), 3), "tested": tested}
            print(f"{key:>16}: α {found[key]['alpha']:.3f} ({tested} drafts tested)", flush=True)
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
