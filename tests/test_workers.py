"""A run decoded in a worker process (specdec/app/server/workers.py) is the library's own run: the same
tokens, rounds and numbers, streamed as it goes; a Stop and the time limit reach it between
forwards; an error comes back as itself; a worker whose server is gone exits."""

from __future__ import annotations

import time

import pytest

from specdec import RunSettings, speculative_generate
from specdec.app.server import workers
from specdec.decoding.loop import STOPPED, TIME_LIMIT, StopSignal

pytestmark = pytest.mark.slow   # each worker is a process of its own: ~8 s to load and warm up

PROMPT = "KING RICHARD:\nNow is the winter"
TIMES = ("draft_seconds", "verify_seconds", "wall_seconds")


def without_times(gen) -> dict:
    """A run as data, its measured times left out (they differ between any two runs)."""
    d = gen.to_dict()
    for r in d["rounds"]:
        for name in TIMES:
            r.pop(name, None)
    for name in TIMES:
        d["stats"].pop(name, None)
    d["models"].pop("engine", None)
    return d


@pytest.fixture(scope="module")
def worker():
    w = workers.Worker()
    assert w.wait_ready(240), "the worker did not load its pair"
    yield w
    w.close()


def test_a_run_decoded_in_a_worker_is_the_librarys_run_streamed_as_it_goes(worker, bundled):
    settings = RunSettings(gamma=4, max_new_tokens=200, seed=31)
    seen = []
    gen = worker.decode(PROMPT, settings, StopSignal(), on_round=lambda r, so_far: seen.append(
        (r.index, len(so_far.rounds), list(so_far.token_ids), so_far.text)))
    alone = speculative_generate(bundled, PROMPT, settings)
    assert without_times(gen) == without_times(alone)
    # The first round at once, then the latest round every `STREAM_EVERY` seconds, in order, each
    # with the run so far: a prefix of the run, its rounds up to the one shown.
    indices = [i for i, _, _, _ in seen]
    assert indices[0] == 0 and all(a < b for a, b in zip(indices, indices[1:]))
    assert all(n == i + 1 for i, n, _, _ in seen)
    assert all(ids == alone.token_ids[:len(ids)] and alone.text.startswith(text) for _, _, ids, text in seen)
    # a second run on the same worker: nothing of the first is left in it
    again = worker.decode(PROMPT, settings.with_(seed=32), StopSignal())
    assert without_times(again) == without_times(speculative_generate(bundled, PROMPT, settings.with_(seed=32)))


def test_a_stop_set_on_the_server_ends_the_workers_run_between_forwards(worker):
    stop = StopSignal()
    rounds = []

    def on_round(r, _so_far):   # the first round comes at once: Stop then
        rounds.append(r.index)
        stop.set()

    gen = worker.decode(PROMPT, RunSettings(gamma=2, max_new_tokens=200, seed=5), stop, on_round)
    assert gen.stats.stopped == STOPPED and rounds[0] == 0
    assert 1 <= len(gen.rounds) < 100 and gen.stats.new_tokens < 200
    # negative control: the next run on the worker is not stopped by that stop
    assert worker.decode(PROMPT, RunSettings(gamma=2, max_new_tokens=8, seed=5), StopSignal()).stats.stopped != STOPPED


def test_the_time_limit_travels_with_the_run(worker):
    stop = StopSignal(seconds=0.0)   # already past: the worker stops before its first forward
    time.sleep(0.01)
    gen = worker.decode(PROMPT, RunSettings(gamma=4, max_new_tokens=50, seed=1), stop)
    assert gen.stats.stopped == TIME_LIMIT and gen.stats.new_tokens == 0


def test_an_error_in_the_worker_is_raised_on_the_server(worker):
    too_long = RunSettings(gamma=4, max_new_tokens=100_000, seed=1)   # past the pair's context
    with pytest.raises(Exception) as err:
        worker.decode(PROMPT, too_long, StopSignal())
    assert "context" in str(err.value) or "tokens" in str(err.value)
    assert worker.proc.poll() is None   # and the worker goes on serving
    assert worker.decode(PROMPT, RunSettings(gamma=4, max_new_tokens=4, seed=2), StopSignal()).stats.new_tokens == 4


def test_a_worker_exits_when_its_server_is_gone():
    w = workers.Worker()
    assert w.wait_ready(240)
    w.jobs.close()   # what the server's end of the pipe does when the server dies
    assert w.proc.wait(timeout=30) == 0


def test_the_delta_rebuilds_the_run_from_what_is_new(bundled):
    """The server's copy of a streamed run, built from the deltas, is the run at every round."""
    sent, rebuilt = workers._Sent(), []
    state = {"gen": None}

    def on_round(_r, so_far):
        state["gen"] = workers._apply(state["gen"], sent.delta(so_far))
        rebuilt.append((list(state["gen"].token_ids), dict(state["gen"].token_text), len(state["gen"].rounds)))
        assert state["gen"] is not so_far

    gen = speculative_generate(bundled, PROMPT, RunSettings(gamma=3, max_new_tokens=20, seed=9), on_round=on_round)
    assert rebuilt[-1][0] == gen.token_ids and rebuilt[-1][2] == len(gen.rounds)
    assert all(k in rebuilt[-1][1] for k in gen.token_ids)
    assert state["gen"].text == gen.text and state["gen"].stats.new_tokens == gen.stats.new_tokens


def test_a_worker_whose_server_dies_mid_run_stops_and_exits(tmp_path):
    """A server killed while its worker decodes a long run: the worker is gone soon after (it stops
    at its next forward, `_Stop`, and exits at the end of its pipe), never left decoding for no one."""
    import os
    import subprocess
    import sys

    server = tmp_path / "server.py"
    server.write_text(
        "import os, sys\n"
        "from specdec import RunSettings\n"
        "from specdec.app.server import workers\n"
        "w = workers.Worker()\n"
        "assert w.wait_ready(240)\n"
        "w.jobs.send((1, 'To be', RunSettings(gamma=1, max_new_tokens=240, seed=1), None))\n"
        "assert w.out.poll(60)   # its first round: the run is under way\n"
        "print(w.proc.pid, flush=True)\n"
        "os._exit(0)   # the server dies without a word\n")
    out = subprocess.run([sys.executable, str(server)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pid = int(out.stdout.split()[0])
    deadline = time.time() + 30
    while time.time() < deadline and os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid), "the worker decodes on for no one"


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_workers_stop_is_set_when_its_server_is_gone(monkeypatch):
    import os

    read, _write = __import__("multiprocessing").Pipe(duplex=False)
    stop = workers._Stop(read, job=1, seconds=None)
    assert not stop.is_set()                                  # its server is there: the run goes on
    monkeypatch.setattr(os, "getppid", lambda: stop.server + 1)   # as after the server died (a new parent)
    assert stop.is_set() and stop.reason == STOPPED


def test_a_worker_that_died_while_free_is_replaced_and_the_run_decodes_in_its_thread(bundled):
    """A worker killed between runs: the next run is not lost (it decodes in the request's thread)
    and another worker starts in its place. The dead worker is killed as soon as it is started (it
    used to load and warm up first, ~8 s of CPU): the pool sees a free worker only by its process,
    dead or alive (`Pool.take`), and this one is made free by hand."""
    pool = workers.Pool()
    dead = workers.Worker()
    dead.proc.kill()
    dead.proc.wait(timeout=30)
    pool.workers.append(dead)
    pool._free.put(dead)
    assert pool.take() is None and dead not in pool.workers and pool.started == 1
    try:
        settings = RunSettings(gamma=4, max_new_tokens=8, seed=3)
        gen = workers.decode("bundled", bundled, PROMPT, settings, StopSignal())   # no free worker: here
        assert gen.token_ids == speculative_generate(bundled, PROMPT, settings).token_ids
        deadline = time.time() + 240
        while pool.ready() == 0 and time.time() < deadline:   # the replacement loads and warms up
            time.sleep(0.2)
        fresh = pool.take()
        assert fresh is not None and fresh is not dead
        assert fresh.decode(PROMPT, settings, StopSignal()).token_ids == gen.token_ids
    finally:
        for w in pool.workers:
            w.close()


_SERVER_WITH_A_WORKER = """
import sys, time
from specdec.app.server import workers
if sys.argv[1] == "ends-them":
    workers.end_with_server()   # as app.py does
workers.POOL.start(1)
while not workers.POOL.workers:   # the worker's process exists (it is loading its pair)
    time.sleep(0.05)
print(workers.POOL.workers[0].proc.pid, flush=True)
time.sleep(600)
"""


def _server_sigtermed_while_its_worker_loads(tmp_path, mode: str) -> int:
    """Start a server with one worker, SIGTERM the server while that worker loads, wait for the
    server to go; the worker's pid."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(_SERVER_WITH_A_WORKER)
    server = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pid = int(server.stdout.readline())
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)
    return pid


def test_a_sigterm_to_the_server_ends_its_workers_with_it(tmp_path):
    """SIGTERM (how a Space or a test stops the server) while a worker still loads its pair: once
    the server has gone, so has the worker (it used to read its pipe's end only when loaded, ~8 s
    later). Control: a server without `end_with_server` leaves it running."""
    import os
    import signal

    def running(pid: int) -> bool:
        return os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid)

    orphan = _server_sigtermed_while_its_worker_loads(tmp_path, "plain")
    try:
        assert running(orphan), "control: without end_with_server the loading worker outlives its server"
    finally:
        if running(orphan):
            os.kill(orphan, signal.SIGKILL)
    ended = _server_sigtermed_while_its_worker_loads(tmp_path, "ends-them")
    assert not running(ended), "the worker outlived its server"
