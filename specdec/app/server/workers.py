"""Decodes in worker processes, so that two runs decode at once on two cores.

The server decodes each run in a thread of its own (`runs`), but threads of one process take
turns at its GIL, and a small model's decode is mostly Python between short forwards: two decode
threads gave 1.33-1.5x the throughput of one on this 2-core machine, two processes 1.8x (0.376 s
a 64-token run alone; 0.40 and 0.46 s with two at once). A class of 30 distinct runs waited on it.

A worker is `python -m specdec.app.server.workers`: it loads the bundled pair once, as the server does,
then decodes the runs it is sent, one at a time, with the library's own `speculative_generate`
(the same code, seed and torch threads as the server: the same run, token for token). After the
first round, then every `STREAM_EVERY` seconds, it writes back what is new (`_Delta`: rounds,
tokens, their texts, the stats), then the whole run, or the error. A request's Stop reaches it
through a pipe of its own, looked at between forwards (a poll, never a wait); the time limit
travels as the seconds left, and the worker keeps it. A worker whose server dies stops its run at
the next forward and exits at the end of its pipe.

Only the bundled pair on a CPU goes to a worker: a hub pair would be loaded in each worker (its
memory twice over), and a GPU's runs take turns on the device anyway (`device_queue`). The real
model (SmolLM2-135M-Instruct) gains little from them: its run is mostly matrix products, which
torch computes with the GIL released, so two threads already use both cores, and each worker
process would hold the model again (about 0.57 GB); the bundled pair's runs are Python-bound and
gain from processes (`python scripts/threads_or_processes.py --preset bundled` measures both). While no
worker is free or ready (the server has just started, or SPECDEC_DECODE_PROCESSES is 0), a run
decodes in its thread, as before.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from ...decoding.loop import STOPPED, StopSignal, speculative_generate
from ...models.pair import BUNDLED
from ...trace.spine import Generation
from . import limits

__all__ = ["Worker", "Pool", "POOL", "decode", "start", "end_all", "end_with_server"]


# ---------------------------------------------------------------- what a worker sends back

# Seconds between two streamed states of a run (the first round goes at once): a third of the
# page's own cadence (`flights.EVERY`), so what a visitor sees is never more than this late, and
# the decoder records its rounds in batches between them (`speculative_generate`'s `stream_every`:
# a 200-token run of the bundled pair took 6 % longer when every round was recorded and sent).
STREAM_EVERY = 0.1


@dataclasses.dataclass(frozen=True)
class _Delta:
    """What a run gained in its latest round(s); the first one of a run is the run so far, whole."""
    rounds: list
    token_ids: list
    token_text: dict
    text: str
    stats: object
    start: Generation | None = None


class _Sent:
    """How much of a run a worker has sent, to send only what is new."""

    def __init__(self):
        self.rounds = self.tokens = 0
        self.texts: set[int] = set()

    def delta(self, gen: Generation) -> _Delta:
        start = None
        if self.rounds == 0 and self.tokens == 0:
            start = copy.copy(gen)
            start.rounds, start.token_ids, start.token_text = [], [], {}
        fresh_text = {k: v for k, v in gen.token_text.items() if k not in self.texts}
        out = _Delta(gen.rounds[self.rounds:], gen.token_ids[self.tokens:], fresh_text, gen.text, gen.stats, start)
        self.rounds, self.tokens = len(gen.rounds), len(gen.token_ids)
        self.texts.update(fresh_text)
        return out


def _apply(gen: Generation | None, delta: _Delta) -> Generation:
    """The run so far on the server's side, with `delta` added."""
    if gen is None:
        gen = delta.start
    gen.rounds.extend(delta.rounds)
    gen.token_ids.extend(delta.token_ids)
    gen.token_text.update(delta.token_text)
    gen.text, gen.stats = delta.text, delta.stats
    return gen


# ---------------------------------------------------------------- the worker's side

class _Stop(StopSignal):
    """A run's stop inside a worker: the library's `StopSignal` (its deadline, the time limit),
    also set when the server writes this run's number and a reason into the stop pipe, or when
    the server is gone (the worker's parent changed)."""

    def __init__(self, pipe: Connection, job: int, seconds: float | None):
        super().__init__(seconds)
        self.pipe, self.job, self.server = pipe, job, os.getppid()

    def is_set(self) -> bool:
        while self.pipe.poll():
            job, reason = self.pipe.recv()
            if job == self.job:   # a stop sent for an earlier run, after it ended, is dropped
                self.set(reason)
        if os.getppid() != self.server:   # the server died mid-run: no one to send the run to
            self.set(STOPPED)
        return super().is_set()


def serve(jobs: Connection, out: Connection, stops: Connection) -> None:
    """A worker's life: load the bundled pair, say "ready", decode each job sent until the server goes."""
    import torch

    torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS") or 1))   # as app.py sets the server's
    pair = _load()
    _warm_up(pair)
    from .device_queue import freeze_start_up

    freeze_start_up()   # a full collection walked 386,000 objects here, stopping the decode 200 ms
    out.send(("ready", None))
    while True:
        try:
            job, prompt, settings, seconds = jobs.recv()
        except (EOFError, OSError):   # the server is gone
            return
        sent = _Sent()

        def on_round(_round, so_far, sent=sent):
            out.send(("round", sent.delta(so_far)))

        try:
            gen = speculative_generate(pair, prompt, settings, stop=_Stop(stops, job, seconds), on_round=on_round,
                                       stream_every=STREAM_EVERY)
            out.send(("done", gen))
        except (BrokenPipeError, EOFError):
            return
        except Exception as err:   # the server raises it in the run's thread
            out.send(("failed", _picklable(err)))


def _load():
    from .pairs import get_pair

    return get_pair(BUNDLED)


def _warm_up(pair) -> None:
    """Each drafter once (a few tokens), as `runs.warm_up` does for the server: the first run a
    worker decodes pays no one-time cost. (Not `runs` itself: it imports Gradio, which a worker
    does without.)"""
    from ...core.settings import RunSettings
    from ...drafting.drafters import drafters_for
    from .api import DEFAULT_PROMPT

    for drafter in drafters_for(pair):
        speculative_generate(pair, DEFAULT_PROMPT, RunSettings(gamma=4, max_new_tokens=8, drafter=drafter))


def _picklable(err: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")


# ---------------------------------------------------------------- the server's side

class WorkerGone(RuntimeError):
    pass


class Worker:
    """One worker process and its three pipes (jobs in, messages out, stops in)."""

    def __init__(self):
        job_r, job_w = os.pipe()
        out_r, out_w = os.pipe()
        stop_r, stop_w = os.pipe()
        # The worker imports this very checkout of specdec, wherever the server was started from.
        root = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        # A worker decodes on the CPU only (`decode` sends it nothing else): on a machine with CUDA
        # it must not pick the GPU, where its pair would differ from the server's CPU pair.
        env = {**os.environ, "SPECDEC_DECODE_PROCESSES": "0", "PYTHONPATH": path, "SPECDEC_DEVICE": "cpu"}
        command = [sys.executable, "-m", "specdec.app.server.workers", str(job_r), str(out_w), str(stop_r)]
        self.proc = subprocess.Popen(command,
                                     pass_fds=(job_r, out_w, stop_r), env=env, stdin=subprocess.DEVNULL)
        for fd in (job_r, out_w, stop_r):
            os.close(fd)
        self.jobs = Connection(job_w, readable=False)
        self.out = Connection(out_r, writable=False)
        self.stops = Connection(stop_w, readable=False)
        self.runs = 0

    def wait_ready(self, seconds: float) -> bool:
        """True once the worker has loaded its pair and warmed up."""
        try:
            return self.out.poll(seconds) and self.out.recv()[0] == "ready"
        except (EOFError, OSError):
            return False

    def decode(self, prompt: str, settings, stop, on_round=None) -> Generation:
        """`speculative_generate(pair, prompt, settings, stop=stop, on_round=on_round)`, decoded by
        this worker; `stop` (the server's) is relayed when it is set."""
        self.runs += 1
        deadline = getattr(stop, "deadline", None)
        seconds = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.jobs.send((self.runs, prompt, settings, seconds))
        gen, relayed = None, False
        while True:
            if self.out.poll(0.05):
                try:
                    kind, payload = self.out.recv()
                except (EOFError, OSError):
                    raise WorkerGone("the decoding process ended during the run") from None
                if kind == "round":
                    gen = _apply(gen, payload)
                    if on_round is not None:
                        on_round(gen.rounds[-1], gen)
                elif kind == "done":
                    return payload
                else:
                    raise payload
            elif self.proc.poll() is not None:
                raise WorkerGone(f"the decoding process ended (exit code {self.proc.returncode}) during the run")
            if not relayed and stop is not None and stop.is_set():
                self.stops.send((self.runs, getattr(stop, "reason", None) or STOPPED))
                relayed = True

    def close(self) -> None:
        for conn in (self.jobs, self.out, self.stops):
            conn.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Pool:
    """The server's workers: started in the background, each free one waiting in `_free`."""

    def __init__(self):
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self.started = 0
        self.workers: list[Worker] = []

    def start(self, count: int, ready_seconds: float = 300) -> None:
        """Start `count` workers; each is put to work once ready (in a thread: a start takes seconds)."""
        def bring_up():
            worker = Worker()
            self.workers.append(worker)
            if worker.wait_ready(ready_seconds):
                self._free.put(worker)
            else:
                worker.close()

        for _ in range(count):
            self.started += 1
            threading.Thread(target=bring_up, daemon=True, name="specdec-worker-start").start()

    def take(self) -> Worker | None:
        """A free worker that is alive, or None (the run then decodes in its own thread)."""
        while True:
            try:
                worker = self._free.get_nowait()
            except queue.Empty:
                return None
            if worker.proc.poll() is None:
                return worker
            self._replace(worker)   # it died while it waited

    def give_back(self, worker: Worker) -> None:
        if worker.proc.poll() is None:
            self._free.put(worker)
        else:
            self._replace(worker)

    def _replace(self, worker: Worker) -> None:
        """A dead worker closed, and another started in its place."""
        worker.close()
        if worker in self.workers:
            self.workers.remove(worker)
        self.start(1)

    def ready(self) -> int:
        return self._free.qsize()


POOL = Pool()


def start(pair) -> None:
    """The server's workers (SPECDEC_DECODE_PROCESSES of them), for the bundled pair on a CPU."""
    if limits.DECODE_PROCESSES and pair.device == "cpu" and POOL.started == 0:
        POOL.start(limits.DECODE_PROCESSES)


def end_all(pool: Pool = POOL) -> None:
    """Every worker of the pool ended now (the server is going): a worker still loading its pair
    would otherwise read its job pipe's end only once loaded, ~8 s after its server had gone."""
    alive = [w for w in list(pool.workers) if w.proc.poll() is None]
    for worker in alive:
        worker.proc.terminate()
    for worker in alive:
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()


def end_with_server() -> None:
    """The server's workers end with it: at exit, and on SIGTERM (how a Space, a test or `kill`
    stops it; Python's default for it exits at once, without `atexit`). The handler ends the
    workers, then lets SIGTERM do what it did before. Called from the main thread (`app.py`),
    the only one that may set a signal's handler."""
    atexit.register(end_all)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        end_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def decode(preset: str, pair, prompt: str, settings, stop, on_round=None) -> Generation:
    """A streamed run: in a free worker when the run is the bundled pair's on a CPU, else here."""
    worker = POOL.take() if preset == BUNDLED and pair.device == "cpu" else None
    if worker is None:
        return speculative_generate(pair, prompt, settings, stop=stop, on_round=on_round, stream_every=STREAM_EVERY)
    try:
        return worker.decode(prompt, settings, stop, on_round)
    finally:
        POOL.give_back(worker)


if __name__ == "__main__":   # a worker: run from the module by its name, so what it pickles names it
    from specdec.app.server import workers

    job_fd, out_fd, stop_fd = (int(a) for a in sys.argv[1:4])
    workers.serve(Connection(job_fd, writable=False), Connection(out_fd, readable=False),
                  Connection(stop_fd, writable=False))
