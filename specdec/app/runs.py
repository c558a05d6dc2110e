"""Every decoding the app does, each borrowing a GPU on a Hugging Face ZeroGPU Space (`gpu`), and
each taking its turn on its pair's device (`device_queue`: on a GPU, runs never overlap).

The streamed run decodes in a worker thread and hands its progress to the page's generator as
named messages (`Waiting` for its turn, `RoundDone`, `RunDone`, `RunFailed`) through a queue; the
page shows only the latest round when rounds come faster than it redraws. The unstreamed runs
(the timed comparison, the side-by-side re-runs) tell a waiting visitor their place in a notice.
Every run takes a `StopSignal`: the request's time limit (SPECDEC_REQUEST_SECONDS, paused while
the run waits for its turn) and a visitor's Stop (a closed page, a cancelled request) act between
forwards, and the target-alone baseline stops the same way.
"""

from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass

import gradio as gr

from ..decoding import StopSignal, autoregressive_generate, speculative_generate
from ..drafters import drafters_for
from ..measure import compare_with_target
from ..sampling import Rule
from ..settings import RunSettings
from ..trace import Generation
from . import device_queue, limits
from .api import DEFAULT_PROMPT
from .pairs import get_pair

try:   # Hugging Face ZeroGPU: borrow a GPU for the decoding call only
    import spaces

    gpu = spaces.GPU
except Exception:   # not on a Space (or no `spaces` package): a no-op decorator
    def gpu(fn=None, **_kw):
        return fn if fn is not None else (lambda f: f)


def request_stop() -> StopSignal:
    """A new request's stop: set by a visitor's Stop, and by itself at the time limit."""
    return StopSignal(seconds=limits.REQUEST_SECONDS)


# ---------------------------------------------------------------- messages from the decoding thread

@dataclass(frozen=True)
class Waiting:
    ahead: int                # runs holding or waiting for the device before this one
    device: str

    @property
    def words(self) -> str:
        return device_queue.waiting_words(self.device, self.ahead)


@dataclass(frozen=True)
class RoundDone:
    generation: Generation    # the run so far: a snapshot, safe to read while the decoder goes on


@dataclass(frozen=True)
class RunDone:
    generation: Generation    # the whole run (or what a stop left of it: see stats.stopped)


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
def decode_stream(prompt: str, preset: str, settings: RunSettings, stop: StopSignal):
    """Run the decoder in a thread; yield Waiting while it waits for its turn on the device, a
    RoundDone after rounds (the latest one when several wait: no backlog on a fast device; the
    last round is always shown), then RunDone, or RunFailed with the error."""
    out: queue.Queue[Message] = queue.Queue()

    def work():
        try:
            pair = get_pair(preset)
            limits.check_prompt_tokens(len(pair.encode(prompt)[1]))
            with device_queue.turn(pair.device, stop, on_wait=lambda ahead: out.put(Waiting(ahead, pair.device))):
                gen = speculative_generate(pair, prompt, settings, stop=stop,
                                           on_round=lambda _round, so_far: out.put(RoundDone(_snapshot(so_far))))
            out.put(RunDone(gen))
        except Exception as err:   # reported to the visitor by the page's generator
            out.put(RunFailed(err))

    threading.Thread(target=work, daemon=True, name="specdec-decode").start()
    waiting: Message | None = None   # the end, held back until the last round has been shown
    while True:
        message, waiting = waiting or out.get(), None
        while isinstance(message, PROGRESS) and not out.empty():
            later = out.get()
            if not isinstance(later, PROGRESS):
                waiting = later
                break
            message = later
        yield message
        if not isinstance(message, PROGRESS):
            return


@gpu
def timed_comparison(prompt: str, preset: str, settings: RunSettings, stop: StopSignal
                     ) -> tuple[Generation, Generation]:
    """The speculative run again, unstreamed (the same seed gives the same tokens), and the target
    alone, timed fairly (`measure.compare_with_target`: both warmed up, in the order A B B A, on the
    same engine, each timing waiting for the device), with no page being redrawn meanwhile. The
    streamed run is not timed fairly: the page's figures are built while it decodes."""
    pair = get_pair(preset)
    with device_queue.turn(pair.device, stop, on_wait=_notice(pair.device)):
        return compare_with_target(pair, prompt, settings, stop=stop)


@gpu
def rerun(gen: Generation, preset: str, target_alone: bool, stop: StopSignal) -> Generation:
    """A run's prompt, seed and settings again: with the other rule (exact <-> skip), or the target alone."""
    pair = get_pair(preset)
    with device_queue.turn(pair.device, stop, on_wait=_notice(pair.device)):
        if target_alone:
            return autoregressive_generate(pair, gen.prompt, gen.settings, stop=stop)
        other = Rule.EXACT if gen.settings.skip_adjustment else Rule.SKIP_ADJUSTMENT
        return speculative_generate(pair, gen.prompt, gen.settings.with_(rule=other), stop=stop)


def _notice(device):
    """For an unstreamed run: a waiting visitor's place in a notice on their page."""
    def on_wait(ahead: int) -> None:
        if ahead:
            gr.Info(device_queue.waiting_words(device, ahead), duration=5)
    return on_wait


def warm_up(pair) -> None:
    """Run both decoders once on a loaded pair (a few tokens): the first request then pays no
    one-time start-up cost, so its timings, and the speedup the page shows, are fair."""
    with device_queue.turn(pair.device):
        for drafter in drafters_for(pair):
            speculative_generate(pair, DEFAULT_PROMPT, RunSettings(gamma=4, max_new_tokens=8, drafter=drafter))
        autoregressive_generate(pair, DEFAULT_PROMPT, RunSettings(max_new_tokens=8))
