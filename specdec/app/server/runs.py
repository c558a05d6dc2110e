"""Every decoding the app does, each borrowing a GPU on a Hugging Face ZeroGPU Space (`gpu`), and
each taking its turn on its pair's device (`device_queue`: on a GPU, runs never overlap).

The streamed run decodes in a worker thread of its `flights.Flight` (shared by every request for
the same run; a finished run comes from the cache) and hands its progress to the page's generator
as named messages (`Waiting` for its turn, `RoundDone`, `RunDone`, `RunFailed`); the page gets the
latest round a few times a second. Every decode waits in one line (`flights.LINE`). The unstreamed runs
(the timed comparison, the side-by-side re-runs) tell a waiting visitor their place in a notice.
Every run takes a `StopSignal`: the request's time limit (SPECDEC_REQUEST_SECONDS, paused while
the run waits for its turn) and a visitor's Stop (a closed page, a cancelled request) act between
forwards, and the target-alone baseline stops the same way.
"""

from __future__ import annotations

import contextvars
import copy
import queue
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace

import gradio as gr

from ...core.sampling import Rule
from ...core.settings import RunSettings
from ...decoding.loop import STOPPED, TIME_LIMIT, StopSignal, autoregressive_generate, speculative_generate
from ...drafting.drafters import drafters_for
from ...explain import calibrate
from ...explain.measure import Repeats, timed_repeats
from ...explain.speed import run_point
from ...trace.spine import Generation
from . import device_queue, flights, limits, workers
from .api import DEFAULT_PROMPT
from .pairs import get_pair, ready

try:   # Hugging Face ZeroGPU: borrow a GPU for the decoding call only
    import spaces

    gpu = spaces.GPU
except Exception:   # not on a Space (or no `spaces` package): a no-op decorator
    def gpu(fn=None, **_kw):
        return fn if fn is not None else (lambda f: f)


class RequestStop(StopSignal):
    """A request's stop that wakes whoever listens when it is set (a rider of a flight waiting for
    its next message leaves at once, and the decode stops at its next forward, not a poll later)."""

    def __init__(self, seconds: float | None = None):
        super().__init__(seconds)
        self.listeners: list = []

    def set(self, reason: str = STOPPED) -> None:
        super().set(reason)
        for wake in list(self.listeners):
            wake()


def request_stop() -> RequestStop:
    """A new request's stop: set by a visitor's Stop, and by itself at the time limit."""
    return RequestStop(seconds=limits.REQUEST_SECONDS)


# ---------------------------------------------------------------- messages from the decoding thread

@dataclass(frozen=True)
class Waiting:
    ahead: int                # runs decoding or waiting before this one
    device: str
    seconds: float | None = None   # about how long until its turn (recent decodes), if known

    @property
    def words(self) -> str:
        words = device_queue.waiting_words(self.device, self.ahead)
        if self.seconds is None:
            return words
        return f"{words.rstrip('…')} (about {max(1, round(self.seconds))} s)…"


@dataclass(frozen=True)
class RoundDone:
    generation: Generation    # the run so far: a snapshot, safe to read while the decoder goes on


@dataclass(frozen=True)
class RunDone:
    generation: Generation    # the whole run (or what a stop left of it: see stats.stopped)
    cached: bool = False      # found in the cache of finished runs (`flights`): decoded earlier
    earlier: Generation | None = None   # decoded afresh on request: the run the cache held (to compare)


@dataclass(frozen=True)
class RunFailed:
    error: BaseException


Message = Waiting | RoundDone | RunDone | RunFailed
PROGRESS = (Waiting, RoundDone)   # shown as they come; only the latest when several wait


def _snapshot(gen: Generation) -> Generation:
    """A copy safe to read while the decoder thread goes on appending to the original."""
    snap = copy.copy(gen)
    snap.rounds = list(gen.rounds)
    snap.token_ids = list(gen.token_ids)
    snap.token_text = dict(gen.token_text)
    return snap


@gpu
def decode_stream(prompt: str, preset: str, settings: RunSettings, stop: StopSignal, fresh: bool = False):
    """The run's messages: the finished run at once from the cache (unless `fresh`: a visitor asked
    to see it decoded again); else those of the flight that decodes it (`flights`: joined when one
    is decoding it already, else started): Waiting while it waits for its turn, RoundDone a few
    times a second (the latest round), then RunDone (with the cached run it was decoded beside, if
    any), or RunFailed with the error."""
    key = flights.key_of(prompt, preset, settings)
    cached = flights.CACHE.get(key)
    if cached is not None and not fresh:
        flights.stats["cached"] += 1
        yield RunDone(cached, cached=True)
        return
    flight, _joined = flights.flight_for(key, lambda f: _take_off(f, prompt, preset, settings), request_stop)
    with flights.riding(stop):
        for message in flight.follow(stop, _leave_with):
            if isinstance(message, RunDone) and message.generation.stats.stopped == TIME_LIMIT:
                stop.set(TIME_LIMIT)   # the flight's time limit stopped it: the request says so too
            if isinstance(message, RunDone) and cached is not None and message.generation is not cached:
                message = replace(message, earlier=cached)
            yield message


def _leave_with(progress, stop) -> Message:
    """A rider's end when it stops and others ride on: the run so far, stopped; or nothing yet."""
    if isinstance(progress, RoundDone):
        return RunDone(flights.stopped(progress.generation, stop))
    return RunFailed(flights.left_the_line())


def _take_off(flight, prompt: str, preset: str, settings: RunSettings) -> None:
    """Decode a flight's run in a thread of its own (which hands the decode to a free worker
    process, `workers.decode`), writing its messages into the flight."""
    stop = flight.stop

    def work():
        try:
            pair = ready(preset)   # a real model this server lacks is fetched first (an example picks it)
            limits.check_prompt_tokens(len(pair.encode(prompt)[1]))
            with flights.LINE.slot(stop, lambda ahead, s: flight.put(Waiting(ahead, pair.device, s))), \
                    device_queue.turn(pair.device, stop, on_wait=lambda ahead: flight.put(Waiting(ahead, pair.device))):
                gen = workers.decode(preset, pair, prompt, settings, stop,   # a worker process's, when one is free
                                     on_round=lambda _round, so_far: flight.put(RoundDone(_snapshot(so_far))))
            flights.land(flight, RunDone(gen), gen)
        except Exception as err:   # reported to the riders by the page's generator
            flights.land(flight, RunFailed(err))

    threading.Thread(target=work, daemon=True, name="specdec-decode").start()


COMPARE_REPEATS = 3   # interleaved repeats of the run and the target alone: a spread, as the bench shows


@dataclass(frozen=True)
class Repeated:
    done: int                 # repeats of a timed comparison finished so far


@gpu
def timed_comparison(prompt: str, preset: str, settings: RunSettings, stop: StopSignal):
    """The speculative run again, unstreamed (the same seed gives the same tokens), and the target
    alone, timed fairly (`measure.timed_repeats`: both warmed up, then COMPARE_REPEATS interleaved
    repeats, on the same engine, each timing waiting for the device), with no page being redrawn
    meanwhile. The streamed run is not timed fairly: the page's figures are built while it decodes.
    Yields Repeated as each repeat ends, then the `Repeats`. Timed in a thread of its own: the thread
    count a comparison holds is the calling thread's, and a generator's steps may each run in
    another of the server's threads."""
    out: queue.Queue = queue.Queue()

    def work():
        try:
            out.put(_timed(prompt, preset, settings, stop, lambda k: out.put(Repeated(k))))
        except Exception as err:   # raised again below, in the caller's thread
            out.put(RunFailed(err))

    # In a copy of the request's context: a waiting visitor's notice (`_notice`) reaches their page.
    threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True, name="specdec-compare").start()
    while not isinstance(message := out.get(), Repeats):
        if isinstance(message, RunFailed):
            raise message.error
        yield message
    yield message


def _timed(prompt: str, preset: str, settings: RunSettings, stop: StopSignal, on_repeat) -> Repeats:
    pair = get_pair(preset)
    with _unstreamed_turn(pair, stop):
        repeats = timed_repeats(pair, prompt, settings, repeats=COMPARE_REPEATS, stop=stop, on_repeat=on_repeat)
        remeasure_if_drifted(pair, preset, settings.drafter, repeats)
        return repeats


DRIFT_ROUNDS = 16   # a compared run this long or longer can say its rounds drifted (the page's 64 tokens: ~40)


def target_step_here(preset: str, drafter: str) -> float | None:
    """The target step (ms) measured on this machine for a loaded pair (`calibrate`), None if none is."""
    pair = get_pair(preset)
    profile = calibrate.stored(preset, drafter, str(pair.device).split(":")[0], str(pair.dtype).replace("torch.", ""))
    return profile.target_step_ms if profile is not None else None


def remeasure_if_drifted(pair, preset: str, drafter: str, repeats: Repeats) -> None:
    """Where a compared run's rounds, in target steps, have moved away from the costs measured here
    (`calibrate.DRIFT`), those costs are measured again now, so the next run's γ pick and prediction
    read this machine as it is. A run of fewer than `DRIFT_ROUNDS` rounds says too little to judge."""
    spec, alone = repeats.spec, repeats.ar
    threads, gamma = alone.models.get("threads"), spec.settings.gamma
    profile = calibrate.stored(preset, drafter, str(pair.device).split(":")[0], str(pair.dtype).replace("torch.", ""),
                               threads) if threads else None
    ended = all(g.stats.stopped in ("max_new_tokens", "eos") for g in (spec, alone))
    whole = run_point(spec.stats, gamma, alone.stats).whole_loop
    if profile is not None and ended and whole is not None and spec.stats.rounds >= DRIFT_ROUNDS:
        if calibrate.drifted(profile, gamma, gamma * whole.c + whole.verify(gamma)):
            calibrate.profile_here(pair, preset, drafter)


@gpu
def rerun(gen: Generation, preset: str, target_alone: bool, stop: StopSignal) -> Generation:
    """A run's prompt, seed and settings again: with the other rule (exact <-> skip), or the target alone."""
    pair = get_pair(preset)
    with _unstreamed_turn(pair, stop):
        if target_alone:
            return autoregressive_generate(pair, gen.prompt, gen.settings, stop=stop)
        other = Rule.EXACT if gen.settings.skip_adjustment else Rule.SKIP_ADJUSTMENT
        return speculative_generate(pair, gen.prompt, gen.settings.with_(rule=other), stop=stop)


@contextmanager
def _unstreamed_turn(pair, stop):
    """A place in the line of decodes, then the device's turn; a waiting visitor gets a notice."""
    with flights.LINE.slot(stop, _notice(pair.device)), \
            device_queue.turn(pair.device, stop, on_wait=_notice(pair.device)):
        yield


def _notice(device):
    """For an unstreamed run: a waiting visitor's place (and an estimate, when known) in a notice on their page."""
    def on_wait(ahead: int, seconds: float | None = None) -> None:
        if ahead:
            gr.Info(Waiting(ahead, device, seconds).words, duration=5)
    return on_wait


def warm_up(pair) -> None:
    """Run both decoders once on a loaded pair (a few tokens): the first request then pays no
    one-time start-up cost, so its timings, and the speedup the page shows, are fair. Then what
    start-up made is left out of later garbage collections (`device_queue.freeze_start_up`), and
    the worker processes start (`workers`, on a CPU), in the background."""
    with device_queue.turn(pair.device):
        for drafter in drafters_for(pair):
            speculative_generate(pair, DEFAULT_PROMPT, RunSettings(gamma=4, max_new_tokens=8, drafter=drafter))
        autoregressive_generate(pair, DEFAULT_PROMPT, RunSettings(max_new_tokens=8))
    device_queue.freeze_start_up()
    workers.start(pair)
