"""Nothing kept that no one asked for, and nothing deleted that is not ours: old files, visitors'
state, freed memory.

A server in front of anyone runs for weeks. What each request leaves behind must go again, and
only that: Gradio's cache folder (GRADIO_TEMP_DIR, else <temp>/gradio) is shared by every Gradio
app on the machine that does not set it (a laptop, a classroom server, a shared GPU box).

- **Files.** This process writes only into a folder of its own inside Gradio's cache,
  `own_dir()` = <cache>/specdec-<pid>-<random>/ (made on first use, removed when the process
  exits): `export_path` writes each exported trace there, where Gradio serves it without a copy.
  `sweep_files` deletes what is older than SPECDEC_FILE_MAX_AGE_SECONDS in that folder, walking
  it without following links (a link is removed as a link; its target is never touched), and
  otherwise only removes the folders Gradio made for this app's own files (`app_files`: its
  uploads and returned files, which Gradio's `delete_cache` deletes) once they are empty. Nothing
  else in the cache or the temp folder is touched, whatever its age or name.
- **Visitors' state.** Gradio keeps every visitor's session (their run, an imported trace) for an
  hour after their page closes, and an API client's session until 10,000 newer ones push it out.
  `drop_session` releases one at once (the app calls it when a page closes), `drop_idle_sessions`
  those idle longer than SPECDEC_SESSION_IDLE_SECONDS; Gradio's `state_session_capacity`
  (SPECDEC_MAX_SESSIONS) bounds how many are kept, and `budget` how many bytes they hold.
- **Orphaned component copies.** Gradio 6.31 creates a new component object for every
  `gr.update` (an output a handler leaves out is one), and its post-processing then files that
  copy, with the value it shows, in the session under the copy's new id, where nothing ever reads
  it again, so a visitor's session grows with every run. `prune_sessions` removes those copies; the
  app's own components, and what the page shows, are untouched.
- **Freed memory.** `device_queue.release_memory` asks glibc to return freed pages to the system
  (and empties the CUDA cache when no run is on the device).

`start(demo)` runs all of it in one daemon thread: the pruning and the byte budget every few
seconds (cheap: a pass over the sessions' dictionaries), the rest every
SPECDEC_CLEAN_EVERY_SECONDS.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from . import budget, device_queue, limits

OWN_PREFIX = "specdec-"          # our folder in Gradio's cache: specdec-<pid>-<random>
PRUNE_EVERY = 5.0                # seconds between passes over the sessions for orphaned copies

__all__ = ["cache_dir", "own_dir", "export_path", "sweep_files", "app_files", "prune_sessions", "drop_session",
           "drop_idle_sessions", "busy_sessions", "enforce_budget", "sweep", "start", "Housekeeper"]


# ---------------------------------------------------------------- files

def cache_dir() -> Path:
    """Gradio's cache folder (GRADIO_TEMP_DIR, else <temp>/gradio), where uploads and every file
    the app returns live."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()


_OWN: dict[tuple[int, Path], Path] = {}   # (pid, Gradio's cache folder) -> this process's folder in it
_OWN_LOCK = threading.Lock()


def own_dir() -> Path:
    """This process's own folder in Gradio's cache (made on first use, and again if someone removed
    it; removed when the process exits). Everything the app writes goes here."""
    cache, pid = cache_dir(), os.getpid()
    with _OWN_LOCK:
        folder = _OWN.get((pid, cache))
        if folder is None or not folder.is_dir() or folder.is_symlink():
            cache.mkdir(parents=True, exist_ok=True)
            folder = cache / f"{OWN_PREFIX}{pid}-{secrets.token_hex(4)}"
            folder.mkdir(mode=0o700)   # a new name: never a folder someone else made
            if not _OWN:
                atexit.register(_remove_own)
            _OWN[(pid, cache)] = folder
        return folder


def _remove_own() -> None:
    for (pid, _cache), folder in list(_OWN.items()):
        if pid == os.getpid():
            shutil.rmtree(folder, ignore_errors=True)   # removes links as links


def export_path(text: str, stem: str = "specdec-trace", suffix: str = ".json") -> str:
    """Write an export (a trace's JSON text, a round's sheet) into this process's folder and return its path. Gradio
    serves a file already in its cache without copying it; `sweep_files` deletes it after
    SPECDEC_FILE_MAX_AGE_SECONDS (never before: a visitor can download it until then)."""
    folder = own_dir() / uuid.uuid4().hex
    folder.mkdir()
    path = folder / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except OSError:
        return 0.0


def _is_dir(path: Path) -> bool:
    """A folder, not a link to one."""
    return path.is_dir() and not path.is_symlink()


def _remove(path: Path) -> int:
    """Remove a file, a link (as a link) or an empty folder; its size, 0 if gone, -1 if it failed."""
    try:
        size = path.lstat().st_size
        if _is_dir(path):
            path.rmdir()    # only ever empty folders: never a tree
        else:
            path.unlink()   # a link goes as a link: its target is untouched
    except FileNotFoundError:
        return 0
    except OSError:
        return -1
    return size


class _Tally:
    def __init__(self):
        self.removed = self.bytes = self.failed = 0

    def drop(self, path: Path) -> None:
        size = _remove(path)
        if size < 0:
            self.failed += 1
        else:
            self.removed += 1
            self.bytes += size


_GRADIO_FOLDERS: set[Path] = set()   # folders Gradio made in its cache for this app's files


def sweep_files(max_age: float | None = None, now: float | None = None, gradio_files=()) -> dict:
    """Delete what this process made that is older than `max_age` seconds (default
    SPECDEC_FILE_MAX_AGE_SECONDS): files and links in `own_dir()` and the folders left empty
    there, walked without following links; and the folders Gradio made in its cache for this
    app's files (`gradio_files`, see `app_files`), once empty and old (Gradio's `delete_cache`
    deletes the files). Returns {"removed": n, "bytes": b, "failed": n}."""
    max_age = limits.FILE_MAX_AGE_SECONDS if max_age is None else max_age
    now = time.time() if now is None else now
    tally = _Tally()
    own = own_dir()
    for root, dirs, files in os.walk(own, topdown=False):   # followlinks=False: never leaves the folder
        here = Path(root)
        for name in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            if _age(here / name, now) > max_age:
                tally.drop(here / name)
        if here != own and _age(here, now) > max_age and _is_dir(here) and not any(here.iterdir()):
            tally.drop(here)
    cache = cache_dir()
    for f in gradio_files:
        folder = Path(f).parent
        if folder.parent == cache and folder != own:
            _GRADIO_FOLDERS.add(folder)
    for folder in list(_GRADIO_FOLDERS):
        try:
            if not _is_dir(folder):
                _GRADIO_FOLDERS.discard(folder)
            elif _age(folder, now) > max_age and not any(folder.iterdir()):
                tally.drop(folder)
                _GRADIO_FOLDERS.discard(folder)
        except OSError:
            pass
    return dict(removed=tally.removed, bytes=tally.bytes, failed=tally.failed)


def app_files(demo) -> set[str]:
    """The files Gradio keeps for this app (uploads, returned files): its `delete_cache` deletes
    them; the sweep only removes the folders they leave empty."""
    found: set[str] = set()
    for files in list(getattr(demo, "temp_file_sets", ())):
        found.update(str(f) for f in list(files))
    return found


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
        session = holder.session_data.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)
    values = getattr(session, "config_values", None)
    if isinstance(values, dict):   # what their page showed: freed now, not at the next garbage collection
        values.clear()
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


_BUDGET_LOCK = threading.Lock()


def busy_sessions(demo) -> set[str]:
    """Sessions with a request queued or running (their state is about to change)."""
    queue = getattr(demo, "_queue", None)
    found = set()
    for job in list(getattr(queue, "active_jobs", None) or ()):
        for event in list(job or ()):
            found.add(getattr(event, "session_hash", None))
    for events in list(getattr(queue, "event_queue_per_concurrency_id", {}).values()):
        for event in list(getattr(events, "queue", ()) or ()):
            found.add(getattr(event, "session_hash", None))
    found.discard(None)
    return found


def enforce_budget(demo, protect: str | None = None, limit: int | None = None) -> list[str]:
    """Release the least recently used sessions until all hold at most SPECDEC_SESSION_BYTES
    (`budget`), sparing `protect` (the request being served) and sessions with a request running
    unless nothing else is left; each released visitor is told why at their next action.
    Returns the released sessions' hashes."""
    holder = _holder(demo)
    if holder is None or not hasattr(holder, "session_data"):
        return []
    with _BUDGET_LOCK:
        sizes = budget.SIZER.held(holder)
        last = {h: t.timestamp() for h, t in list(holder.time_last_used.items())}
        victims = budget.over_budget(sizes, last, limit, spare=busy_sessions(demo) | {protect})
        for session_hash in victims:
            had_run = budget.holds_a_run(holder.session_data.get(session_hash))
            drop_session(demo, session_hash)
            budget.SIZER.forget(session_hash)
            if had_run:   # a page that showed nothing of theirs has nothing to be told
                budget.tell(session_hash, budget.released_message())
    if victims:
        device_queue.trim_memory()   # cheap; the sweep's full release (a garbage collection) comes later
    return victims


def sweep(demo=None) -> dict:
    """One full pass: files, idle and closed sessions, orphaned copies, freed memory."""
    out = dict(files=sweep_files(gradio_files=app_files(demo) if demo is not None else ()))
    if demo is not None:
        out.update(idle_sessions=drop_idle_sessions(demo), orphans=prune_sessions(demo))
    device_queue.release_memory()
    return out


class Housekeeper(threading.Thread):
    """The daemon thread `start` runs: prune and keep the byte budget every `prune_every` s, sweep
    every `every` s."""

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
                enforce_budget(self.demo)
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
