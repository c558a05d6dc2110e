"""How the app is served to anyone: limits, input checks Gradio does not do, error messages,
housekeeping. `app.py` calls `configure(demo)` and launches with `launch_options()`.

What `configure` sets, each from `limits` (one environment variable each):

- the queue: SPECDEC_QUEUE_SIZE waiting requests, beyond which a visitor is told the server is
  busy and to try again (Gradio's own words only said "Queue is full"); SPECDEC_CONCURRENCY
  requests of a kind at once; every queued decoding request at once, each waiting in the app's
  line of SPECDEC_DECODE_CONCURRENCY decodes (`flights`);
- the decoding events' concurrency group (`DECODE`);
- number inputs that refuse what Gradio passes on or turns into a generic "Error": text, a missing
  value, NaN, infinity, and a fraction where a whole number is expected (Gradio rounds 2.5 to 2
  without a word) — each with a message naming the control (`specdec.core.checks`, one wording);
- Gradio's `delete_cache`: uploads and returned files deleted after SPECDEC_FILE_MAX_AGE_SECONDS;
- a visitor's session released when their page closes (and again after each step of a run that
  outlived its page, for which Gradio makes the session anew), and the housekeeping thread
  (`housekeeping`): idle sessions, orphaned component copies, this process's old files, freed
  memory;
- the byte budget (`budget`, SPECDEC_SESSION_BYTES): kept after every request that changes a
  visitor's state, and a visitor whose state was released (to keep it, or because their
  connection dropped) is told so, with what to do, at their next action (a warning on the page);
- outputs a handler leaves out sent without Gradio rebuilding each one (`skips`);
- a new visitor's session copied from a template, not built from every component (`sessions`).

The time limit (SPECDEC_REQUEST_SECONDS) is not here: each decoding request carries a stop with a
deadline (`runs.request_stop`), which the decoder checks between forwards.

`launch_options()` adds Gradio's `max_file_size` (SPECDEC_MAX_UPLOAD_MB: an upload over it is
refused before it is stored) and `state_session_capacity` (SPECDEC_MAX_SESSIONS).
"""

from __future__ import annotations

import asyncio

import gradio as gr

from ...core.checks import number
from ..shows.messages import error
from . import budget, housekeeping, limits
from .sessions import quick_sessions
from .skips import skip_left_out

__all__ = ["configure", "launch_options", "CheckedSlider", "CheckedNumber", "harden_inputs", "BUSY", "DECODE",
           "DROPPED"]

BUSY = ("The server is busy: {waiting} requests are waiting, the most it queues "
        "(SPECDEC_QUEUE_SIZE = {limit}). Please try again in a minute.")


# ---------------------------------------------------------------- number inputs

def _name(component) -> str:
    label = getattr(component, "label", None)
    return str(label) if label else "this number"


def check_number(component, payload, whole: bool):
    """A number control's value (within its minimum and maximum), or gr.Error naming the control."""
    try:
        return number(payload, _name(component), getattr(component, "minimum", None),
                      getattr(component, "maximum", None), whole=whole)
    except ValueError as err:   # the message starts with the control's label: keep its case
        raise error(str(err), capital=False) from None


def _whole_steps(slider) -> bool:
    """A slider that only stops at whole numbers (γ, max new tokens): a fraction is refused, not rounded."""
    return all(float(x).is_integer() for x in (slider.step or 1, slider.minimum or 0))


def _slider_preprocess(self, payload):
    x = check_number(self, payload, whole=_whole_steps(self))
    return gr.Number.round_to_precision(x, self.precision)


def _number_preprocess(self, payload):
    if payload is None:
        return None   # the handler says what is missing (as Gradio passes None on)
    x = check_number(self, payload, whole=self.precision == 0)
    return gr.Number.round_to_precision(x, self.precision)


def _checked(base, preprocess, name: str, doc: str):
    """A subclass of a Gradio component with a checking `preprocess`. Built with `type.__new__`
    so Gradio's component metaclass does not write a `.pyi` stub next to this file (it does for
    every component class a module defines); the subclass adds no events and no __init__, which
    is all that metaclass step prepares. `is_template` makes the page draw it as its base."""
    attrs = {"__module__": __name__, "__qualname__": name, "__doc__": doc, "is_template": True,
             "preprocess": preprocess}
    return type.__new__(type(base), name, (base,), attrs)


CheckedSlider = _checked(gr.Slider, _slider_preprocess, "CheckedSlider",
                         "A gr.Slider whose API input is checked: text, null, NaN or a value off the slider get a "
                         "message naming the slider instead of Gradio's generic \"Error\".")
CheckedNumber = _checked(gr.Number, _number_preprocess, "CheckedNumber",
                         "A gr.Number whose API input is checked; with precision=0 a fraction is refused, not "
                         "rounded.")


def harden_inputs(demo: gr.Blocks) -> int:
    """Make every plain Slider and Number of the app checked (see CheckedSlider, CheckedNumber).
    The objects keep everything else; Gradio re-creates an updated component from its class, so
    the checks survive `gr.update`. Returns how many were changed."""
    changed = 0
    for block in demo.default_config.blocks.values():
        if type(block) is gr.Slider:
            block.__class__ = CheckedSlider
            changed += 1
        elif type(block) is gr.Number:
            block.__class__ = CheckedNumber
            changed += 1
    return changed


# ---------------------------------------------------------------- queue, cache, sessions

def _busy_queue(demo: gr.Blocks) -> None:
    """Replace Gradio's "Queue is full. Max size is N" by a message that says what to do."""
    queue = demo._queue
    push = queue.push

    async def push_or_busy(*args, **kwargs):
        ok, detail, state = await push(*args, **kwargs)
        if state == "queue_full":
            detail = BUSY.format(waiting=len(queue), limit=queue.max_size)
        return ok, detail, state

    queue.push = push_or_busy


# How often Gradio's queue looks for work while it has none (or no free slot), and for progress to
# send. Gradio looks every 1 ms and every 10 ms on Linux (`Queue.sleep_when_free` and
# `progress_update_sleep_when_free`, not launch options), and each wake-up of its event loop costs
# CPU: a loop that wakes every 10 ms costs several times what one that wakes every 50 ms does, on a
# Space's 2 vCPU and beside its decodes, for as long as the server runs.
# So the queue looks every 10 ms while requests come (`BRISK_FOR_SECONDS` after the last: a step's
# events, chained one after the other, arrive well within it) and every 50 ms when the server is
# quiet: the first request after a pause waits at most 50 ms more to start, against runs of seconds.
# Progress (the fetch's bar) goes out at most every 100 ms.
BRISK_POLL_SECONDS = 0.01
QUIET_POLL_SECONDS = 0.05
BRISK_FOR_SECONDS = 2.0
PROGRESS_POLL_SECONDS = 0.1


class QueuePoll:
    """How often `queue` looks for work: briskly from a request (`woken`) until the `settle` that
    request scheduled, unless another request came in between; quietly otherwise."""

    def __init__(self, queue):
        self.queue, self.wakes = queue, 0
        queue.sleep_when_free = max(queue.sleep_when_free, QUIET_POLL_SECONDS)

    def woken(self) -> int:
        self.wakes += 1
        self.queue.sleep_when_free = BRISK_POLL_SECONDS
        return self.wakes

    def settle(self, wake: int) -> None:
        if wake == self.wakes:   # no request since this one
            self.queue.sleep_when_free = QUIET_POLL_SECONDS


def _calm_queue(demo: gr.Blocks) -> None:
    queue = demo._queue
    if hasattr(queue, "progress_update_sleep_when_free"):
        queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, PROGRESS_POLL_SECONDS)
    if not hasattr(queue, "sleep_when_free"):   # a later Gradio without it keeps its own loop
        return
    poll, push = QueuePoll(queue), queue.push

    async def push_briskly(*args, **kwargs):   # Gradio's push runs on its event loop
        asyncio.get_running_loop().call_later(BRISK_FOR_SECONDS, poll.settle, poll.woken())
        return await push(*args, **kwargs)

    queue.push = push_briskly


DECODE = "decode"   # the concurrency group of the app's decoding events (see `layout`)


def _limit_decoding(demo: gr.Blocks) -> None:
    """Every queued request of the decode group is served at once: it waits in the app's own line of
    decodes (`flights.LINE`, SPECDEC_DECODE_CONCURRENCY decodes at once), where a request for a run
    already decoding joins it, one already decoded comes from the cache, and a waiting visitor is
    told their place and an estimate. In Gradio's queue they would wait behind each other even for
    a run the cache holds."""
    for block_fn in demo.fns.values():
        if block_fn.concurrency_id == DECODE:
            block_fn.concurrency_limit = limits.QUEUE_SIZE


DROPPED = ("Your page lost its connection to the server, which let go of your run. Reload the page: "
           "the link in the address bar runs it again, at the round you were on (an imported trace must be "
           "imported again).")


def _changes_state(block_fn) -> bool:
    return any(isinstance(block, gr.State) for block in getattr(block_fn, "outputs", ()) or ())


def _page_closed(demo: gr.Blocks, event_id: str | None) -> bool:
    """Whether Gradio marked this request's event closed: its page's heartbeat ended while it ran."""
    queue = getattr(demo, "_queue", None)
    event = getattr(queue, "event_ids_to_events", {}).get(event_id) if event_id else None
    return bool(getattr(event, "closed", False))


def _watch_sessions(demo: gr.Blocks) -> None:
    """Around every request: a visitor whose state was released is told at once (a warning on
    their page, whatever they did); after an event that changes a visitor's state ends, the byte
    budget is kept (in a worker thread: measuring a new trace takes a moment)."""
    process = demo.process_api
    stateful = {id(fn) for fn in demo.fns.values() if _changes_state(fn)}

    async def process_api(*args, **kwargs):
        session_hash, event_id = kwargs.get("session_hash"), kwargs.get("event_id")
        shown = event_id and kwargs.get("iterator") is None and demo._queue is not None   # once, on the page
        message = budget.take_message(session_hash) if shown else None
        if message:
            demo._queue.log_message(event_id=event_id, log=message, title="Your run was let go", level="warning",
                                    duration=None)
        result = await process(*args, **kwargs)
        if session_hash and _page_closed(demo, event_id):
            # The run outlived its page: the unload released the session, and this step's state
            # made it again (a session Gradio opens anew, never marked closed, kept until the idle sweep).
            housekeeping.drop_session(demo, session_hash)
            return result
        block_fn = kwargs.get("block_fn", args[0] if args else None)
        block_fn = demo.fns.get(block_fn) if isinstance(block_fn, int) else block_fn
        if session_hash and id(block_fn) in stateful and not result.get("is_generating"):
            await asyncio.to_thread(housekeeping.enforce_budget, demo, session_hash)
        return result

    demo.process_api = process_api


def configure(demo: gr.Blocks, housekeeping_thread: bool = True) -> gr.Blocks:
    """Apply the serving limits and housekeeping to a built app (see the module docstring)."""
    harden_inputs(demo)
    _limit_decoding(demo)
    demo.queue(default_concurrency_limit=limits.CONCURRENCY, max_size=limits.QUEUE_SIZE)
    _busy_queue(demo)
    _calm_queue(demo)
    demo.delete_cache = (int(max(1, limits.CLEAN_EVERY_SECONDS)), int(max(1, limits.FILE_MAX_AGE_SECONDS)))

    def release_visitor(request: gr.Request):
        session_hash = getattr(request, "session_hash", None)
        holder = getattr(demo, "state_holder", None)
        had_run = budget.holds_a_run(getattr(holder, "session_data", {}).get(session_hash))
        if housekeeping.drop_session(demo, session_hash) and had_run:
            budget.tell(session_hash, DROPPED)   # read only if the same page comes back (a dropped connection)

    demo.unload(release_visitor)
    skip_left_out(demo)
    quick_sessions(demo)
    _watch_sessions(demo)
    if housekeeping_thread:
        demo.specdec_housekeeper = housekeeping.start(demo)
    return demo


def launch_options() -> dict:
    """Keyword arguments for `demo.launch()` that the limits set."""
    # Gradio's 40 worker threads, plus one for each request that may wait in the line of decodes.
    # No run history: Gradio's would keep every run's outputs (its charts, hundreds of KB) in the
    # visitor's localStorage, re-read and re-written whole on each update of a run (Chromium's
    # profile of a 64-token run: about 100 ms of the final update's 500 ms task). A run is kept by
    # its link and its trace file instead.
    return dict(max_file_size=limits.MAX_UPLOAD_BYTES, state_session_capacity=limits.MAX_SESSIONS,
                max_threads=40 + limits.QUEUE_SIZE, run_history=False)
