"""The server's lines, with small limits set by environment variables: a queue of 8 and a burst of
40 (`burst`), and runs taking turns on the device (`queued`, the GPU's path, run on the CPU). Split
from test_server.py so that pytest-xdist (a file a unit, `--dist loadgroup`) runs each file's
servers on its own worker.

The time limit has no server of its own here (a server costs seconds of CPU to start, for one check).
Each part of that check is made elsewhere: test_limits, in-process,
that a run past SPECDEC_REQUEST_SECONDS stops between forwards and the visitor's error and status
say "time limit of … s (SPECDEC_REQUEST_SECONDS)", and that a variable sets its limit (one reader
for every limit); test_workers that the limit travels with a run decoded in a worker process;
test_server that an error raised mid-run reaches an API client with its message and the server
serves on (`test_an_out_of_memory_error_leaves_the_server_serving`)."""

from __future__ import annotations

import re

import pytest

gradio_client = pytest.importorskip("gradio_client")

import serverload  # noqa: E402

pytestmark = pytest.mark.slow   # every test here talks to a server of its own


@pytest.fixture(scope="module")
def burst():
    """A queue of 8 and the default time limit: the burst is judged on queueing alone (with a
    1-second limit, a queued run on a loaded machine could also be stopped for its time)."""
    server = serverload.start_server({"SPECDEC_QUEUE_SIZE": "8", **serverload.THREADS_ONLY})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def queued():
    server = serverload.start_server({"SPECDEC_SERIALISE_DEVICE": "1", "SPECDEC_DECODE_CONCURRENCY": "8",
                                      "SPECDEC_CONCURRENCY": "8", **serverload.NO_RUN_CACHE, **serverload.THREADS_ONLY})
    yield server
    server.stop()


def test_forty_at_once_the_excess_is_told_to_retry_and_the_server_answers_after(burst):
    res = serverload.load(burst, clients=40, check_alone=False, max_new_tokens=4, log=lambda *_: None)
    assert not res.other_errors, res.summary()
    assert res.told_to_retry > 0, res.summary()
    # what a refused visitor reads (gradio_client words it "Queue is full! Please try again.")
    assert "try again" in res.retry_message.lower(), res.summary()
    assert res.after_ok and res.after_seconds < 10, res.summary()


# a place in the line, with an estimate once decodes were timed (`flights.Line`; the device's line has none)
PLACE = r"Waiting for the {}: [1-8] runs? ahead of you( \(about [1-9][0-9]* s\))?…"


def test_eight_clients_through_the_devices_line_are_told_their_place_and_get_what_they_would_alone(queued):
    """The GPU's path (runs take turns on the device), run on the CPU: eight at once, sent while a
    200-token run decodes (a 64-token run now takes the device for less time than eight requests
    take to arrive on a loaded machine: without it the line could be empty). The server keeps no
    finished run, so each run alone after is decoded afresh."""
    res = serverload.load(queued, clients=8, max_new_tokens=64, log=lambda *_: None,
                          hold_tokens=serverload.HOLD_TOKENS)
    assert res.held, "the holding run ended before the eight were sent"
    assert not res.other_errors and res.told_to_retry == 0, res.summary()
    assert res.matched == 8 and not res.mismatched, res.summary()
    places = [p for lines in res.places.values() for p in lines]
    assert all(re.fullmatch(PLACE.format("CPU"), p) for p in places), places
    told = [lines for lines in res.places.values() if lines]   # how many runs started while others ran:
    assert len(told) >= 3 and max(int(p.split(": ")[1].split()[0]) for p in places) >= 2, res.places
    assert res.after_ok


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
def test_eight_clients_on_the_gpu_take_turns_and_get_what_they_would_alone():
    """The same on a GPU machine, where runs take turns without being asked (not run here: the
    machine this was written on has no GPU)."""
    server = serverload.start_server({"SPECDEC_DECODE_CONCURRENCY": "8", "SPECDEC_CONCURRENCY": "8",
                                      **serverload.NO_RUN_CACHE, **serverload.THREADS_ONLY})
    try:
        res = serverload.load(server, clients=8, max_new_tokens=64, log=lambda *_: None,
                              hold_tokens=serverload.HOLD_TOKENS)
    finally:
        server.stop()
    assert not res.other_errors and res.matched == 8 and not res.mismatched, res.summary()
    places = [p for lines in res.places.values() for p in lines]
    assert all(re.fullmatch(PLACE.format("GPU"), p) for p in places), places

