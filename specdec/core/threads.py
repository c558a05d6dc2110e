"""How many CPU threads a run's forwards use: one policy for the page, the CLI and the API.

A second OpenMP thread helps a forward only while it has a core to itself: torch's threads wait for
each other at the end of every operation, spinning, so on a busy core one late thread holds the
whole forward (two threads on two cores with two other busy processes beside them made the real
model's steps many times slower than one thread did). And a small model's operations are too
short to split at all. So:

- a count fixed by the user (`fix`: the CLI's `--threads`, the app's SPECDEC_THREADS) is kept;
- a small target (under `SMALL_PARAMS` parameters) runs on one thread;
- any other run takes the cores that are free when it starts (`free_cores`): the cores this process
  may use, less the threads already running on the machine. Concurrent runs therefore share the
  cores instead of oversubscribing them, and a lone run on an idle machine uses them all.

`run_threads(n)` sets the count for the calling thread only (OpenMP's own setting), so a server's
concurrent runs each keep their own; runs inside such a block keep its count (a comparison's
contenders run alike).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from contextlib import contextmanager

import torch

__all__ = ["SMALL_PARAMS", "fix", "fixed", "usable_cores", "free_cores", "threads_for", "threads_for_model",
           "limit_this_thread", "run_threads"]

SMALL_PARAMS = 50_000_000   # below this a target's forward is mostly per-operation overhead: one thread
_fixed: int | None = None
_held = threading.local()   # .count: the count a `run_threads` block of this thread holds


def fix(threads: int | None) -> None:
    """Every later run uses `threads` (None: the policy above again)."""
    global _fixed
    _fixed = None if threads is None else max(1, int(threads))


def fixed() -> int | None:
    return _fixed


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, within a container's CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]   # cgroup v2: "max 100000" or "200000 100000"
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _running() -> int | None:
    """Threads running or ready to run on the machine now (Linux's /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def free_cores(samples: int = 4, gap: float = 0.004) -> int:
    """The usable cores not already busy, at least 1. The least of a few looks a few ms apart, so a
    thread that is only finishing its spin after an operation does not count as busy."""
    cores = usable_cores()
    looks = []
    for _ in range(samples):
        looks.append(_running())
        time.sleep(gap)
    if None in looks:
        return cores
    others = max(0, min(looks) - 1)   # the calling thread is running too
    return max(1, cores - others)


def threads_for(params: int) -> int:
    """The torch threads a run of a target with `params` parameters uses now (the policy above)."""
    if _fixed is not None:
        return _fixed
    if getattr(_held, "count", None):   # inside a block that chose already (a comparison: both sides alike)
        return _held.count
    if params < SMALL_PARAMS:
        return 1
    return free_cores()


def threads_for_model(model) -> int:
    """`threads_for` a run of `model` (a torch module: its parameters counted)."""
    return threads_for(sum(p.numel() for p in model.parameters()))


def _find_omp_set_num_threads():
    """OpenMP's `omp_set_num_threads` from the runtime torch loaded, or None (no OpenMP build, or
    a platform where the process's symbols cannot be searched)."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        fn = ctypes.CDLL(None).omp_set_num_threads
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return fn


_OMP_SET_NUM_THREADS = _find_omp_set_num_threads()


def limit_this_thread(threads: int) -> None:
    """Give torch's intra-op work `threads` OpenMP threads in the CALLING thread only.

    Not `torch.set_num_threads`: besides the caller's OpenMP setting it stores a process-wide
    count that every thread takes on its first torch call (after one thread set 1, a thread started
    even after that one had ended reported 1). From a request handler that would change every later
    request's count. OpenMP's own `omp_set_num_threads` changes only the calling thread's setting.
    Where it cannot be found the thread keeps the process's count.
    """
    torch.get_num_threads()   # torch sets up this thread on its first call: let it, then override
    if _OMP_SET_NUM_THREADS is not None:
        _OMP_SET_NUM_THREADS(int(threads))


@contextmanager
def run_threads(threads: int):
    """The calling thread computes with `threads` torch threads inside the block, then as before."""
    before, held = torch.get_num_threads(), getattr(_held, "count", None)
    limit_this_thread(threads)
    _held.count = threads
    try:
        yield threads
    finally:
        _held.count = held
        limit_this_thread(before)
