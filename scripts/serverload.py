"""Measure a running specdec server from outside, as visitors use it: the soak and the load test.

`scripts/soak.py` and `scripts/load.py` are thin command lines over `soak()` and `load()`; the
server tests (tests/test_server*.py) call the same functions in a short form (pytest.ini puts this
folder on the path). A test and operations harness: it is not part of the package.

- `start_server(env)` starts `python app.py` on a free port with its own temp and Gradio cache
  folders (so their growth is the server's alone) and waits until it serves.
- `soak(...)`: N default runs from one client; resident memory of the server process and the
  size of its temp and cache folders, sampled as it goes.
- `load(...)`: K clients at once with different seeds; each result compared with the same
  request run alone; requests beyond the queue are told to retry; the server answers after; the
  clients told their place in the device's line (a server with SPECDEC_SERIALISE_DEVICE=1, or a GPU).
- `import_soak(...)`: N visitors each import a large trace (`big_trace`); resident memory after
  each, against the server's byte budget (SPECDEC_SESSION_BYTES); the first visitor's next action
  must tell them their run was let go.

Memory is read from /proc (Linux), so the measurement adds no dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from specdec.app.server.api import MAIN_OUTPUTS, RunRequest, api_outputs

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- a server of our own

@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    folder: Path                  # holds tmp/ (TMPDIR) and gradio/ (GRADIO_TEMP_DIR) of the server
    log: Path
    own_folder: bool = True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def folders_mb(self) -> float:
        return folder_mb(self.folder / "tmp") + folder_mb(self.folder / "gradio")

    def stop(self) -> None:
        stop_server(self)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Gradio's launch() asks its own page once, with a 3-second timeout, and exits with this message
# when that one request times out: on a machine loaded far beyond its cores (load 20 on 2 cores,
# measured) a sound server can fail so. start_server then starts it again, at most twice.
GRADIO_SELF_CHECK = "When localhost is not accessible, a shareable link must be created"
STARTS = 3


def start_server(env: dict | None = None, folder: Path | None = None, timeout: float = 180,
                 argv: list[str] | None = None) -> Server:
    """`python app.py` (or `argv`) on a free loopback port, offline, with TMPDIR and
    GRADIO_TEMP_DIR inside `folder` (a fresh temporary folder by default); returns once the page
    answers and one run has gone through (the bundled pair loaded and warm). Started again (at
    most STARTS times in all) only when Gradio's own start-up check of its page timed out."""
    for attempt in range(1, STARTS + 1):
        try:
            return _start_server(env, folder, timeout, argv)
        except RuntimeError as err:
            if GRADIO_SELF_CHECK not in str(err) or attempt == STARTS:
                raise
    raise AssertionError("unreachable")


def _start_server(env: dict | None, folder: Path | None, timeout: float, argv: list[str] | None) -> Server:
    own = folder is None
    folder = Path(tempfile.mkdtemp(prefix="specdec-server-")) if folder is None else Path(folder)
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    (folder / "gradio").mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
                "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1", "TMPDIR": str(folder / "tmp"), "GRADIO_TEMP_DIR": str(folder / "gradio"),
                **(env or {})}
    log = folder / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv or [sys.executable, "app.py"], cwd=ROOT, env=full_env, stdout=out,
                                stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}/", folder, log, own)
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(server.url, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            stop_server(server)
            raise RuntimeError(f"the server did not answer within {timeout:.0f} s")
        time.sleep(0.3)
    return server


def stop_server(server: Server) -> None:
    """Terminate (Gradio takes a few seconds), then kill; remove the folder if we made it. A server
    that had already exited on its own died: its log's tail goes to stderr first, for the report."""
    if server.proc.poll() is not None and server.log.exists():
        sys.stderr.write(f"the server had exited on its own (code {server.proc.returncode}); its log ends:\n"
                         f"{server.log.read_text(errors='replace')[-4000:]}\n")
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)
    if server.own_folder:
        shutil.rmtree(server.folder, ignore_errors=True)


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (from /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def folder_mb(path: Path) -> float:
    """Disk used by the files under `path` (0 when it does not exist)."""
    total = 0
    for root, dirs, files in os.walk(path):
        total += 4096 * len(dirs)
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 1e6


# ---------------------------------------------------------------- talking to it

def client(url: str):
    from specdec.bench.app_client import app_client

    return app_client(url, download_files=False)


def generate(c, **changes) -> dict:
    """One /generate call: the app's default request with `changes` (RunRequest fields), its
    outputs by name."""
    return generate_streamed(c, **changes)[0]


def generate_streamed(c, **changes) -> tuple[dict, list[str]]:
    """One /generate call: its outputs by name, and every status line it streamed on the way."""
    names = api_outputs(MAIN_OUTPUTS)
    job = c.submit(*RunRequest().with_(**changes).values(), api_name="/generate")
    final = dict(zip(names, job.result(), strict=True))
    statuses = [str(dict(zip(names, out, strict=True)).get("status")) for out in job.outputs()]
    return final, statuses


def file_path(out) -> str:
    """The server-side path of a file an endpoint returned (gradio_client, download_files=False)."""
    path = out if isinstance(out, str) else out["path"] if isinstance(out, dict) else out[0]
    return path if isinstance(path, str) else path["path"]


def notices(job) -> list[str]:
    """The notices (gr.Info, gr.Warning) a finished gradio_client job was shown, in order."""
    found, updates = [], job.communicator.updates
    while not updates.empty():
        log = getattr(updates.get_nowait(), "log", None)
        if log:
            found.append(log[0])
    return found


def fingerprint(result: dict) -> str:
    """What must be identical between two runs of one request: the marked-up text (every token
    and its fate) and the status without its timings."""
    status = str(result.get("status", ""))
    return f"{result.get('text')}|{status.split(',')[0]}"


# ---------------------------------------------------------------- soak

@dataclass
class SoakResult:
    runs: int
    samples: list[tuple[int, float, float]] = field(default_factory=list)   # (run, RSS MB, folders MB)
    seconds: float = 0.0

    def at(self, run: int) -> tuple[float, float]:
        for n, rss, disk in self.samples:
            if n == run:
                return rss, disk
        raise KeyError(run)

    def summary(self, early: int) -> dict:
        rss_early, disk_early = self.at(early)
        rss_end, disk_end = self.at(self.runs)
        return dict(runs=self.runs, early_run=early, rss_early_mb=round(rss_early, 1), rss_end_mb=round(rss_end, 1),
                    rss_growth_pct=round(100 * (rss_end - rss_early) / rss_early, 2),
                    disk_early_mb=round(disk_early, 2), disk_end_mb=round(disk_end, 2),
                    disk_growth_mb=round(disk_end - disk_early, 2),
                    disk_start_mb=round(self.samples[0][2], 2), seconds=round(self.seconds, 1))


def soak(server: Server, runs: int = 200, every: int = 10, early: int = 20, export: bool = False,
         log=print, settle=None, **changes) -> SoakResult:
    """`runs` default runs from one client, in turn; RSS and folder sizes after run 0 (before any),
    `early`, every `every` runs, and the last. export=True also asks for the trace after each run.
    settle(), when given, is called before each reading (tests/test_server.py: the server collects
    its garbage and hands freed memory back to the system, so a reading sees what is still held)."""
    settle = settle or (lambda: None)
    c = client(server.url)
    result = SoakResult(runs)
    settle()
    result.samples.append((0, server.rss_mb(), server.folders_mb()))
    marks = {early, runs} | set(range(every, runs + 1, every))
    t0 = time.perf_counter()
    for i in range(1, runs + 1):
        out = generate(c, **changes)
        if not str(out["status"]).startswith("Done"):
            raise RuntimeError(f"run {i} did not finish: {out['status']!r}")
        if export:
            c.predict(api_name="/export_trace")
        if i in marks:
            settle()
            _, rss, disk = sample = (i, server.rss_mb(), server.folders_mb())
            result.samples.append(sample)
            log(f"run {i:4d}: RSS {rss:7.1f} MB, temp + cache folders {disk:6.2f} MB")
    result.seconds = time.perf_counter() - t0
    return result


# ---------------------------------------------------------------- load

@dataclass
class LoadResult:
    clients: int
    matched: int = 0
    mismatched: list[int] = field(default_factory=list)
    told_to_retry: int = 0
    retry_message: str = ""
    other_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    after_ok: bool = False
    after_seconds: float = 0.0
    places: dict[int, list[str]] = field(default_factory=dict)   # client -> "Waiting for …" lines it read
    held: bool = False   # with hold_tokens: the holding run was still decoding when the clients were submitted

    def summary(self) -> dict:
        told = {i: p for i, p in self.places.items() if p}
        return dict(clients=self.clients, matched=self.matched, mismatched=self.mismatched,
                    told_to_retry=self.told_to_retry, retry_message=self.retry_message[:200],
                    other_errors=self.other_errors[:5],
                    seconds=round(self.seconds, 1), after_ok=self.after_ok, after_seconds=round(self.after_seconds, 2),
                    told_their_place=len(told), first_places=sorted({p[0] for p in told.values()})[:8],
                    held=self.held)


RETRY_WORDS = ("queue is full", "try again")
NO_RUN_CACHE = {"SPECDEC_RUN_CACHE_BYTES": "0"}   # a server that keeps no finished run: every request decodes
# A server whose runs all decode in its own threads (no worker processes, `specdec.app.server.workers`): the
# tests of its lines, limits and memory, where each of two workers would cost ~6 s of CPU to start
# and hold the decodes' memory outside the process they measure. The browser tests' server has them.
THREADS_ONLY = {"SPECDEC_DECODE_PROCESSES": "0"}
HOLD_TOKENS = 200   # the run the clients find decoding (`load(hold_tokens=)`): seconds, on any machine
FROM_THE_CACHE = "From the cache"   # how a status says the run was not decoded for this request (`views.CACHED`)


def _is_retry(err: BaseException) -> bool:
    return any(w in str(err).lower() for w in RETRY_WORDS)


def _hold(server: Server, tokens: int, timeout: float = 120):
    """A run of `tokens` tokens submitted by a visitor of its own, returned once it decodes (its
    page shows a round): the runs submitted next find the line busy and wait behind it."""
    job = client(server.url).submit(*RunRequest().with_(seed=999, max_new_tokens=tokens).values(),
                                    api_name="/generate")
    names, deadline = api_outputs(MAIN_OUTPUTS), time.monotonic() + timeout
    while time.monotonic() < deadline and not job.done():
        if any(str(dict(zip(names, out, strict=True)).get("status")).startswith("Round") for out in job.outputs()):
            return job
        time.sleep(0.05)
    raise RuntimeError(f"the holding run did not start decoding within {timeout:.0f} s")


def load(server: Server, clients: int = 16, check_alone: bool = True, max_new_tokens: int = 24,
         log=print, hold_tokens: int = 0) -> LoadResult:
    """`clients` gradio_client clients, each its own session and seed, submitted at once.
    check_alone: each result must equal the same request run alone afterwards, decoded afresh (a
    server that serves a repeat from its cache of finished runs, SPECDEC_RUN_CACHE_BYTES > 0, makes
    that comparison empty: such an answer counts as an error). hold_tokens: first a run of that
    many tokens, and the clients are submitted while it decodes, so they find the line busy
    whatever the machine's speed (`held`: it was still decoding when they were submitted). Errors
    that tell the visitor to retry (the queue is full) are counted; any other error is a failure.
    Then one more run must succeed at once."""
    result = LoadResult(clients)
    cs = [client(server.url) for _ in range(clients)]
    barrier = threading.Barrier(clients)
    outputs: dict[int, dict] = {}
    holder = _hold(server, hold_tokens) if hold_tokens else None

    def one(i: int):
        barrier.wait()
        try:
            outputs[i], statuses = generate_streamed(cs[i], seed=1000 + i, max_new_tokens=max_new_tokens)
            result.places[i] = [s for s in statuses if s.startswith("Waiting for")]
        except Exception as err:    # sorted here: told to retry, or a failure
            if _is_retry(err):
                result.told_to_retry += 1
                result.retry_message = str(err)
            else:
                result.other_errors.append(f"client {i}: {type(err).__name__}: {err}")

    t0 = time.perf_counter()
    result.held = holder is not None and not holder.done()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(clients)))
    result.seconds = time.perf_counter() - t0
    if holder is not None:
        status = str(dict(zip(api_outputs(MAIN_OUTPUTS), holder.result(), strict=True))["status"])
        if not status.startswith("Done"):
            result.other_errors.append(f"the holding run: {status}")
    log(f"{clients} clients at once: {len(outputs)} answered, {result.told_to_retry} told to retry, "
        f"{len(result.other_errors)} other errors, {result.seconds:.1f} s")
    t1 = time.perf_counter()
    try:
        after = generate(cs[0], seed=7, max_new_tokens=4)
        result.after_ok = str(after["status"]).startswith("Done")
    except Exception as err:
        result.other_errors.append(f"the run after: {type(err).__name__}: {err}")
    result.after_seconds = time.perf_counter() - t1
    if check_alone:
        alone = client(server.url)
        for i, out in sorted(outputs.items()):
            again = generate(alone, seed=1000 + i, max_new_tokens=max_new_tokens)
            if FROM_THE_CACHE in str(again["status"]):
                result.other_errors.append(f"client {i}: the run alone came from the cache, not decoded afresh")
            elif fingerprint(again) == fingerprint(out):
                result.matched += 1
            else:
                result.mismatched.append(i)
        log(f"each against the same request alone: {result.matched} equal, {len(result.mismatched)} different")
    return result


# ---------------------------------------------------------------- imports against the byte budget

BIG_RUN = dict(max_new_tokens=240, gamma=16, seed=1, temperature=1.0)   # the page's largest run


def big_trace(pair, folder: Path) -> Path:
    """The largest bundled-pair run there is (240 tokens at gamma 16, the page's default prompt),
    decoded by the library as a server decodes that request and written as the page exports it,
    into `folder`: about 2.1 MB of JSON, ~5 MB once parsed and shown. (Asking a server for it took
    40 s on a loaded 2-core machine, most of it the streamed views; the library takes 3 s.)"""
    from specdec import speculative_generate

    prompt, _, settings = RunRequest(**BIG_RUN).checked()
    path = Path(folder) / "big-trace.json"
    path.write_text(speculative_generate(pair, prompt, settings).to_json(), encoding="utf-8")
    return path


@dataclass
class ImportSoakResult:
    imports: int
    budget_mb: float | None
    trace_mb: float
    rss_start_mb: float = 0.0
    samples: list[tuple[int, float]] = field(default_factory=list)   # (imports so far, RSS MB)
    told: list[str] = field(default_factory=list)                     # what the first visitor read next
    seconds: float = 0.0

    def summary(self) -> dict:
        peak = max(rss for _, rss in self.samples)
        end = self.samples[-1][1]
        return dict(imports=self.imports, trace_mb=round(self.trace_mb, 2), budget_mb=self.budget_mb,
                    rss_start_mb=round(self.rss_start_mb, 1), rss_peak_mb=round(peak, 1), rss_end_mb=round(end, 1),
                    growth_peak_mb=round(peak - self.rss_start_mb, 1), growth_end_mb=round(end - self.rss_start_mb, 1),
                    first_visitor_told=bool(self.told), seconds=round(self.seconds, 1))


def import_soak(server: Server, trace: Path, imports: int = 30, budget_mb: float | None = None,
                every: int = 5, log=print) -> ImportSoakResult:
    """`imports` visitors, each a new client, import `trace` in turn; RSS after each. Then the
    first visitor acts again (opens round 2): what the page told them comes back in `told`."""
    from gradio_client import handle_file

    result = ImportSoakResult(imports, budget_mb, Path(trace).stat().st_size / 1e6)
    result.rss_start_mb = server.rss_mb()
    visitors = []
    t0 = time.perf_counter()
    for i in range(1, imports + 1):
        c = client(server.url)
        status = c.predict(handle_file(str(trace)), api_name="/import_trace")[0]
        if not str(status).startswith("Imported"):
            raise RuntimeError(f"import {i} failed: {status!r}")
        visitors.append(c)
        result.samples.append((i, server.rss_mb()))
        if i % every == 0 or i == imports:
            log(f"import {i:3d}: RSS {result.samples[-1][1]:7.1f} MB "
                f"(+{result.samples[-1][1] - result.rss_start_mb:.1f} MB)")
    result.seconds = time.perf_counter() - t0
    job = visitors[0].submit(2, api_name="/show_step")
    job.result()
    result.told = notices(job)
    return result


# ---------------------------------------------------------------- command lines

def main_soak(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/soak.py",
                                description="Default runs against a fresh server: resident memory and disk.")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--early", type=int, default=20, help="the run memory is compared with (default 20)")
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--export", action="store_true", help="also export the trace after every run")
    p.add_argument("--url", help="soak a server already running (memory and disk are then not measured)")
    p.add_argument("--json", help="write the samples and the summary here")
    p.add_argument("--imports", type=int, default=0,
                   help="instead: this many visitors each import the largest bundled-pair trace")
    p.add_argument("--budget-mb", type=float, default=40,
                   help="with --imports: the server's SPECDEC_SESSION_BYTES in MB (default 40)")
    args = p.parse_args(argv)
    if args.imports:
        return _import_soak_main(args)
    if args.runs < args.early:
        p.error("--runs must be at least --early")
    server = start_server()
    try:
        res = soak(server, args.runs, args.every, args.early, export=args.export)
        summary = res.summary(args.early)
    finally:
        log_tail = server.log.read_text()[-2000:] if server.log.exists() else ""
        stop_server(server)
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(summary=summary, samples=res.samples), indent=1))
    ok = summary["rss_growth_pct"] <= 5 and summary["disk_growth_mb"] <= 5
    if not ok:
        print(f"FAILED: memory grew {summary['rss_growth_pct']} % or disk {summary['disk_growth_mb']} MB\n{log_tail}")
    return 0 if ok else 1


IMPORT_SLACK_MB = 40   # over the budget: the parse of one import in flight, and the allocator's own


def _import_soak_main(args) -> int:
    env = {"SPECDEC_SESSION_BYTES": str(int(args.budget_mb * 1e6)), "SPECDEC_MAX_UPLOAD_MB": "6"}
    server = start_server(env)
    try:
        from specdec.models.pair import load_pair
        trace = big_trace(load_pair(), server.folder)
        res = import_soak(server, trace, args.imports, args.budget_mb)
        summary = res.summary()
    finally:
        stop_server(server)
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(summary=summary, samples=res.samples, told=res.told), indent=1))
    ok = summary["growth_peak_mb"] <= args.budget_mb + IMPORT_SLACK_MB and summary["first_visitor_told"]
    if not ok:
        print(f"FAILED: memory grew {summary['growth_peak_mb']} MB against a budget of {args.budget_mb} MB "
              f"(+{IMPORT_SLACK_MB} MB slack), or the first visitor was not told")
    return 0 if ok else 1


def main_load(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/load.py",
                                description="Concurrent clients against a fresh server.")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--burst", type=int, default=40, help="then this many at once against a small queue")
    p.add_argument("--queue", type=int, default=8, help="the queue size for the burst's server")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--serialise", action="store_true",
                   help="instead: --clients at once through the device's line (SPECDEC_SERIALISE_DEVICE=1), "
                        "each equal to the same request alone and told its place")
    args = p.parse_args(argv)
    if args.serialise:
        return _serialised_main(args)
    server = start_server(NO_RUN_CACHE)   # each run alone is decoded afresh, not answered from the cache
    try:
        first = load(server, args.clients, max_new_tokens=args.max_new_tokens)
    finally:
        stop_server(server)
    print(json.dumps(first.summary(), indent=1))
    server = start_server({"SPECDEC_QUEUE_SIZE": str(args.queue)})
    try:
        burst = load(server, args.burst, check_alone=False, max_new_tokens=args.max_new_tokens)
    finally:
        stop_server(server)
    print(json.dumps(burst.summary(), indent=1))
    ok = (first.matched == args.clients and not first.other_errors and first.after_ok
          and not burst.other_errors and burst.told_to_retry > 0 and burst.after_ok)
    return 0 if ok else 1


def _serialised_main(args) -> int:
    server = start_server({"SPECDEC_SERIALISE_DEVICE": "1", "SPECDEC_DECODE_CONCURRENCY": str(args.clients),
                           "SPECDEC_CONCURRENCY": str(args.clients), **NO_RUN_CACHE})
    try:
        res = load(server, args.clients, max_new_tokens=args.max_new_tokens, hold_tokens=HOLD_TOKENS)
    finally:
        stop_server(server)
    summary = res.summary()
    print(json.dumps(summary, indent=1))
    ok = res.matched == args.clients and not res.other_errors and res.after_ok and summary["told_their_place"] > 0
    return 0 if ok else 1
