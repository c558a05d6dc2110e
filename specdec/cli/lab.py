"""`specdec lab`: the exactness lab in a terminal (a Monte Carlo of the verify step under four
rules on a small p and q), moved out of `cli.main` as it was."""

from __future__ import annotations

import argparse
import textwrap

from ..core.checks import whole_number

LAB_BENCH_SAMPLES = 1_000_000
LAB_WIDTH = 80   # the lab's output fits a terminal of this width


def _numbers(text: str) -> list[float]:
    """argparse type: "0.5,0.3,0.2" -> [0.5, 0.3, 0.2]."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `lab` subcommand's options."""
    from ..app.server import limits
    from ..explain import lab

    parser.add_argument("--preset", default="over-confident", choices=list(lab.PRESETS), metavar="NAME",
                        help=f"one of: {', '.join(map(repr, lab.PRESETS))}")
    parser.add_argument("--p", type=_numbers, help="target distribution, comma-separated (overrides the preset)")
    parser.add_argument("--q", type=_numbers, help="draft distribution, comma-separated (with --p)")
    parser.add_argument("--tokens", help="token names, comma-separated (default t0, t1, ...)")
    parser.add_argument("--samples", type=int, default=100_000, help=f"1 to {limits.MAX_LAB_SAMPLES:,}")
    parser.add_argument("--seed", type=int, default=0, help="seeds the Monte Carlo")
    parser.add_argument("--bench", action="store_true", help=f"print samples/second for {LAB_BENCH_SAMPLES:,} samples")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for the Monte Carlo (1, the default, is fastest for these small ops)")


def run(args: argparse.Namespace) -> int:
    """`specdec lab`: print where each emitted token comes from, and a verdict per rule (TV,
    chi-square, p-value, acceptance). Bad values raise ValueError (one line, exit 2)."""
    from ..app.server import limits
    from ..explain import lab, montecarlo

    whole_number(args.threads, "--threads", 1)
    if args.bench:
        for v in (8, 20):
            s = montecarlo.benchmark_vocab(v, threads=args.threads)
            print(f"exact rule, V = {v:>2}: {LAB_BENCH_SAMPLES:,} samples in {s:.3f} s "
                  f"= {LAB_BENCH_SAMPLES / s:,.0f} samples/s (best of 3, {args.threads} torch thread(s))")
        return 0
    if (args.p is None) != (args.q is None):
        raise ValueError("give both --p and --q, or neither")
    limits.check_lab_samples(whole_number(args.samples, "--samples", 1), "--samples")
    if args.p is not None:
        p, q, name = args.p, args.q, "custom"
        tokens = args.tokens.split(",") if args.tokens else [f"t{i}" for i in range(len(p))]
    else:
        tokens, p, q = lab.preset(args.preset)
        name = args.preset
    result = lab.run(tokens, p, q, args.samples, args.seed, threads=args.threads)
    for note in result.notes:
        print(textwrap.fill(f"note: {note}", LAB_WIDTH, subsequent_indent="  "))
    print(f"{name}: {len(result.tokens)} tokens, {result.n:,} samples, seed {result.seed}, {result.seconds:.2f} s\n"
          f"beta = sum(min(p, q)) = {result.beta:.4f}\n")
    print("Where each token comes from under each rule (closed forms):\naccepted draft + after a rejection = total\n")
    print(lab.format_table(*lab.decomposition_table(result), width=LAB_WIDTH))
    print()
    print(lab.format_table(*lab.summary_table(result, short=True), width=LAB_WIDTH))
    return 0
