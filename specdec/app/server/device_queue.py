"""Runs on one device take turns: one line per device, first come first served, and a visitor who
waits is told their place ("waiting for the GPU: 2 runs ahead of you").

On a GPU the forward engine captures CUDA graphs per pair and width and replays them; two
requests must never capture or replay on one device at once, and a long run must not make
another visitor wait without a word. So every decoding the app does (`runs`) takes a `turn` on
its pair's device: the streamed run reports its place through `on_wait` while it waits, and the
request's time limit is paused meanwhile (it bounds the run's own work, not its wait). A visitor's
Stop (or a closed page) while waiting leaves the line at once, without a forward.

On the CPU, turns are off by default (SPECDEC_DECODE_CONCURRENCY already bounds the runs at once,
and CPU runs share nothing that breaks); SPECDEC_SERIALISE_DEVICE=1 turns them on for every
device, so the same path is tested without a GPU. A turn is reentrant within a thread.

`release_memory` empties the CUDA cache only while no run holds the device (emptying it during a
graph capture would break the capture); the CPU side (cycles, glibc's free pages) always runs.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext

import torch

from ...models import pair as models
from . import limits

__all__ = ["DeviceQueue", "LeftTheLine", "QUEUE", "device_key", "serialised", "turn", "waiting_words",
           "release_memory", "trim_memory"]


class LeftTheLine(ValueError):
    """A run stopped (a visitor's Stop, a closed page) while it waited for its turn."""


def device_key(device) -> str:
    """One name per device: 'cuda' and 'cuda:0' are the same GPU."""
    key = str(device or "cpu")
    return "cuda:0" if key == "cuda" else key


def serialised(device) -> bool:
    """Whether runs on this device take turns: every CUDA device; the CPU with SPECDEC_SERIALISE_DEVICE=1."""
    return bool(limits.SERIALISE_DEVICE) or device_key(device).startswith("cuda")


def waiting_words(device, ahead: int) -> str:
    """What a waiting visitor reads in the status line."""
    where = "the GPU" if device_key(device).startswith("cuda") else f"the {device_key(device).upper()}"
    runs = "1 run" if ahead == 1 else f"{ahead} runs"
    return f"Waiting for {where}: {runs} ahead of you…"


class DeviceQueue:
    """The lines, one per device (see the module docstring)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._lines: dict[str, deque] = {}
        self._owner: dict[str, list] = {}      # device -> [thread id, depth] of the run holding it
        self.served = 0                        # turns given (for tests and the load script)

    def ahead(self, device) -> int:
        """How many runs hold or wait for this device now."""
        with self._cond:
            return len(self._lines.get(device_key(device), ()))

    @contextmanager
    def turn(self, device, stop=None, on_wait=None, poll: float = 0.2):
        """Hold the device for the `with` block, after the runs ahead. `on_wait(ahead)` is called
        each time the number of runs ahead changes; `stop` (a StopSignal) set while waiting raises
        LeftTheLine; its deadline is paused while it waits."""
        key, me = device_key(device), threading.get_ident()
        with self._cond:
            owner = self._owner.get(key)
            if owner is not None and owner[0] == me:   # this thread holds it already
                owner[1] += 1
                ticket = None
            else:
                ticket = object()
                self._lines.setdefault(key, deque()).append(ticket)
        if ticket is None:
            try:
                yield
            finally:
                with self._cond:
                    self._owner[key][1] -= 1
            return
        try:
            self._wait(key, ticket, stop, on_wait, poll)
            yield
        finally:
            with self._cond:
                line = self._lines.get(key)
                if line is not None and ticket in line:
                    line.remove(ticket)
                    if not line:
                        del self._lines[key]
                owner = self._owner.get(key)
                if owner is not None and owner[0] == me:
                    del self._owner[key]
                self._cond.notify_all()

    def _wait(self, key: str, ticket, stop, on_wait, poll: float) -> None:
        deadline = getattr(stop, "deadline", None)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None:
            stop.deadline = None          # waiting is not the run's time
        last = None
        try:
            while True:
                with self._cond:
                    line = self._lines[key]
                    if line[0] is ticket and key not in self._owner:
                        self._owner[key] = [threading.get_ident(), 1]
                        self.served += 1
                        return
                    ahead = line.index(ticket)
                    if stop is not None and stop.is_set():
                        where = "the GPU" if key.startswith("cuda") else f"the {key.upper()}"
                        raise LeftTheLine(f"Stopped while waiting for {where}: nothing was decoded")
                    if ahead == last or on_wait is None:
                        self._cond.wait(poll)
                        continue
                last = ahead
                on_wait(ahead)   # outside the lock: the line goes on meanwhile
        finally:
            if left is not None:
                stop.deadline = time.monotonic() + left

    @contextmanager
    def turn_if_free(self, device):
        """Hold the device if no run holds or waits for it (or this thread holds it); yields
        whether it does. Never waits."""
        key, me = device_key(device), threading.get_ident()
        with self._cond:
            owner = self._owner.get(key)
            free = not self._lines.get(key) or (owner is not None and owner[0] == me)
        if not free:
            yield False
            return
        with self.turn(key):
            yield True


QUEUE = DeviceQueue()


def turn(device, stop=None, on_wait=None):
    """A turn on `device` in the app's line when runs there take turns (`serialised`); else nothing."""
    return QUEUE.turn(device, stop, on_wait) if serialised(device) else nullcontext()


def release_memory() -> None:
    """`models.release_memory`, with the CUDA cache emptied only while no run holds the GPU."""
    if not torch.cuda.is_available():
        models.release_memory()
        return
    with QUEUE.turn_if_free("cuda") as free:
        if free:
            models.release_memory()
        else:
            gc.collect()   # the CPU side; the GPU's cache waits for the next sweep


def freeze_start_up() -> None:
    """Collect once, then leave everything alive now (modules, Gradio's app, the loaded pair) out of
    every later garbage collection (`gc.freeze`). Why: a started server tracks about 530,000
    objects and a decode worker 386,000; a full collection walks them all and stops the page's
    events for 250 ms, or a worker's decode for 200 ms (about once in six 200-token page runs here).
    Frozen, one takes 1-4 ms. What is frozen is never collected: called once, after start-up's
    loading; pairs loaded later stay collectable."""
    gc.collect()
    gc.freeze()


def trim_memory() -> None:
    """Ask glibc to return free heap pages to the system (milliseconds; no garbage collection,
    which walks every object the server tracks that is not frozen). Nothing elsewhere (macOS, musl)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
