"""Nothing kept that no one asked for: old files, visitors' state, freed memory.

A server in front of anyone runs for weeks. What each request leaves behind must go again:

- **Files.** `export_path` writes an exported trace straight into Gradio's cache folder (one copy,
  not a temp file plus Gradio's copy of it). Gradio's own `delete_cache` (set by
  `serving.configure`) deletes uploads after SPECDEC_FILE_MAX_AGE_SECONDS; `sweep_files`
  deletes what it misses (files returned through a re-created component: every export), the
  empty folders it leaves, and `specdec-*` temp folders.
- **Visitors' state.** Gradio keeps every visitor's session (their run, an imported trace) for an
  hour after their page closes, and an API client's session until 10,000 newer ones push it out.
  `drop_session` releases one at once (the app calls it when a page closes), `drop_idle_sessions`
  those idle longer than SPECDEC_SESSION_IDLE_SECONDS; Gradio's `state_session_capacity`
  (SPECDEC_MAX_SESSIONS) bounds how many are kept at all.
- **Orphaned component copies.** Gradio 6.31 creates a new component object for every
  `gr.update` (an output a handler leaves out is one), and its post-processing then files that
  copy, with the value it shows, in the session under the copy's new id, where nothing ever reads
  it again: each run of the app left ~0.6 MB behind in the visitor's session (measured: resident
  memory grew linearly with runs from one client). `prune_sessions` removes those copies; the
  app's own components, and what the page shows, are untouched.
- **Freed memory.** `models.release_memory` asks glibc to return freed pages to the system.

`start(demo)` runs all of it in one daemon thread: the pruning every few seconds (cheap: a pass
over the sessions' dictionaries), the rest every SPECDEC_CLEAN_EVERY_SECONDS.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from . import limits

EXPORTS = "specdec-exports"      # our folder inside Gradio's cache
PRUNE_EVERY = 5.0                # seconds between passes over the sessions for orphaned copies

__all__ = ["cache_dir", "export_path", "sweep_files", "prune_sessions", "drop_session", "drop_idle_sessions",
           "sweep", "start", "Housekeeper"]


# ---------------------------------------------------------------- files

def cache_dir() -> Path:
    """Gradio's cache folder (GRADIO_TEMP_DIR, else <temp>/gradio), where uploads and every file
    the app returns live."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()


def export_path(text: str, stem: str = "specdec-trace") -> str:
    """Write an export (a trace's JSON text) into Gradio's cache and return its path. Gradio serves
    a file already in its cache without copying it, and deletes it with the uploads after
    SPECDEC_FILE_MAX_AGE_SECONDS; `sweep_files` catches any it misses."""
    folder = cache_dir() / EXPORTS / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        try:
            return path.lstat().st_size
        except OSError:
            return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _remove(path: Path) -> int:
    size = _size(path)
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return 0
    except OSError:
        return -1
    return size


def sweep_files(max_age: float | None = None, now: float | None = None, keep=()) -> dict:
    """Delete what is older than `max_age` seconds (default SPECDEC_FILE_MAX_AGE_SECONDS): every
    file in Gradio's cache folder but those in `keep` (the app's `keep_in_cache` files), the
    folders left empty, and `specdec-*` folders in the temp folder (where exports were written
    before they went straight to the cache). Returns {"removed": n, "bytes": b, "failed": n}.

    Gradio's own `delete_cache` misses files returned through a component it re-created for a
    `gr.update` (Gradio 6.31 tracks only the original component's files), so exports piled up.
    Gradio's cache folder is shared by every Gradio app on the machine that does not set
    GRADIO_TEMP_DIR: give a long-lived server a folder of its own there (a Space has one)."""
    max_age = limits.FILE_MAX_AGE_SECONDS if max_age is None else max_age
    now = time.time() if now is None else now
    keep = {str(Path(k).resolve()) for k in keep}
    removed = freed = failed = 0

    def drop(path: Path) -> None:
        nonlocal removed, freed, failed
        size = _remove(path)
        if size < 0:
            failed += 1
        else:
            removed += 1
            freed += size

    cache = cache_dir()
    if cache.is_dir():
        for root, _dirs, files in os.walk(cache, topdown=False):
            folder = Path(root)
            for name in files:
                f = folder / name
                if _age(f, now) > max_age and str(f.resolve()) not in keep:
                    drop(f)
            if folder != cache and _age(folder, now) > max_age:
                try:
                    if not any(folder.iterdir()):
                        drop(folder)
                except OSError:
                    pass
    tmp = Path(tempfile.gettempdir())
    for folder in list(tmp.glob("specdec-*")):
        if folder.is_dir() and not folder.name.startswith("specdec-server-") and _age(folder, now) > max_age \
                and all(_age(f, now) > max_age for f in folder.iterdir()):
            drop(folder)
    return dict(removed=removed, bytes=freed, failed=failed)


def kept_files(demo) -> set[str]:
    """The files the app asks Gradio to keep in its cache (examples, initial values)."""
    keep: set[str] = set()
    for block in demo.default_config.blocks.values():
        keep.update(getattr(block, "keep_in_cache", set()))
    return keep


# ---------------------------------------------------------------- visitors' sessions

def _holder(demo):
    return getattr(demo, "state_holder", None)


def prune_sessions(demo) -> int:
    """Remove the orphaned component copies Gradio files in sessions (see the module docstring).
    A copy is orphaned when its id is not one of the app's components. Returns how many went."""
    holder = _holder(demo)
    if holder is None or not hasattr(holder, "session_data"):
        return 0
    own = demo.default_config.blocks
    removed = 0
    for session in list(holder.session_data.values()):
        blocks = session.blocks_config.blocks
        for key in [k for k in list(blocks) if k not in own]:
            blocks.pop(key, None)
            session.config_values.pop(key, None)
            removed += 1
    return removed


def drop_session(demo, session_hash: str | None) -> bool:
    """Release one visitor's session now: their run or imported trace, their component copies.
    True if there was one."""
    holder = _holder(demo)
    if holder is None or not session_hash or session_hash not in holder.session_data:
        return False
    try:
        holder.delete_state(session_hash)   # runs gr.State delete callbacks
    except Exception:   # a callback failing must not keep the session alive
        pass
    with holder.lock:
        holder.session_data.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)
    return True


def drop_idle_sessions(demo, max_idle: float | None = None, now: float | None = None) -> int:
    """Release sessions idle longer than `max_idle` seconds (default SPECDEC_SESSION_IDLE_SECONDS)
    and those whose page has closed. Returns how many went."""
    import datetime

    holder = _holder(demo)
    if holder is None:
        return 0
    max_idle = limits.SESSION_IDLE_SECONDS if max_idle is None else max_idle
    now_dt = datetime.datetime.fromtimestamp(time.time() if now is None else now)
    dropped = 0
    for session_hash, session in list(holder.session_data.items()):
        last = holder.time_last_used.get(session_hash)
        idle = (now_dt - last).total_seconds() if last is not None else 0.0
        if getattr(session, "is_closed", False) or idle > max_idle:
            dropped += drop_session(demo, session_hash)
    return dropped


def sweep(demo=None) -> dict:
    """One full pass: files, idle and closed sessions, orphaned copies, freed memory."""
    from ..models import release_memory

    out = dict(files=sweep_files(keep=kept_files(demo) if demo is not None else ()))
    if demo is not None:
        out.update(idle_sessions=drop_idle_sessions(demo), orphans=prune_sessions(demo))
    release_memory()
    return out


class Housekeeper(threading.Thread):
    """The daemon thread `start` runs: prune every `prune_every` s, sweep every `every` s."""

    def __init__(self, demo, every: float | None = None, prune_every: float = PRUNE_EVERY):
        super().__init__(daemon=True, name="specdec-housekeeping")
        self.demo, self.every, self.prune_every = demo, every or limits.CLEAN_EVERY_SECONDS, prune_every
        self.stopped = threading.Event()
        self.passes = 0

    def run(self) -> None:
        last_sweep = time.monotonic()
        while not self.stopped.wait(min(self.prune_every, self.every)):
            try:
                prune_sessions(self.demo)
                if time.monotonic() - last_sweep >= self.every:
                    last_sweep = time.monotonic()
                    sweep(self.demo)
                self.passes += 1
            except Exception as err:   # housekeeping must never take the server down
                print(f"specdec housekeeping: {type(err).__name__}: {err}", flush=True)

    def stop(self) -> None:
        self.stopped.set()


def start(demo, every: float | None = None, prune_every: float = PRUNE_EVERY) -> Housekeeper:
    """Start the housekeeping thread for a built app (see the module docstring)."""
    keeper = Housekeeper(demo, every, prune_every)
    keeper.start()
    return keeper
