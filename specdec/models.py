"""Model pairs: a target and a draft that share one tokenizer, loaded safely.

Safety by default: never `trust_remote_code`, safetensors weights only. Offline by default:
the bundled pair in `assets/models/` loads from disk; hub presets load only when asked for, and
fail fast with a clear message when the hub cannot be reached.

Loaded pairs are shared by every request and kept in a least-recently-used cache of at most
`limits.MAX_PAIRS` pairs (SPECDEC_MAX_PAIRS); the bundled pair is pinned and never evicted. An
evicted pair's memory returns once the last run using it ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from . import limits

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
BUNDLED = "bundled"


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    target: str
    draft: str
    hub: bool


PRESETS: dict[str, Preset] = {p.key: p for p in [
    Preset(BUNDLED, "Bundled Shakespeare pair (offline, 16-layer target / 1-layer draft)",
           str(ASSETS / "specdec-target"), str(ASSETS / "specdec-draft"), hub=False),
    Preset("smollm2", "SmolLM2 360M / 135M Instruct (hub)",
           "HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", hub=True),
    Preset("qwen2.5", "Qwen2.5 1.5B / 0.5B Instruct (hub)",
           "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", hub=True),
    Preset("gpt2", "GPT-2 large / GPT-2 (hub)", "openai-community/gpt2-large", "openai-community/gpt2", hub=True),
    Preset("pythia", "Pythia 1B / 160M (hub)", "EleutherAI/pythia-1b", "EleutherAI/pythia-160m", hub=True),
]}


class ModelLoadError(RuntimeError):
    """A pair could not be loaded; the message says why and what to do."""


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][^\\/\s'\"`:,;()\[\]]+){2,}[\\/]?")


def scrub_paths(text: str) -> str:
    """A message with every absolute path shortened to its last part (error messages from
    transformers name files under the server's cache and home folders)."""
    return _PATH.sub(lambda m: "…/" + m.group(0).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1], text)


def display_name(name: str) -> str:
    """What a trace, a label or a page may show of a model's name: a hub id as it is, a local
    folder by its own name only (never the server's absolute path)."""
    text = str(name)
    path = Path(text).expanduser()
    looks_local = path.is_absolute() or text.startswith((".", "~")) or "\\" in text
    if looks_local or path.is_dir():
        return text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or text
    return text


def pick_device(device: str | None = None) -> tuple[str, torch.dtype]:
    """CUDA with half-precision weights when present (bf16 where supported), else CPU float32.
    Probabilities are always computed in float32 (see sampling.logits_to_probs)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return device, torch.float32


class ModelPair:
    """Tokenizer + target + draft, loaded once and shared read-only between requests."""

    def __init__(self, tokenizer, target, draft, target_name: str, draft_name: str,
                 device: str = "cpu", dtype: torch.dtype = torch.float32, label: str = ""):
        self.tokenizer, self.target, self.draft = tokenizer, target, draft
        self.target_name, self.draft_name, self.label = target_name, draft_name, label or target_name
        self.device, self.dtype = device, dtype
        # A fast tokenizer is not safe to share between threads ("Already borrowed"), and the
        # app serves several requests at once from one loaded pair.
        self._tokenizer_lock = threading.Lock()
        self._token_text: dict[int, str] = {}   # id -> its own text, filled as runs ask for ids
        sizes = [_logit_size(target)] + ([_logit_size(draft)] if draft is not None else [])
        # Models of one family often pad their embedding matrices differently (151936 vs 152064
        # rows for Qwen2.5's 151665-token tokenizer). The pair's vocabulary is the ids that exist
        # in both models (and in the tokenizer): padding rows are not tokens, neither model can
        # be fed the other's padding ids, so both p and q give them probability 0.
        self.vocab_size = min(sizes + ([len(tokenizer)] if tokenizer is not None else []))
        self.context_length = _context_length(target, draft)
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        self.eos_token_id = eos if eos is not None else target.config.eos_token_id
        if isinstance(self.eos_token_id, list):
            self.eos_token_id = self.eos_token_id[0]

    # -------------------------------------------------------------- text <-> ids
    def encode(self, prompt) -> tuple[str, list[int]]:
        """(text, ids) of a prompt given as text or as ids. ValueError when it is longer than
        `limits.MAX_PROMPT_TOKENS` (SPECDEC_MAX_PROMPT_TOKENS) or an id is not in the vocabulary."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this pair has no tokenizer: pass token ids")
            with self._tokenizer_lock:
                ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            _check_prompt_length(len(ids))
            return prompt, ids
        ids = [int(t) for t in prompt]
        _check_prompt_length(len(ids))
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is not in the vocabulary (ids 0 to {self.vocab_size - 1})")
        return self.decode(ids), ids

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(f"<{i}>" for i in ids)
        with self._tokenizer_lock:
            return self.tokenizer.decode(ids)

    def token_texts(self, ids) -> dict[int, str]:
        """Each id's own text (as it would appear in the output), for the trace. Cached: a run
        asks for the same few hundred ids round after round."""
        ids = {int(i) for i in ids}
        if self.tokenizer is None:
            return {i: f"<{i}>" for i in ids}
        with self._tokenizer_lock:
            for i in ids - self._token_text.keys():
                self._token_text[i] = self.tokenizer.decode([i])
            return {i: self._token_text[i] for i in ids}

    def describe(self) -> dict:
        """What a trace stores about the pair: names (a hub id, or a local folder's own name),
        never a path on this server."""
        return {"label": self.label, "target": display_name(self.target_name),
                "draft": display_name(self.draft_name),
                "device": self.device, "dtype": str(self.dtype).replace("torch.", ""),
                "vocab_size": self.vocab_size, "context_length": self.context_length}


def _check_prompt_length(n: int) -> None:
    if n > limits.MAX_PROMPT_TOKENS:
        raise ValueError(f"the prompt is {n} tokens; this server takes prompts of at most {limits.MAX_PROMPT_TOKENS} "
                         "tokens (SPECDEC_MAX_PROMPT_TOKENS): shorten it")


def _logit_size(model) -> int:
    emb = model.get_output_embeddings()
    return emb.weight.shape[0] if emb is not None else model.config.vocab_size


def _context_length(*models) -> int | None:
    lengths = [getattr(m.config, "max_position_embeddings", None) or getattr(m.config, "n_positions", None)
               for m in models if m is not None]
    lengths = [n for n in lengths if n]
    return min(lengths) if lengths else None


def check_same_tokenizer(target_tok, draft_tok, target_name: str, draft_name: str) -> None:
    """Speculative decoding compares p and q token by token: the ids must mean the same text."""
    if target_tok.get_vocab() != draft_tok.get_vocab():
        raise ModelLoadError(
            f"{target_name} and {draft_name} use different tokenizers, so their token ids do not "
            "mean the same text and p and q cannot be compared. Pick a draft from the same model family.")


def _load_model(name: str, dtype: torch.dtype, device: str, offline: bool):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=dtype, trust_remote_code=False, use_safetensors=True, local_files_only=offline)
    return model.to(device).eval()


def _load_tokenizer(name: str, offline: bool):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, trust_remote_code=False, local_files_only=offline)


def _is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def load_pair(target: str | None = None, draft: str | None = None, preset: str | None = None,
              device: str | None = None) -> ModelPair:
    """Load a pair: the bundled default, a preset key, or explicit target/draft paths or hub ids.

    Raises ModelLoadError with a message a user can act on: missing files, no network for a
    hub model, different tokenizers, weights not in safetensors format.
    """
    if (target is None) != (draft is None):
        raise ModelLoadError("give both a target and a draft (or neither, for the bundled pair)")
    if target is None:
        key = preset or BUNDLED
        if key not in PRESETS:
            raise ModelLoadError(f"unknown model pair {key!r}; known: {', '.join(PRESETS)}")
        chosen = PRESETS[key]
        target, draft, label = chosen.target, chosen.draft, chosen.label
    else:
        label = f"{display_name(target)} / {display_name(draft)}"
    device, dtype = pick_device(device)
    local = [Path(n).is_dir() for n in (target, draft)]
    try:
        if all(local):
            offline = True
        else:
            offline = _is_offline() or not _hub_reachable()
            if offline and not _in_hub_cache(target, draft):
                raise ModelLoadError(
                    f"{label} needs the Hugging Face Hub, which cannot be reached from here (offline). "
                    f"Use the bundled pair (preset '{BUNDLED}'), which works offline, or a local folder.")
        tokenizer = _load_tokenizer(target, offline)
        draft_tokenizer = _load_tokenizer(draft, offline)
        check_same_tokenizer(tokenizer, draft_tokenizer, target, draft)
        target_model = _load_model(target, dtype, device, offline)
        draft_model = _load_model(draft, dtype, device, offline)
    except ModelLoadError:
        raise
    except (MemoryError, torch.OutOfMemoryError):
        release_memory()
        raise ModelLoadError(f"not enough memory on this server to load {label}: use the bundled pair "
                             f"(preset '{BUNDLED}') or a smaller pair") from None
    except Exception as err:   # a corrupt file, a config transformers cannot read, ...: one clear message
        text = scrub_paths(str(err).splitlines()[0]) if str(err).strip() else ""
        if not isinstance(err, (OSError, ValueError)):
            text = f"{type(err).__name__}: {text}" if text else type(err).__name__
        text = text or type(err).__name__
        if "safetensors" in text.lower() and "header" not in text.lower():
            raise ModelLoadError(f"{label}: only safetensors weights are loaded (safe by default): {text}") from None
        raise ModelLoadError(f"could not load {label}: {text}") from None
    return ModelPair(tokenizer, target_model, draft_model, target, draft, device, dtype, label)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connection, so an offline machine fails in seconds rather than hanging."""
    import socket

    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def _in_hub_cache(*names: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return all(isinstance(try_to_load_from_cache(n, "config.json"), str) for n in names)


# ---------------------------------------------------------------- pairs loaded once per process

PINNED = frozenset({BUNDLED})              # never evicted
_LOADED: OrderedDict[str, ModelPair] = OrderedDict()   # least recently used first
_CACHE = threading.Lock()                  # guards _LOADED (held for dict operations only)
_LOADING = threading.Lock()                # one load at a time (a load can take minutes)


def get_pair(key: str = BUNDLED) -> ModelPair:
    """The pair of a preset key, loaded on first use and shared (read-only) by every request.

    At most `limits.MAX_PAIRS` pairs stay loaded: before a new pair loads, the least recently
    used pairs that are not pinned are evicted (so peak memory stays within the limit); the
    bundled pair is pinned, and one pair that is not pinned may always load.
    """
    if key not in PRESETS:
        raise ModelLoadError(f"unknown model pair {key!r}; choose one of: {', '.join(PRESETS)}")
    pair = _cached(key)
    if pair is not None:
        return pair
    with _LOADING:
        pair = _cached(key)
        if pair is not None:
            return pair
        _evict(room_for=1)
        pair = load_pair(preset=key)
        with _CACHE:
            _LOADED[key] = pair
        return pair


def _cached(key: str) -> ModelPair | None:
    with _CACHE:
        pair = _LOADED.get(key)
        if pair is not None:
            _LOADED.move_to_end(key)
        return pair


def _evict(room_for: int = 0) -> list[str]:
    """Evict least recently used pairs that are not pinned until `room_for` more fit the limit."""
    evicted = []
    with _CACHE:
        pinned = sum(k in PINNED for k in _LOADED)
        keep = max(limits.MAX_PAIRS, pinned + room_for) - room_for
        for key in list(_LOADED):
            if len(_LOADED) <= keep:
                break
            if key not in PINNED:
                del _LOADED[key]
                evicted.append(key)
    if evicted:
        release_memory()
    return evicted


def unload_pair(key: str) -> bool:
    """Drop a pair from the cache (pinned ones too); True if it was loaded. Its memory returns
    once no run holds it."""
    with _CACHE:
        pair = _LOADED.pop(key, None)
    if pair is None:
        return False
    del pair
    release_memory()
    return True


def loaded_pairs() -> list[str]:
    """Keys of the loaded pairs, least recently used first."""
    with _CACHE:
        return list(_LOADED)


def is_loaded(key: str) -> bool:
    with _CACHE:
        return key in _LOADED


def release_memory() -> None:
    """Hand freed memory back: collect cycles, empty the CUDA cache, and ask glibc to return
    free heap pages to the system (freed model weights otherwise stay in the process's RSS)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_TRIM = []


def _malloc_trim():
    if not _TRIM:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _TRIM.append(libc.malloc_trim)
        except (OSError, AttributeError):   # not glibc (macOS, musl): nothing to trim
            _TRIM.append(None)
    return _TRIM[0]


def preload(key: str = BUNDLED, then=None) -> threading.Thread:
    """Load a pair in the background at start-up so the first request does not wait for it;
    `then(pair)` runs after loading (the app warms the decoders up with it)."""
    def work():
        try:
            pair = get_pair(key)
        except ModelLoadError:
            return   # reported when a request asks for it
        if then is not None:
            then(pair)
    thread = threading.Thread(target=work, daemon=True, name="specdec-preload")
    thread.start()
    return thread


def context_of(key: str) -> int | None:
    """A preset's context length from its config file, without loading the weights (for the
    app's max-new-tokens slider): the bundled folder's, or a hub pair's from the local Hugging
    Face cache; None when unknown (a hub pair never downloaded)."""
    import json

    preset = PRESETS.get(key)
    if preset is None:
        return None
    config = Path(preset.target) / "config.json"
    if preset.hub:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(preset.target, "config.json")
        except Exception:   # no huggingface_hub, a bad cache: unknown
            return None
        if not isinstance(found, str):
            return None
        config = Path(found)
    try:
        cfg = json.loads(config.read_text())
        return int(cfg.get("max_position_embeddings") or cfg.get("n_positions"))
    except (AttributeError, OSError, ValueError, TypeError):
        return None
