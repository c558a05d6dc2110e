"""Runs on one device take turns, first come first served, and a waiting visitor is told their
place. On a GPU always (graph capture and replay never overlap); on the CPU when
SPECDEC_SERIALISE_DEVICE=1, which is how the same path runs here. (Eight clients at once through
a real server: test_server_lines.py and `python scripts/load.py --serialise`.)"""

from __future__ import annotations

import threading
import time

import pytest

from specdec import RunSettings, StopSignal
from specdec.app.server import device_queue, flights, limits, runs
from specdec.app.server.device_queue import DeviceQueue, LeftTheLine
from specdec.models.pair import BUNDLED


def _start(target, *args) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_runs_on_one_device_take_turns_in_order_each_told_its_place():
    q = DeviceQueue()
    order, places, inside, most = [], {i: [] for i in range(5)}, [0], [0]
    release = threading.Event()

    def run(i: int):
        with q.turn("cuda", on_wait=places[i].append):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            order.append(i)
            if i == 0:
                release.wait(10)
            time.sleep(0.01)
            inside[0] -= 1

    threads = [_start(run, 0)]
    _until(lambda: order == [0])
    for i in range(1, 5):   # each joins the line behind the ones before it
        threads.append(_start(run, i))
        _until(lambda i=i: places[i] == [i])
    assert q.ahead("cuda:0") == 5   # 'cuda' and 'cuda:0' are one line
    release.set()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4] and most[0] == 1
    for i in range(1, 5):   # told its place, then each step forward, down to "1 run ahead"
        assert places[i][0] == i and places[i][-1] == 1
        assert all(a > b for a, b in zip(places[i], places[i][1:], strict=False))
    assert q.ahead("cuda") == 0 and q.served == 5


def test_a_stop_while_waiting_leaves_the_line_and_waiting_does_not_count_against_the_time_limit():
    q = DeviceQueue()
    holding, release = threading.Event(), threading.Event()

    def hold():
        with q.turn("cuda:0"):
            holding.set()
            release.wait(10)

    holder = _start(hold)
    holding.wait(10)
    # a visitor's Stop while waiting: out of the line at once, nothing decoded
    stop, failed = StopSignal(), []

    def stopped_run():
        try:
            with q.turn("cuda:0", stop):
                failed.append("ran")
        except LeftTheLine as err:
            failed.append(str(err))

    t = _start(stopped_run)
    _until(lambda: q.ahead("cuda:0") == 2)
    stop.set()
    t.join(10)
    assert failed == ["Stopped while waiting for the GPU: nothing was decoded"] and q.ahead("cuda:0") == 1
    # the time limit is paused while a run waits: 0.3 s of limit, 0.6 s of waiting, still not stopped
    timed, got = StopSignal(seconds=0.3), []

    def timed_run():
        with q.turn("cuda:0", timed):
            got.append((timed.is_set(), timed.deadline - time.monotonic()))

    t = _start(timed_run)
    time.sleep(0.6)
    release.set()
    t.join(10)
    holder.join(10)
    assert got and got[0][0] is False and 0.1 < got[0][1] <= 0.3, got


def test_a_turn_is_reentrant_and_other_devices_have_their_own_line():
    q = DeviceQueue()
    done = []

    def nested():
        with q.turn("cuda:0"), q.turn("cuda:0"):   # e.g. a load inside a run's turn
            with q.turn("cuda:1"):
                done.append(True)
    t = _start(nested)
    t.join(5)
    assert done == [True] and q.ahead("cuda:0") == 0


def test_the_cpu_takes_turns_only_when_asked(monkeypatch):
    assert device_queue.serialised("cuda") and device_queue.serialised("cuda:1")
    monkeypatch.setattr(limits, "SERIALISE_DEVICE", 0)
    assert not device_queue.serialised("cpu")
    monkeypatch.setattr(limits, "SERIALISE_DEVICE", 1)
    assert device_queue.serialised("cpu")
    assert device_queue.waiting_words("cuda", 2) == "Waiting for the GPU: 2 runs ahead of you…"
    assert device_queue.waiting_words("cpu", 1) == "Waiting for the CPU: 1 run ahead of you…"


@pytest.mark.slow
def test_a_streamed_run_that_waits_is_told_its_place_and_decodes_what_it_would_alone(monkeypatch):
    monkeypatch.setattr(limits, "SERIALISE_DEVICE", 1)
    prompt, settings = "To be, or not to be", RunSettings(gamma=4, max_new_tokens=24, seed=5)
    alone = list(runs.decode_stream(prompt, BUNDLED, settings, StopSignal()))
    assert not any(isinstance(m, runs.Waiting) for m in alone)
    flights.CACHE.clear()   # else the same run comes from the cache, without waiting
    with device_queue.QUEUE.turn("cpu"):   # another run holds the CPU
        stream = runs.decode_stream(prompt, BUNDLED, settings, StopSignal())
        first = next(stream)
    assert isinstance(first, runs.Waiting) and first.ahead == 1, first
    assert first.words == "Waiting for the CPU: 1 run ahead of you…"
    rest = list(stream)
    assert isinstance(rest[-1], runs.RunDone) and isinstance(alone[-1], runs.RunDone)
    assert rest[-1].generation.token_ids == alone[-1].generation.token_ids
    # a visitor who stops while waiting gets a message, and no run
    stop = StopSignal()
    flights.CACHE.clear()
    with device_queue.QUEUE.turn("cpu"):
        stream = runs.decode_stream(prompt, BUNDLED, settings, stop)
        assert isinstance(next(stream), runs.Waiting)
        stop.set()
        last = list(stream)[-1]
    assert isinstance(last, runs.RunFailed) and "while waiting for the CPU" in str(last.error)
