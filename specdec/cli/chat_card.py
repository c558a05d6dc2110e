"""`specdec chat-card`: measure the features drafter shipped for SmolLM2-135M-Instruct on this CPU and write its card
(README.md beside its weights, in assets/models/SmolLM2-135M-Instruct-features).

α greedy, at the pair's own sampling and at T = 1, c, and the speedup over the target alone at the γ
the pair picks here, in the pair's own precision and threads (`training.chat.features_chat_card.
measure_chat`); and the p-mass its vocabulary subset holds on a held-out pool the target draws here
(its own questions and answers, seeded apart from training's).

    specdec chat-card [--questions 16] [--timed 8] [--kinds LOG ...]

With --kinds, the card also gives α on three kinds of prompt (hand-written, ShareGPT held out, the model's
own questions) from `specdec chat-alpha`'s output on this drafter (`training.chat.prompt_kinds`).
"""

from __future__ import annotations

import argparse
import json
import time

from ..core.checks import whole_number


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--questions", type=int, default=16, help="held-out questions for the coverage")
    ap.add_argument("--timed", type=int, default=8, help="chat prompts timed against the target alone")
    ap.add_argument("--from-measures", action="store_true",
                    help="write the card again from the folder's measures.json (no measuring)")
    ap.add_argument("--kinds", nargs="+", default=None, metavar="LOG",
                    help="chat-alpha outputs (its last JSON line) on this drafter: the card's table of α on three "
                         "kinds of prompt (default: the table measures.json keeps for these weights, if any)")


PRESET = "smollm2-135m"   # the real pair whose shipped drafter the card describes


def picker(pair):
    """The γ a run of the real pair starts with here, by sampling (`explain.gamma.gamma_for`: this
    machine's costs and the card's α at the nearest temperature); None where nothing is measured."""
    from ..explain.gamma import gamma_for

    device, dtype = str(pair.device).split(":")[0], str(pair.dtype).replace("torch.", "")

    def picked(sampling):
        pick = gamma_for(PRESET, "features", sampling.temperature, device, dtype)
        return pick.gamma if pick is not None else None
    return picked


def prompt_kinds(folder, logs: list[str] | None) -> dict | None:
    """The card's α on three kinds of prompt for the weights under `folder`: from chat-alpha's `logs`, or
    else the table measures.json keeps if it measured these same weights (new weights drop it)."""
    from pathlib import Path

    from ..training.chat import prompt_kinds as pk

    sha = pk.weights_sha256(folder)
    if logs:
        return pk.kinds_of([pk.last_json(Path(log)) for log in logs], sha)
    saved = folder / "measures.json"
    kinds = json.loads(saved.read_text()).get("kinds") if saved.exists() else None
    return kinds if kinds and kinds.get("sha256") == sha else None


def run(args) -> int:
    """Measure (or read the saved measures), then write README.md and measures.json beside the weights."""
    whole_number(args.questions, "--questions", 1)
    whole_number(args.timed, "--timed", 1)
    from ..drafting import features as fx
    from ..models.pair import PRESETS, load_pair
    from ..training.chat import features_chat_card as fcc
    from ..training.chat.chat_pool import draw_chat_pool
    from ..training.chat.features_chat import USES

    t0 = time.perf_counter()
    pair = load_pair(preset=PRESET, drafter="features")
    folder = fx.weights_folder(pair)
    record = json.loads((folder / "training.json").read_text())
    kinds = prompt_kinds(folder, args.kinds)   # before measuring: a log on other weights is refused at once
    if args.from_measures:
        saved = json.loads((folder / "measures.json").read_text())
        measures, cover = saved["measures"], saved["coverage"]
    else:
        measures = fcc.measure_chat(pair, fcc.chat_ids(pair.tokenizer), PRESETS[PRESET].sampling, timed=args.timed,
                                    picked=picker(pair))
        print(json.dumps(measures, indent=1), flush=True)
        pool = draw_chat_pool(pair.target, pair.tokenizer, 1, USES, 160, 1234, None, print, args.questions)
        cover = fcc.coverage(pair.target, pool, fx.net_for(pair).vocab)
        print(json.dumps(cover), flush=True)
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    (folder / "README.md").write_text(fcc.card(record, measures, cover, size_mb, pair.label, kinds), encoding="utf-8")
    saved = {"measures": measures, "coverage": cover} | ({"kinds": kinds} if kinds else {})
    (folder / "measures.json").write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {folder / 'README.md'} in {time.perf_counter() - t0:.0f} s")
    return 0
