"""What a pair's forwards cost on the machine that runs it: measured here, not read from elsewhere.

The γ a run starts with and the speed the page predicts follow from two costs: a draft step and a
verify over γ + 1 tokens, both in target steps. They depend on the processor, the precision and
the threads (a verify over 2 tokens cost 1.6 steps in float32 on one CPU and 1.08 on another), so
a profile committed from another machine can mislead. `profile_here` measures them once on this
machine, in the pair's precision and the threads a run takes now (several seconds: short runs of
the target alone and of speculation at each γ, whose whole loop, sampling and bookkeeping with the
forwards, is what a compared run measures), keeps the profile in memory and in the user's cache
(`here.json` beside the converted models), and reads it back while the machine, torch, the
precision and the thread count are the same and it is under a week old. `drifted` drops it when a
compared run's target steps no longer match it, so the next run measures again.
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
from ..decoding.loop import autoregressive_generate, speculative_generate
from ..models import realmodel
from ..models.pair import pair_sampling
from .measure import prompts_for
from .speed import CostProfile, profile_from_dict

__all__ = ["WIDTHS", "FILE", "profile_here", "stored", "drifted", "machine_key", "loop_costs"]

WIDTHS = tuple(range(1, 8))   # a step, and verifies for γ 1..6
FILE = "here.json"
MAX_AGE_DAYS = 7
DRIFT = 0.15                   # a compared run's round this far from the profile's (either way) drops it
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


def loop_costs(steps: list[float], rounds: dict[int, list[float]], drafts: list[float]) -> tuple[float, float, dict]:
    """(target step, draft step, {width: verify}) in ms, from timed runs: `steps`, the target alone's
    ms a token; `rounds[γ]`, speculation's ms a round at γ, one for each full round; `drafts`, the
    runs' ms a draft. The costs of a round's whole loop (its forwards, sampling, bookkeeping and
    trace), as a compared run's own "whole loop" costs are (`speed.run_point`): γ c + v is a round
    at γ, in target steps. Medians: another process on the cores adds time to the rounds it
    preempts and not to all alike, and many rounds a γ outvote a few preempted ones."""
    step, draft = statistics.median(steps), statistics.median(drafts)
    return step, draft, {1: step, **{g + 1: statistics.median(rounds[g]) - g * draft for g in sorted(rounds)}}


class _StepClock:
    """Passed to a run of the target alone as its `stop`: the decoder checks it before every forward,
    so the times it was checked at split the run into its steps (forward, probabilities, the draw);
    the first, which also reads the prompt, is left out."""

    reason = None

    def __init__(self):
        self.at: list[float] = []

    def is_set(self) -> bool:
        self.at.append(time.perf_counter())
        return False

    def steps_ms(self) -> list[float]:
        return [1000 * (b - a) for a, b in zip(self.at[1:], self.at[2:])]


def _full_rounds(gen) -> tuple[list[float], float]:
    """A traced speculative run's ms for each full round past the first (which also reads the prompt;
    a round cut short by the run's end costs less), each with its share of the work between rounds;
    and its ms a draft."""
    rounds = gen.rounds[1:]
    full = [r for r in rounds if r.gamma == gen.settings.gamma]
    between = gen.stats.wall_seconds - sum(r.draft_seconds + r.verify_seconds for r in gen.rounds)
    share = between / len(gen.rounds)
    drafted = sum(r.gamma for r in rounds)
    return ([1000 * (r.draft_seconds + r.verify_seconds + share) for r in full],
            1000 * sum(r.draft_seconds for r in rounds) / max(drafted, 1))


def measure(pair, pair_key: str, drafter: str, threads: int, tokens: int = 16, passes: int = 2,
            alone_tokens: int = 8) -> dict:
    """The profile's JSON object, measured now with `threads` torch threads: a traced speculative run
    of `tokens` tokens at each γ the widths cover, each followed by the target alone for
    `alone_tokens`, at the pair's own sampling, in `passes` passes (the second in reverse order)."""
    prompt = prompts_for(pair)[-1]   # a long answer: a run that ends at its end token has fewer full rounds
    settings = RunSettings(max_new_tokens=tokens, sampling=pair_sampling(pair_key), drafter=drafter)
    gammas = [w - 1 for w in WIDTHS if w > 1]
    steps, rounds, drafts = [], {g: [] for g in gammas}, []
    with run_threads(threads):
        speculative_generate(pair, prompt, settings.with_(gamma=gammas[-1]), trace=False)   # untimed: warms up
        for k in range(passes):
            for g in (gammas if k % 2 == 0 else gammas[::-1]):
                each, per_draft = _full_rounds(speculative_generate(pair, prompt, settings.with_(gamma=g)))
                rounds[g] += each
                drafts.append(per_draft)
                clock = _StepClock()   # and steps of the target alone beside each, timed in the same minute
                autoregressive_generate(pair, prompt, settings.with_(max_new_tokens=alone_tokens), stop=clock)
                steps += clock.steps_ms()
    step, draft, verify_ms = loop_costs(steps, {g: ms for g, ms in rounds.items() if ms}, drafts)
    d = pair.describe()
    count = f"{threads} torch thread{'s' if threads > 1 else ''}"
    where = f"this machine ({platform.machine()}, {count})"
    return {"name": f"here: {d['target']}, {drafter} drafter, {d['dtype']}, {count}",
            "where": where, "when": time.strftime("%Y-%m-%d %H:%M"), "device": d["device"], "dtype": d["dtype"],
            "engine": d["engine"], "target_step_ms": round(step, 4), "draft_step_ms": round(draft, 4),
            "verify_ms_by_width": {str(w): round(ms, 4) for w, ms in verify_ms.items()},
            "source": f"measured on this machine at load: runs of {tokens} tokens at each γ and of the target alone "
                      f"beside them, at its own sampling, {passes} passes, medians; a round's whole loop, as a "
                      "compared run's",
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


def drifted(profile: CostProfile, gamma: int, round_steps: float, root=None) -> bool:
    """Whether a compared run's round at `gamma` (its whole loop in target steps, γ c + v, as
    `speed.run_point` counts it) is more than `DRIFT` away from what `profile` says; if so the profile
    is dropped (memory and cache), and the next `profile_here` measures again. In target steps, not
    ms: a browser drawing on the same cores slows the run and the target alone alike, and the
    prediction reads only the ratio."""
    v = profile.verify(gamma)
    expected = gamma * profile.c + v if v is not None else 0.0
    if expected <= 0 or abs(round_steps / expected - 1) <= DRIFT:
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
