"""A model pair's folders as they were written: the size and sha256 of every file that decides what
the models do, recorded in ONE file beside the two model folders (`manifest.json`).

`python -m specdec train` writes it; `python -m specdec manifest FOLDER` rewrites it (after a model
was re-trained on purpose by other means); `models.load_pair` checks it before loading, so a pair
whose weights or tokenizer were overwritten is refused with a message that says what changed,
instead of decoding garbage under the bundled pair's name. Hashing the bundled pair (about 10 MB)
takes milliseconds. The model cards (README.md) and training.json are not checked: they describe
the models, `python -m specdec card` rewrites them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

NAME = "manifest.json"
# What transformers reads to build the tokenizer and the model: a change to any of them changes p or q.
CHECKED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
ABOUT = ("Size and sha256 of the files that define this model pair, checked by specdec.models.pair.load_pair "
         "before it loads them. Written by `python -m specdec train`; after changing a model on purpose, "
         "record it with `python -m specdec manifest FOLDER`.")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(root: Path) -> dict:
    """{"<model folder>/<file>": {"bytes", "sha256"}} for every model folder (one holding a
    config.json) directly under `root`."""
    root = Path(root)
    files = {}
    for folder in sorted(p for p in root.iterdir() if (p / "config.json").is_file()):
        for name in CHECKED:
            path = folder / name
            if path.is_file():
                files[f"{folder.name}/{name}"] = {"bytes": path.stat().st_size, "sha256": sha256(path)}
    return files


def write(root) -> Path:
    """Record the model folders under `root` in `root/manifest.json`; ValueError when there are none."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a folder")
    files = describe(root)
    if not files:
        raise ValueError(f"{root} holds no model folder (a folder with a config.json) to record")
    path = root / NAME
    path.write_text(json.dumps({"about": ABOUT, "files": files}, indent=1) + "\n", encoding="utf-8")
    return path


def recorded(root: Path) -> dict | None:
    """The files `root/manifest.json` records, or None when there is no manifest."""
    path = Path(root) / NAME
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))["files"])
    except (ValueError, KeyError, TypeError):
        return {}   # unreadable: every file then differs from what it records


def differences(folder) -> list[str] | None:
    """How a model folder differs from its parent's manifest (one phrase per file); [] when it
    matches, None when the parent has no manifest (nothing to check against)."""
    folder = Path(folder)
    files = recorded(folder.parent)
    if files is None:
        return None
    expected = {k.split("/", 1)[1]: v for k, v in files.items() if k.split("/", 1)[0] == folder.name}
    if not expected:
        return [f"{folder.name} is not in {NAME}"]
    found = []
    for name in sorted(set(expected) | {n for n in CHECKED if (folder / n).is_file()}):
        path, want = folder / name, expected.get(name)
        where = f"{folder.name}/{name}"
        if want is None:
            found.append(f"{where} is not recorded")
        elif not path.is_file():
            found.append(f"{where} is missing")
        elif path.stat().st_size != want.get("bytes"):
            found.append(f"{where} has {path.stat().st_size:,} bytes, {NAME} records {_count(want.get('bytes'))}")
        elif sha256(path) != want.get("sha256"):
            found.append(f"{where} has another sha256 than {NAME} records (same size)")
    return found


def _count(n) -> str:
    return f"{n:,}" if isinstance(n, int) else repr(n)
