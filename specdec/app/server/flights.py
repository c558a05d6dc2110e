"""One decode per distinct run: finished runs kept in a bounded cache, and requests that ask for a
run already decoding join it (a "flight") instead of decoding it again.

A run is deterministic for its prompt, settings and seed and the pair's weights (the pair's
manifest records their hashes), so those are its `key`. A teacher shares a link, thirty students
open it at once: the first request starts a flight, the other twenty-nine ride along and see the
same rounds, and the finished run goes into the cache, where a later visitor finds it at once
(the page says so). Only whole runs are kept: a stopped run, a run past the time limit or a
failure is not.

Each flight decodes in a thread of its own (the decode itself in a worker process when one is
free: `workers`) and writes its messages (`runs.Waiting`, `runs.RoundDone`, then `runs.RunDone`
or `runs.RunFailed`) into its log; each rider reads the log at its own pace (`Flight.follow`),
only the latest round when several came since it last looked, and at most a few times a second
(`EVERY`): the page draws what the rider sends, and a page redrawn after every round of a fast
decoder falls seconds behind it. With more than `CROWD` riders on the server, each one's updates
come less often, in proportion (`crowd`).

A rider's Stop ends its own request with what was decoded so far; the flight stops (at its next
forward) when no rider is left. The flight's stop carries the time limit (SPECDEC_REQUEST_SECONDS).

The decodes themselves wait in one line (`LINE`): SPECDEC_DECODE_CONCURRENCY at once, first come
first served, and a waiting rider is told their place and an estimate from the recent decodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from pathlib import Path

from ...core.settings import RunSettings
from ...decoding.loop import STOPPED, TIME_LIMIT
from ...models import realmodel
from ...models.pair import PRESETS
from ...trace.spine import Generation
from . import budget, limits
from .device_queue import LeftTheLine

__all__ = ["Flight", "Line", "LINE", "RunCache", "CACHE", "CROWD", "EVERY", "crowd", "pace", "key_of", "flight_for",
           "land", "riding", "stats", "stopped", "left_the_line"]

EVERY = 0.3   # seconds between two streamed updates of a rider (the first round and the end go at once)
# Riders the server streams to at that rate. Past them, every rider's interval grows with the crowd
# (30 riders: 2.25 s), places in the line included: each update is a whole Gradio response per
# rider, and a crowd's updates took CPU its decodes needed (py-spy, 30 distinct runs: the streamed
# views 8 % and the HTTP handling 6 % of the server's samples; quiet A/B, the last of 30 distinct
# runs 23.7/24.6 -> 22.2/22.4 s).
CROWD = 4


# ---------------------------------------------------------------- what makes a run the same run

def _manifest_digest(model: str | None) -> str:
    """The hash of a local model folder's manifest (it records its weights' hashes); a hub name as
    it is; "" for no model (a real model's pair has no draft model)."""
    if model is None:
        return ""
    path = Path(model)
    for candidate in (path / "manifest.json", path.parent / "manifest.json"):
        if candidate.is_file():
            return hashlib.sha256(candidate.read_bytes()).hexdigest()
    return model


def key_of(prompt: str, preset: str, settings: RunSettings) -> tuple:
    """What a run is determined by: the prompt, the pair (its weights by their manifest), the settings and seed."""
    p = PRESETS[preset]
    target = str(realmodel.folder_of(realmodel.SOURCES[p.source])) if p.source else p.target   # the user's cache
    return (prompt, preset, _manifest_digest(target), _manifest_digest(p.draft), repr(settings))


# ---------------------------------------------------------------- the cache of finished runs

class RunCache:
    """Finished runs by key, least recently used first out, at most `max_bytes` (measured by `budget.size_of`)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._runs: OrderedDict[tuple, tuple[Generation, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0

    def get(self, key: tuple) -> Generation | None:
        with self._lock:
            hit = self._runs.get(key)
            if hit is None:
                return None
            self._runs.move_to_end(key)
            return hit[0]

    def put(self, key: tuple, gen: Generation) -> None:
        size = budget.size_of(gen)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._runs.pop(key, None)
            self.bytes -= old[1] if old else 0
            self._runs[key] = (gen, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._runs.popitem(last=False)
                self.bytes -= dropped

    def __len__(self) -> int:
        return len(self._runs)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
            self.bytes = 0


CACHE = RunCache(limits.RUN_CACHE_BYTES)


# ---------------------------------------------------------------- the line of decodes

class Line:
    """At most `slots` decodes at once, first come first served; a waiting one is told how many
    are ahead (decoding or waiting) and about how long they take (the mean of recent decodes)."""

    def __init__(self, slots: int):
        self.slots = slots
        self._cond = threading.Condition()
        self._waiting: deque = deque()
        self._running = 0
        self._recent: deque[float] = deque(maxlen=20)

    def estimate(self, ahead: int) -> float | None:
        """Seconds until a run with `ahead` runs before it starts, from the recent decodes (None before any)."""
        if not self._recent:
            return None
        mean = sum(self._recent) / len(self._recent)
        return mean * max(1, ahead - self.slots + 1) / self.slots

    @contextmanager
    def slot(self, stop=None, on_wait=None, poll: float = 0.2):
        """Hold one of the slots for the `with` block; `on_wait(ahead, seconds or None)` when the place changes."""
        ticket, last = object(), None
        with self._cond:
            self._waiting.append(ticket)
        left = _pause(stop)   # waiting is not the run's time
        try:
            while True:
                with self._cond:
                    index = self._waiting.index(ticket)
                    if index == 0 and self._running < self.slots:
                        self._waiting.popleft()
                        self._running += 1
                        break
                    if stop is not None and stop.is_set():
                        raise left_the_line()
                    ahead = self._running + index
                    if ahead == last or on_wait is None:
                        self._cond.wait(poll)
                        continue
                last = ahead
                on_wait(ahead, self.estimate(ahead))
        except BaseException:
            with self._cond:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                self._cond.notify_all()
            raise
        finally:
            _resume(stop, left)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._recent.append(time.perf_counter() - t0)
                self._cond.notify_all()


def _pause(stop) -> float | None:
    """Take a stop's deadline off (its seconds left), while a run waits or rides along."""
    deadline = getattr(stop, "deadline", None)
    if deadline is None:
        return None
    stop.deadline = None
    return deadline - time.monotonic()


def _resume(stop, left: float | None) -> None:
    if left is not None:
        stop.deadline = time.monotonic() + left


def left_the_line() -> LeftTheLine:
    return LeftTheLine("Stopped while waiting for a decoder: nothing was decoded")


LINE = Line(limits.DECODE_CONCURRENCY)


# ---------------------------------------------------------------- a flight: one decode, many riders

class Flight:
    """One decoding and the requests that follow it (see the module docstring)."""

    def __init__(self, key: tuple, stop):
        self.key, self.stop = key, stop
        self._cond = threading.Condition()
        self._progress = None      # the latest Waiting or RoundDone
        self._version = 0          # how many progress messages came so far
        self.end = None            # RunDone or RunFailed, once the flight is over
        self.riders = 0

    @property
    def ended(self) -> bool:
        return self.end is not None

    def put(self, message, end: bool = False) -> None:
        with self._cond:
            if end:
                self.end = message
            else:
                self._progress, self._version = message, self._version + 1
            self._cond.notify_all()

    def board(self) -> None:
        with self._cond:
            self.riders += 1

    def leave(self) -> bool:
        """One rider less; True when it was the last (then the flight stops at its next forward)."""
        with self._cond:
            self.riders -= 1
            last = self.riders <= 0 and self.end is None
        if last:
            self.stop.set()
        return last

    def _next(self, seen: int, due_in: float):
        """(end, latest progress, its version), after waiting (at most 0.1 s, to look at the rider's
        stop) for something new, or for the time to show the latest progress when it is not due yet."""
        with self._cond:
            if self.end is None and (self._version == seen or due_in > 0):
                self._cond.wait(0.1 if self._version == seen else min(0.1, due_in))
            return self.end, self._progress, self._version

    def follow(self, stop, leave_with, every: float = EVERY):
        """The messages for one rider: progress at most every `every` seconds (the first at once),
        then the end. When the rider's `stop` is set: the flight's end if it was the last rider,
        else `leave_with(latest progress, stop)` (the run so far, stopped; or a message when
        nothing was decoded yet). A rider gone (its generator closed) leaves."""
        seen, shown_at, riding = 0, None, True
        listeners = getattr(stop, "listeners", None)   # a request's stop (`runs.RequestStop`) wakes us when set
        if listeners is not None:
            listeners.append(self._wake)
        try:
            while True:
                gap = pace(every, crowd())
                due_in = 0.0 if shown_at is None else shown_at + gap - time.monotonic()
                end, progress, version = self._next(seen, due_in)
                if end is not None:
                    yield end
                    return
                if riding and stop.is_set():
                    riding = False
                    if not self.leave():   # the others ride on: this rider ends with what there is
                        yield leave_with(progress, stop)
                        return
                    continue
                fresh = version != seen
                if fresh and (shown_at is None or time.monotonic() - shown_at >= gap
                              or (gap <= every and not _is_round(progress))):   # a place: at once, uncrowded
                    seen, shown_at = version, time.monotonic()
                    yield progress
        finally:
            if listeners is not None and self._wake in listeners:
                listeners.remove(self._wake)
            if riding:
                self.leave()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


def _is_round(message) -> bool:
    """A round's progress (it carries the run so far), not a place in the line."""
    return getattr(message, "generation", None) is not None


def stopped(gen: Generation, stop) -> Generation:
    """A rider's copy of the run so far, marked as stopped (the flight goes on for the others)."""
    snap = dataclasses.replace(gen)
    snap.stats = dataclasses.replace(gen.stats, stopped=getattr(stop, "reason", None) or STOPPED)
    return snap


_FLIGHTS: dict[tuple, Flight] = {}
_FLIGHTS_LOCK = threading.Lock()
stats = {"decodes": 0, "joined": 0, "cached": 0}   # since the process started (tests, the load script)


def pace(every: float, riders: int) -> float:
    """Seconds between two updates of a rider when `riders` follow flights on this server."""
    return every * max(1.0, riders / CROWD)


def crowd() -> int:
    """Riders following a flight now, all flights together (queued ones included)."""
    with _FLIGHTS_LOCK:
        return sum(f.riders for f in _FLIGHTS.values())


def flight_for(key: tuple, start, make_stop) -> tuple[Flight, bool]:
    """The flight decoding `key` (joined), or a new one, with the stop `make_stop()` (the run's time
    limit), that `start(flight)` sets going; (flight, joined)."""
    with _FLIGHTS_LOCK:
        flight = _FLIGHTS.get(key)
        if flight is not None and not flight.ended and not flight.stop.is_set():
            flight.board()
            stats["joined"] += 1
            return flight, True
        flight = Flight(key, make_stop())
        flight.board()
        _FLIGHTS[key] = flight
        stats["decodes"] += 1
    start(flight)
    return flight, False


def land(flight: Flight, end, gen: Generation | None = None) -> None:
    """The flight ended with `end` (RunDone, RunFailed): a whole run goes into the cache first, so a
    request that comes after finds it there; then the riders get the end."""
    if gen is not None and gen.stats.stopped not in (STOPPED, TIME_LIMIT):
        CACHE.put(flight.key, gen)
    flight.put(end, end=True)
    with _FLIGHTS_LOCK:
        if _FLIGHTS.get(flight.key) is flight:
            del _FLIGHTS[flight.key]


@contextmanager
def riding(stop):
    """A rider's own time limit is paused while it follows a flight: the flight's stop carries it."""
    left = _pause(stop)
    try:
        yield
    finally:
        _resume(stop, left)
