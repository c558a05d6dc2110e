"""The real server, as anyone reaches it, with small limits set by environment variables.

A server of our own (`serverload.start_server` (scripts/): `python app.py` on a free port, with its
own temp and Gradio cache folders):

- `main`: a 1 MB upload cap, returned files deleted once 6 s old, a hub cache holding a broken copy of a hub
  preset, and an out-of-memory error on one magic prompt (injected by a launcher script around
  app.py, not by any code of the app), and the same launcher's SIGUSR1 handler, which collects
  garbage and trims the C heap before each of the soak's readings. Load test, short soak,
  uploads, faults, bad input.

The servers with other limits are in their own files, so that pytest-xdist (a file a unit, `--dist loadgroup`) runs
them on other workers: test_server_lines.py (the queue, the time limit, the device's line) and
test_server_budget.py (the byte budget for visitors' state).

The long forms: `python scripts/soak.py` (200 runs; `--imports 30` against the byte budget) and
`python scripts/load.py` (`--serialise` through the device's line).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

gradio_client = pytest.importorskip("gradio_client")
from gradio_client.exceptions import AppError  # noqa: E402

import serverload  # noqa: E402
from conftest import close_page, open_page  # noqa: E402
from serverload import client, generate  # noqa: E402
from serving import assert_serving  # noqa: E402
from specdec.app.server.api import RunRequest  # noqa: E402
from specdec.models.pair import ASSETS, PRESETS  # noqa: E402
from test_hub_cache import add_to_hub_cache  # noqa: E402

OOM_PROMPT = "simulate out of memory"
SETTLED_ENV = "SPECDEC_TEST_SETTLED"   # a file the launcher counts its settles in (the soak's readings)
LAUNCHER = f"""
import runpy, torch
import specdec.app.server.runs as runs
import specdec.app.server.workers as workers   # a streamed run decodes through `workers.decode` (here: in a thread)
real = runs.speculative_generate
def faulty(pair, prompt, *args, **kwargs):
    if prompt == {OOM_PROMPT!r}:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
    return real(pair, prompt, *args, **kwargs)
runs.speculative_generate = workers.speculative_generate = faulty
import ctypes, gc, json, os, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from heldmem import held_mb
def settle(*_):   # SIGUSR1 (the soak's readings): collect garbage, give freed memory back, say so
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)   # glibc only; elsewhere gc alone
    except (OSError, AttributeError):
        pass
    done = os.environ[{SETTLED_ENV!r}]
    count = json.load(open(done))["count"] if os.path.exists(done) else 0
    with open(done + ".new", "w") as f:
        json.dump({{"count": count + 1, "held_mb": held_mb()}}, f)
    os.replace(done + ".new", done)
signal.signal(signal.SIGUSR1, settle)
runpy.run_path("app.py", run_name="__main__")
"""
BROKEN = "smollm2"   # its hub-cache copy has garbage weights
FILE_MAX_AGE, CLEAN_EVERY = 6, 1   # seconds: this server deletes its returned files when 6 s old, looking every 1 s

pytestmark = pytest.mark.slow   # every test here talks to a server of its own


@pytest.fixture(scope="module")
def main(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hub-cache")
    snapshot = add_to_hub_cache(cache, PRESETS[BROKEN].target, ASSETS / "specdec-target")
    add_to_hub_cache(cache, PRESETS[BROKEN].draft, ASSETS / "specdec-draft")
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").write_bytes(b"\x00" * 64)
    settled = tmp_path_factory.mktemp("settled") / "count"
    server = serverload.start_server(
        {"SPECDEC_MAX_UPLOAD_MB": "1", "SPECDEC_FILE_MAX_AGE_SECONDS": str(FILE_MAX_AGE),
         "SPECDEC_CLEAN_EVERY_SECONDS": str(CLEAN_EVERY),
         "HF_HUB_CACHE": str(cache), SETTLED_ENV: str(settled), **serverload.NO_RUN_CACHE,
         **serverload.THREADS_ONLY},
        argv=[__import__("sys").executable, "-c", LAUNCHER])
    server.settled = settled   # where the launcher counts its settles (see `settle`)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def c(main):
    return client(main.url)


# ---------------------------------------------------------------- load

def test_sixteen_clients_at_once_each_get_what_they_would_get_alone(main):
    res = serverload.load(main, clients=16, max_new_tokens=16, log=lambda *_: None)
    assert not res.other_errors and res.told_to_retry == 0, res.summary()
    assert res.matched == 16 and not res.mismatched, res.summary()
    assert res.after_ok


# ---------------------------------------------------------------- soak (short form)

def _settled(done: Path) -> dict:
    return json.loads(done.read_text()) if done.exists() else {"count": 0, "held_mb": None}


def settle(server) -> float | None:
    """Ask the `main` server to collect its garbage and trim the C heap (SIGUSR1, the launcher's
    handler), and wait until it has: a reading then sees memory still held, not garbage waiting
    for a collection or freed pages malloc kept. Returns the bytes its allocators still hold, in
    MB (tests/heldmem.py; None where they cannot be read)."""
    done = server.settled
    before = _settled(done)["count"]
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.time() + 60
    while (now := _settled(done))["count"] <= before:
        assert time.time() < deadline, "the server did not settle within 60 s"
        time.sleep(0.05)
    return now["held_mb"]


# The soak: SOAK_RUNS default runs, each exported; a reading (after `settle`) every SOAK_EVERY
# runs from run SOAK_FROM on (the first runs fill caches and pools once: warm-up, not a leak).
SOAK_RUNS, SOAK_EVERY, SOAK_FROM = 24, 2, 4
# A leak keeps something of every run: Gradio's orphaned copies of a run's state added ~0.6 MB a
# run (measured, before `skips` and the pruning). The bar stays where it was, less than 0.25 MB a
# run, and is judged on what a leak keeps: the bytes the server's allocators still hold after a
# collection (tests/heldmem.py), not its resident size. Resident size also counts freed memory
# that glibc keeps in fragmented arenas. A 100-run soak of this server beside a CPU burner (load
# 5-9), Theil-Sen slopes: resident size 0.10 MB a run over runs 4-100 and 0.16 over this test's
# runs 4-24; held bytes 0.016 and 0.020 (one 3.7 MB step near run 29, which did not come again,
# then 0.007). The old test, on resident size, failed 1 run in 12 under load at 0.253. The
# slope is Theil-Sen's (the median of the 55 slopes between two readings), so one reading taken
# with something transient still held cannot decide it. Resident size keeps its own bar, tied to
# the server's footprint: its fitted growth over the soak stays within 5 % of the server's size.
# Where the held bytes cannot be read (not glibc), the leak bar applies to resident size.
LEAK_MB_PER_RUN = 0.25
GROWTH_SHARE = 0.05
# Once every export has outlived its age, what may stay on disk is folders: Gradio's per-file ones,
# emptied, 4 KB each, at most one a run, which housekeeping removes later. One export kept is
# ~0.23 MB (the early reading: 0.93 MB for 4), above all of them together.
EXPIRED_LEFT_MB = SOAK_RUNS * 4096 / 1e6


def fitted(runs: np.ndarray, mb: np.ndarray) -> tuple[float, float]:
    """Theil-Sen slope (MB a run) and the readings' scatter about that line (MB)."""
    slope, intercept = scipy.stats.theilslopes(mb, runs)[:2]
    return float(slope), float(np.std(mb - (slope * runs + intercept), ddof=2))


def test_short_soak_memory_and_disk_stay_flat(main):
    """24 default runs, each exported, a reading every 2 runs after the server collected its
    garbage and trimmed its heap: the bytes its allocators hold grow by less than 0.25 MB a run,
    its resident size by less than 5 % over the soak; once the exports have outlived their age
    (6 s here), the temp and cache folders hold no more than empty folders. The long form is
    scripts/soak.py (200 runs)."""
    held = []
    res = serverload.soak(main, runs=SOAK_RUNS, every=SOAK_EVERY, early=SOAK_FROM, export=True,
                          log=lambda *_: None, settle=lambda: held.append(settle(main)))
    late = [i for i, (n, _, _) in enumerate(res.samples) if n >= SOAK_FROM]
    runs = np.array([res.samples[i][0] for i in late], dtype=float)
    rss = np.array([res.samples[i][1] for i in late])
    rss_slope, rss_scatter = fitted(runs, rss)
    fit = dict(rss_slope_mb_per_run=round(rss_slope, 4), rss_scatter_mb=round(rss_scatter, 3),
               rss=[round(float(x), 1) for x in rss], **res.summary(SOAK_FROM))
    if None not in held:
        kept = np.array([held[i] for i in late])
        slope, scatter = fitted(runs, kept)
        fit |= dict(held_slope_mb_per_run=round(slope, 4), held_scatter_mb=round(scatter, 3),
                    held=[round(float(x), 2) for x in kept])
    else:
        slope = rss_slope   # no allocator counts here: resident size is the leak signal too
    # The exports younger than their age limit are on disk by design, and how many that is depends
    # on how fast the runs went: the folders are read again once every export has outlived it, until
    # they are down to the bound (a loaded machine may run the server's cleaning late) or 30 s more.
    time.sleep(FILE_MAX_AGE + CLEAN_EVERY)
    deadline = time.time() + 30
    while main.folders_mb() > fit["disk_start_mb"] + EXPIRED_LEFT_MB and time.time() < deadline:
        time.sleep(0.5)
    fit["disk_after_expiry_mb"] = round(main.folders_mb(), 2)
    print("soak:", fit)   # pytest -s shows it (the closing notes quote it)
    assert slope < LEAK_MB_PER_RUN, fit
    assert rss_slope * (SOAK_RUNS - SOAK_FROM) <= GROWTH_SHARE * rss[0], fit
    assert fit["disk_after_expiry_mb"] <= fit["disk_start_mb"] + EXPIRED_LEFT_MB, fit


# ---------------------------------------------------------------- uploads

def _raw_upload(url: str, size: int, fill: bytes = b"x") -> tuple[int, str]:
    """POST a file of `size` bytes to Gradio's upload route, as any HTTP client can, streamed in
    chunks (the server may stop reading early); (status, body)."""
    host, port = url.split("//")[1].strip("/").split(":")
    boundary = uuid.uuid4().hex
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"trace.json\"\r\n"
            "Content-Type: application/json\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/gradio_api/upload")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(len(head) + size + len(tail)))
    conn.endheaders()
    try:
        conn.send(head)
        chunk, sent = fill * 65536, 0
        while sent < size:
            conn.send(chunk[:size - sent])
            sent += min(len(chunk), size - sent)
        conn.send(tail)
    except (BrokenPipeError, ConnectionResetError):
        pass   # the server refused early; its answer is waiting
    r = conn.getresponse()
    return r.status, r.read().decode()


def test_an_upload_well_over_the_cap_is_refused_fast_memory_barely_moves(main, c, tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"schema": "specdec.trace", "prompt": "' + "x" * 30_000_000 + '"}')
    rss_before = main.rss_mb()
    # through gradio_client: it reads the server's cap and refuses before sending
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="exceeds the maximum file size of 1000000 bytes"):
        c.predict(gradio_client.handle_file(str(big)), api_name="/import_trace")
    assert time.perf_counter() - t0 < 3
    # straight to the upload route, as any HTTP client can: the server refuses it
    t0 = time.perf_counter()
    status, text = _raw_upload(main.url, 30_000_000)
    refused_in = time.perf_counter() - t0
    assert status == 413 and "maximum allowed size of 1000000 bytes" in text, (status, text[:300])
    assert refused_in < 5
    assert main.rss_mb() - rss_before < 30   # a 30 MB body was never held in memory
    assert_serving(main)


def test_an_upload_under_the_cap_is_stored(main):
    status, text = _raw_upload(main.url, 2, b"{}")
    assert status == 200 and json.loads(text)


# ---------------------------------------------------------------- imported traces

def _import(c, tmp_path, text: str):
    f = tmp_path / f"{uuid.uuid4().hex}.json"
    f.write_text(text)
    return c.predict(gradio_client.handle_file(str(f)), api_name="/import_trace")


def _exported(c) -> tuple[str, str]:
    generate(c, max_new_tokens=12, seed=3)
    out = c.predict(api_name="/export_trace")
    path = out if isinstance(out, str) else out["path"] if isinstance(out, dict) else out[0]
    path = path if isinstance(path, str) else path["path"]
    return path, Path(path).read_text(encoding="utf-8")


def test_an_export_names_models_not_server_paths_and_is_deleted_when_old(main, c):
    path, text = _exported(c)
    models = json.loads(text)["models"]
    assert models["target"] == "specdec-target" and models["draft"] == "specdec-draft"
    assert str(ASSETS) not in text and "/root" not in text and "/home" not in text
    deadline = time.time() + 30   # the age (6 s: room for a loaded machine to read the export first) and a sweep
    while time.time() < deadline and Path(path).exists():
        time.sleep(0.5)
    assert not Path(path).exists(), "an export older than SPECDEC_FILE_MAX_AGE_SECONDS was kept"


def test_a_deeply_nested_trace_gets_a_clear_message(c, tmp_path):
    with pytest.raises(AppError, match="nested 100000 levels deep"):
        _import(c, tmp_path, "[" * 100_000 + "]" * 100_000)


def test_a_tampered_trace_is_refused_not_drawn(main, c, tmp_path):
    _, text = _exported(c)
    d = json.loads(text)
    d["rounds"][0]["n_accepted"] = 10**9
    with pytest.raises(AppError, match=r"rounds\[0\]\.n_accepted is 1000000000"):
        _import(c, tmp_path, json.dumps(d))
    d = json.loads(text)
    d["version"] = "1"
    with pytest.raises(AppError, match="the string '1'"):
        _import(c, tmp_path, json.dumps(d))
    assert_serving(main)


# ---------------------------------------------------------------- faults

def test_a_model_that_fails_to_load_leaves_the_server_serving(main, c):
    with pytest.raises(AppError) as err:
        generate(c, preset=BROKEN, max_new_tokens=4)
    msg = str(err.value)
    assert "could not load" in msg.lower() and "SmolLM2" in msg, msg
    assert "/tmp" not in msg and "hub-cache" not in msg, msg   # no server paths in the message
    assert_serving(main)


def test_an_out_of_memory_error_leaves_the_server_serving(main, c):
    with pytest.raises(AppError) as err:
        generate(c, prompt=OOM_PROMPT, max_new_tokens=8)
    assert "out of memory" in str(err.value).lower()
    assert_serving(main)


def test_a_request_cancelled_midway_leaves_the_server_serving(main):
    cl = client(main.url)
    job = cl.submit(*RunRequest(max_new_tokens=240, gamma=1).values(), api_name="/generate")
    deadline = time.time() + 30
    while time.time() < deadline and len(job.outputs()) < 2:
        time.sleep(0.05)
    assert len(job.outputs()) >= 2, "the run never streamed"
    job.cancel()
    time.sleep(0.5)
    assert_serving(main)


# ---------------------------------------------------------------- bad input: a message a person can act on

RUN_INPUTS = [
    (dict(gamma="abc"), "γ (drafts per round) must be a whole number from 1 to 16, got 'abc'"),
    (dict(gamma=None), "γ (drafts per round) is empty"),
    (dict(gamma=2.5), "whole number"),
    (dict(seed="x"), "seed must be a whole number of at least 0, got 'x'"),
    (dict(seed=2**32), "Seed must be a whole number from 0 to 4,294,967,295"),
    (dict(temperature="hot"), "temperature"),
    (dict(max_new_tokens=100_000), "max new tokens must be a whole number from 1 to"),
    (dict(prompt="To be " * 600, max_new_tokens=10), "at most 1024 tokens (SPECDEC_MAX_PROMPT_TOKENS)"),
    (dict(prompt="To be " * 60, max_new_tokens=200), "lower max new tokens"),
]


@pytest.mark.parametrize("changes, message", RUN_INPUTS, ids=[str(ch)[:40] for ch, _ in RUN_INPUTS])
def test_bad_run_input_gets_a_message_naming_it(c, changes, message):
    with pytest.raises(AppError) as err:
        generate(c, **changes)
    assert message in str(err.value), str(err.value)
    assert str(err.value) != "Error"


TABLE = {"headers": ["token", "p", "q"], "data": [["a", 0.5, 0.5], ["b", 0.5, 0.5]]}
LAB_INPUTS = [
    ((TABLE, "abc", 0), "must be a whole number from 1 to 1,000,000, got 'abc'"),
    ((TABLE, 2.5, 0), "must be a whole number from 1 to 1,000,000, got 2.5"),
    ((TABLE, 100, 2**32), "seed must be a whole number from 0 to 4,294,967,295"),
    (({"headers": ["token", "p", "q"], "data": []}, 100, 0), "no rows"),
    ((TABLE, 10**9, 0), "from 1 to 1,000,000, got 1000000000"),
]


@pytest.mark.parametrize("args, message", LAB_INPUTS, ids=[str(a[1:]) + m[:10] for a, m in LAB_INPUTS])
def test_bad_lab_input_gets_a_message_naming_it(c, args, message):
    with pytest.raises(AppError) as err:
        c.predict(*args, api_name="/lab_run")
    assert message in str(err.value), str(err.value)


def test_lab_weights_too_large_to_sum_still_run(c):
    table = {"headers": ["token", "p", "q"], "data": [["a", 1e308, 0.5], ["b", 1e308, 0.5]]}
    status = c.predict(table, 1000, 0, api_name="/lab_run")[0]
    assert "has no mass" not in status and "1,000 trials per rule" in status


# ---------------------------------------------------------------- the page, served this way

def test_the_page_runs_with_checked_inputs_and_no_console_errors(main, visitors):
    """The checked sliders and numbers draw as Gradio's own; a run from the page completes."""
    page = open_page(visitors, main.url)
    try:
        page.wait_for_selector("#gamma input[type=range]", timeout=30_000)
        page.wait_for_selector("#seed input[type=number]", timeout=30_000)
        page.locator("#run").click()
        page.wait_for_function("() => { const s = document.querySelector('#run-status');"
                               " return s && /Done/.test(s.innerText); }", timeout=60_000)
        assert not page.console_errors, page.console_errors
    finally:
        close_page(page)


# ---------------------------------------------------------------- starting a server on a loaded machine

@pytest.mark.parametrize("says, starts", [(serverload.GRADIO_SELF_CHECK, serverload.STARTS), ("some other error", 1)])
def test_only_gradios_timed_out_self_check_is_started_again(tmp_path, says, starts):
    """A stand-in for app.py that exits as Gradio does when its start-up request to its own page
    timed out is started STARTS times in all, then the error is raised; any other exit at once."""
    count = tmp_path / "starts"
    fake = f"open({str(count)!r}, 'a').write('x'); print({says!r}); raise SystemExit(1)"
    with pytest.raises(RuntimeError, match=says):
        serverload.start_server(argv=[__import__("sys").executable, "-c", fake], folder=tmp_path / "server", timeout=60)
    assert count.read_text() == "x" * starts
