"""What SmolLM2-135M-Instruct answers under four samplings, printed for a person to read:
full-vocabulary sampling (T = 1, top-k 0, top-p 1), T = 0.7 with top-p 0.9, its authors' card
(T = 0.2, top-p 0.9, transformers' default top-k 50: the pair's own, `models.SMOLLM2_CARD`) and
greedy, on the page's two examples for the pair and six questions the sampling was not tuned on.
Each is the target alone (a speculative run samples the same distribution), 40 new tokens, seeds
0 and 1 (greedy once). `--page` runs instead what the page runs at the pair's defaults: the
features drafter, seed 0, 64 new tokens.

Read by hand, a sensible answer being a right, readable one: T = 1 gave 4 of
16, T = 0.7 / top-p 0.9 8 of 16, the card's sampling 13 of 16, greedy 5 of 8; the page's defaults
6 of 8 (wrong: the spider's legs; half-right: Romeo and Juliet's author, in an invented word).

    python scripts/sensible_answers.py            # ~35 min on a busy 2-core machine
    python scripts/sensible_answers.py --page
"""

from __future__ import annotations

import argparse
import json

QUESTIONS = ("How many legs does a spider have?", "Who wrote Romeo and Juliet?",
             "What is the boiling point of water in Celsius?", "Name three primary colors.",
             "Give me one tip for sleeping better.", "What is photosynthesis?")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", action="store_true", help="the page's own runs at the pair's defaults")
    args = ap.parse_args(argv)

    from specdec.app.server.api import EXAMPLES, RunRequest
    from specdec.core.sampling import SamplingConfig
    from specdec.core.settings import AUTOREGRESSIVE, RunSettings
    from specdec.decoding.loop import speculative_generate
    from specdec.models.pair import SMOLLM2_CARD, load_pair

    pair = load_pair(preset="smollm2-135m", drafter="features")
    prompts = [e.prompt for e in EXAMPLES if e.preset == "smollm2-135m"] + list(QUESTIONS)
    if args.page:
        for prompt in prompts:
            _, _, settings = RunRequest(prompt=prompt, preset="smollm2-135m", drafter="features").checked()
            gen = speculative_generate(pair, prompt, settings)
            print(json.dumps(dict(prompt=prompt, alpha=round(gen.stats.acceptance_rate, 3), text=gen.text),
                             ensure_ascii=False), flush=True)
        return 0
    samplings = {"T=1 top-k 0 top-p 1": SamplingConfig(1.0, 0, 1.0), "T=0.7 top-p 0.9": SamplingConfig(0.7, 0, 0.9),
                 "card": SMOLLM2_CARD, "greedy": SamplingConfig(0.0)}
    for prompt in prompts:
        for name, sampling in samplings.items():
            for seed in (0,) if sampling.greedy else (0, 1):
                settings = RunSettings(mode=AUTOREGRESSIVE, gamma=1, max_new_tokens=40, sampling=sampling, seed=seed,
                                       drafter="ngram")
                gen = speculative_generate(pair, prompt, settings)
                print(json.dumps(dict(prompt=prompt, sampling=name, seed=seed, text=gen.text), ensure_ascii=False),
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
