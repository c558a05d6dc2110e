"""What a pair's forwards cost on the machine that runs it: measured here, not read from elsewhere.

The γ a run starts with and the speed the page predicts follow from two costs: a draft step and a
verify over γ + 1 tokens, both in target steps. They depend on the processor, the precision and
the threads (a verify over 2 tokens cost 1.6 steps in float32 on one CPU and 1.08 on another), so
a profile committed from another machine can mislead. `profile_here` measures them once on this
machine, in the pair's precision and the threads a run takes now (a few seconds: a step and every
verify width, then a short speculative run for the drafter's cost per draft), keeps the profile in
memory and in the user's cache (`here.json` beside the converted models), and reads it back while
the machine, torch, the precision and the thread count are the same and it is under a week old.
`drifted` drops it when a run's own forwards no longer match it, so the next run measures again.
"""

from __future__ import annotations

import hashlib
import json
import platform
import statistics
import threading
import time
from pathlib import Path

import torch

from ..core.settings import RunSettings
from ..core.threads import run_threads, threads_for_model
from ..decoding.loop import speculative_generate
from ..models import realmodel
from .measure import CostMeter, prompts_for
from .speed import CostProfile, profile_from_dict

__all__ = ["WIDTHS", "FILE", "profile_here", "stored", "drifted", "machine_key", "costs_by_width"]

WIDTHS = tuple(range(1, 8))   # a step, and verifies for γ 1..6
FILE = "here.json"
MAX_AGE_DAYS = 7
DRIFT = 0.30                   # a run's step this far from the profile's (either way) drops the profile
STORE: Path | None = None     # where the profiles are kept, when not the user's cache (the tests' own folder)
_memory: dict[tuple, dict] = {}
_lock = threading.Lock()


def machine_key() -> str:
    """This machine and its torch, as a short fingerprint: a profile is read back only here."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return hashlib.sha256(f"{cpu}|{platform.node()}|{torch.__version__}".encode()).hexdigest()[:16]


def _key(pair_key: str, drafter: str, device: str, dtype: str, threads: int) -> tuple:
    return (pair_key, drafter, device, dtype, int(threads), machine_key())


def _path(root=None) -> Path:
    return STORE if STORE is not None and root is None else realmodel.cache_root(root) / FILE


def _read(root=None) -> list[dict]:
    try:
        rows = json.loads(_path(root).read_text(encoding="utf-8"))
        return rows if isinstance(rows, list) else []
    except (OSError, ValueError):
        return []


def _write(rows: list[dict], root=None) -> None:
    path = _path(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass   # a read-only cache: the profile stays in memory


def _fresh(row: dict) -> bool:
    return time.time() - float(row.get("measured_at", 0)) < MAX_AGE_DAYS * 86400


def stored(pair_key: str, drafter: str, device: str, dtype: str, threads: int | None = None,
           root=None) -> CostProfile | None:
    """The profile measured here for this pair, drafter, device kind and precision (at `threads`,
    or the most threads measured when None), from memory or the user's cache; None where none is."""
    with _lock:
        rows = list(_memory.values()) + [r for r in _read(root) if r.get("machine") == machine_key()]
    want = (pair_key, drafter, device, dtype)
    rows = [r for r in rows if (r.get("pair"), r.get("drafter"), r.get("device"), r.get("dtype")) == want
            and _fresh(r) and (threads is None or r.get("threads") == threads)]
    if not rows:
        return None
    try:
        return profile_from_dict(max(rows, key=lambda r: (r.get("threads", 0), r.get("measured_at", 0))))
    except ValueError:
        return None


def _draft_ms(pair, drafter: str, prompt: str) -> float:
    """The drafter's time per draft, from a short speculative run (its forwards and its sampling)."""
    gen = speculative_generate(pair, prompt, RunSettings(gamma=4, max_new_tokens=24, drafter=drafter), trace=False)
    return 1000 * gen.stats.draft_seconds / max(gen.stats.draft_forwards, 1)


def costs_by_width(times: dict[int, list[float]]) -> dict[int, float]:
    """Each width's cost in ms from its timed forwards (`times[1]`: the one-token steps): the median
    step, the level a run meets now, times the width's ratio to a step between their fastest forwards.
    Another process on the cores only adds time to a forward it preempts, and not to all alike: with
    two busy processes beside a one-thread run, the medians of 5 forwards a width came out in no order
    (a verify over 6 tokens at 0.79 steps). The fastest forwards are the least disturbed."""
    step = statistics.median(times[1])
    fastest_step = min(times[1])
    return {w: step * min(ts) / fastest_step for w, ts in times.items()}


def measure(pair, pair_key: str, drafter: str, threads: int, steps: int = 7) -> dict:
    """The profile's JSON object, measured now with `threads` torch threads."""
    prompt = prompts_for(pair)[0]
    with run_threads(threads):
        meter = CostMeter(pair, pair.encode(prompt)[1], list(WIDTHS))
        for i in range(2 + steps):   # 2 untimed: the first fills the caches with the prompt
            meter.step(timed=i >= 2)
        draft_ms = _draft_ms(pair, drafter, prompt)
    verify_ms = costs_by_width({w: meter.times[w] for w in WIDTHS})
    d = pair.describe()
    count = f"{threads} torch thread{'s' if threads > 1 else ''}"
    where = f"this machine ({platform.machine()}, {count})"
    return {"name": f"here: {d['target']}, {drafter} drafter, {d['dtype']}, {count}",
            "where": where, "when": time.strftime("%Y-%m-%d %H:%M"), "device": d["device"], "dtype": d["dtype"],
            "engine": d["engine"], "target_step_ms": round(verify_ms[1], 4),
            "draft_step_ms": round(draft_ms, 4),
            "verify_ms_by_width": {str(w): round(ms, 4) for w, ms in verify_ms.items()},
            "source": f"measured on this machine at load ({steps} timed forwards a width: the median step,"
                      " each width's ratio to it from their fastest)",
            "pair": pair_key, "drafter": drafter, "threads": threads, "machine": machine_key(),
            "measured_at": time.time()}


def profile_here(pair, pair_key: str, drafter: str, root=None) -> CostProfile:
    """This pair and drafter's costs here, at the threads a run would take now: stored, else measured."""
    device = str(pair.device).split(":")[0]
    dtype = str(pair.dtype).replace("torch.", "")
    threads = threads_for_model(pair.target) if device == "cpu" else 1
    found = stored(pair_key, drafter, device, dtype, threads, root)
    if found is not None:
        return found
    row = measure(pair, pair_key, drafter, threads)
    with _lock:
        _memory[_key(pair_key, drafter, device, dtype, threads)] = row
        rows = [r for r in _read(root) if not (r.get("machine") == row["machine"] and all(
            r.get(k) == row[k] for k in ("pair", "drafter", "device", "dtype", "threads")))]
        _write(rows + [row], root)
    return profile_from_dict(row)


def drifted(profile: CostProfile, step_ms: float, root=None) -> bool:
    """Whether a run's measured target step (ms) is more than `DRIFT` away from `profile`'s; if so the
    profile is dropped (memory and cache), and the next `profile_here` measures again."""
    if profile.target_step_ms <= 0 or abs(step_ms / profile.target_step_ms - 1) <= DRIFT:
        return False
    with _lock:
        for key, row in list(_memory.items()):
            if row["name"] == profile.name:
                del _memory[key]
        rows = _read(root)
        kept = [r for r in rows if not (r.get("name") == profile.name and r.get("machine") == machine_key())]
        if len(kept) != len(rows):
            _write(kept, root)
    return True

