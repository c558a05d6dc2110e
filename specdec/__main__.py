"""Command line: `python -m specdec {generate,bench,lab,train,card,bench-app}`.

Bad arguments get one clear line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # CLI output is the result, not the loading
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

# How each token's fate is shown: a colour (ANSI) AND a symbol, so it reads without colour too.
STYLES = {
    "accepted": ("\033[32m", "", "accepted draft"),
    "rejected": ("\033[31;9m", "✗", "rejected draft (struck through)"),
    "residual": ("\033[33m", "↻", "resampled from the residual"),
    "target": ("\033[35m", "!", "sampled from p, adjustment skipped (biased)"),
    "greedy": ("\033[33m", "↻", "argmax of p after a rejection"),
    "bonus": ("\033[36m", "+", "bonus token from p"),
}
RESET = "\033[0m"


class Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, exit 2 (argparse prints the whole usage otherwise)
        print(f"specdec: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def fail(message: str) -> int:
    print(f"specdec: error: {message}", file=sys.stderr)
    return 2


def use_colour(mode: str) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def render_tokens(gen, colour: bool) -> str:
    """The generated text with every token marked: accepted drafts, rejected drafts (where they
    were proposed), and how each round's last token was produced."""
    out = []

    def piece(kind: str, token: int) -> None:
        code, symbol, _ = STYLES[kind]
        text = gen.token(token)
        out.append(f"{code}{symbol}{text}{RESET}" if colour else f"{symbol}{text}" if symbol else text)

    for r in gen.rounds:
        for i, tok in enumerate(r.emitted):
            if i < r.n_accepted:
                piece("accepted", tok)
            else:
                if r.n_accepted < r.gamma:
                    piece("rejected", r.positions[r.n_accepted].draft_token)
                piece(r.end_rule, tok)
    return "".join(out)


def legend(colour: bool) -> str:
    items = []
    for kind in ("accepted", "rejected", "residual", "target", "bonus"):
        code, symbol, label = STYLES[kind]
        mark = symbol or "plain"
        items.append(f"{code}{mark}{RESET} {label}" if colour else f"{mark} {label}")
    return "legend: " + " | ".join(items)


def stats_lines(gen) -> list[str]:
    from .trace import expected_tokens_per_round

    s = gen.stats
    gamma = gen.settings.get("gamma", 0)
    return [
        f"tokens {s.new_tokens} in {s.rounds} rounds, stopped at {s.stopped}",
        f"acceptance rate alpha = accepted/tested = {s.accepted}/{s.tested} = {s.acceptance_rate:.3f}"
        f"   (accepted/drafted = {s.accepted}/{s.drafted} = {s.accepted_per_drafted:.3f};"
        f" expected, mean beta = {s.expected_acceptance:.3f})",
        f"tokens per target forward = {s.tokens_per_target_forward:.2f}"
        f"   ((1 - alpha^(gamma+1)) / (1 - alpha) = {expected_tokens_per_round(s.acceptance_rate, gamma):.2f})",
        f"forward passes: target {s.target_forwards}, draft {s.draft_forwards}",
        f"time {s.wall_seconds:.3f} s (drafting {s.draft_seconds:.3f} s, verifying {s.verify_seconds:.3f} s)",
    ]


def cmd_generate(args) -> int:
    from . import SamplingConfig, autoregressive_generate, load_pair, speculative_generate
    from .models import ModelLoadError

    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    from .decoding import check_settings

    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    try:
        if not args.prompt.strip():
            raise ValueError("the prompt is empty: type at least one word")
        check_settings(args.gamma, args.max_new_tokens, sampling, args.drafter)   # before loading models
        pair = load_pair(target=args.target, draft=args.draft, preset=args.preset)
        gen = speculative_generate(pair, args.prompt, gamma=args.gamma, max_new_tokens=args.max_new_tokens,
                                   sampling=sampling, seed=args.seed, skip_adjustment=args.skip_adjustment,
                                   drafter=args.drafter)
    except (ValueError, ModelLoadError) as err:
        return fail(str(err))
    colour = use_colour(args.color)
    print(f"{pair.label}  [{pair.device}]  gamma={args.gamma} T={args.temperature} top-k={args.top_k} "
          f"top-p={args.top_p} seed={args.seed} drafter={args.drafter}"
          + ("  SKIP ADJUSTMENT (biased)" if args.skip_adjustment else ""))
    print(legend(colour))
    print()
    print(gen.prompt + render_tokens(gen, colour))
    print()
    for line in stats_lines(gen):
        print(line)
    if args.compare_ar:
        ar = autoregressive_generate(pair, args.prompt, max_new_tokens=args.max_new_tokens,
                                     sampling=sampling, seed=args.seed)
        speed_spec = gen.stats.new_tokens / gen.stats.wall_seconds
        speed_ar = ar.stats.new_tokens / ar.stats.wall_seconds
        print(f"autoregressive: {ar.stats.new_tokens} tokens in {ar.stats.wall_seconds:.3f} s "
              f"({ar.stats.target_forwards} target forwards); speedup x{speed_spec / speed_ar:.2f}")
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(gen.to_json(indent=1))
        except OSError as err:
            return fail(f"cannot write {args.json}: {err.strerror}")
        print(f"trace written to {args.json}")
    return 0


def cmd_bench(args) -> int:
    from . import load_pair
    from .bench import report
    from .models import ModelLoadError

    try:
        pair = load_pair(target=args.target, draft=args.draft, preset=args.preset)
    except ModelLoadError as err:
        return fail(str(err))
    print(report(pair, gamma=args.gamma, threads=args.threads))
    return 0


def cmd_train(args) -> int:
    from .training import TrainConfig, tiny_config, train

    cfg = tiny_config(args.out, args.corpus_dir) if args.tiny else TrainConfig(out_dir=args.out, corpus_dir=args.corpus_dir)
    if args.seed is not None:
        cfg.seed = args.seed
    run = train(cfg, only=args.only)
    if not args.no_card and not args.only:
        from .cards import write_cards
        write_cards(args.out, quick=args.tiny)
    print(f"trained in {run['total_seconds'] / 60:.1f} min")
    return 0


def cmd_card(args) -> int:
    from .cards import write_cards

    write_cards(args.out, quick=args.quick)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m specdec", description="Exact, traced speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def models(p):
        p.add_argument("--preset", default=None, help="model pair preset (default: the bundled pair)")
        p.add_argument("--target", help="target model: folder or hub id (with --draft)")
        p.add_argument("--draft", help="draft model: folder or hub id (with --target)")
        p.add_argument("--threads", type=int, default=None, help="torch CPU threads")

    g = sub.add_parser("generate", help="generate with speculative decoding and show every round")
    g.add_argument("--prompt", required=True)
    g.add_argument("--gamma", type=int, default=4, help="drafted tokens per round (1-16)")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--skip-adjustment", action="store_true",
                   help="on rejection sample from p instead of the residual (biased, for teaching)")
    g.add_argument("--drafter", choices=["model", "ngram"], default="model")
    g.add_argument("--json", help="write the trace to this file")
    g.add_argument("--compare-ar", action="store_true", help="also run the target alone and compare")
    g.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    models(g)
    g.set_defaults(func=cmd_generate)

    b = sub.add_parser("bench", help="measure cost ratio, acceptance rate and speedup")
    b.add_argument("--gamma", type=int, default=4)
    models(b)
    b.set_defaults(func=cmd_bench)

    t = sub.add_parser("train", help="train the bundled pair from scratch (about 35 minutes on 2 cores)")
    t.add_argument("--out", default="assets/models")
    t.add_argument("--tiny", action="store_true", help="a seconds-long smoke run, not a usable model")
    t.add_argument("--corpus-dir", default=None, help="train on these .txt files instead of the registry corpus")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--only", choices=["draft", "target"], default=None)
    t.add_argument("--no-card", action="store_true", help="skip measuring and writing the model cards")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("card", help="measure the trained pair and write its model cards")
    c.add_argument("--out", default="assets/models")
    c.add_argument("--quick", action="store_true")
    c.set_defaults(func=cmd_card)

    # Listed for --help only: `main` hands these two their own arguments before argparse runs.
    sub.add_parser("lab", help="the exactness lab: Monte Carlo of the verify step (lab --help)")
    sub.add_parser("bench-app", help="time the app's handlers: first round, 64 tokens, step switch")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # These two own their arguments (argparse's REMAINDER would swallow their --options).
    if argv[:1] == ["lab"]:
        from .lab import cli_main
        return cli_main(argv[1:])
    if argv[:1] == ["bench-app"]:
        from .ui_bench import main as bench_app
        return bench_app(argv[1:]) or 0
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
