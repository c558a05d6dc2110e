"""How fast the page is, against the decoder it shows (`python -m specdec bench-app --browser`).

A real server (`python app.py` of a checkout, on a free loopback port) and Debian's chromium at
1400x1000, driven by Playwright:

- page ÷ decoder: a click on Run until the finished run is shown (the status says Done and the
  browser has painted the next frame), against the library's traced run of the same settings and
  seed, timed in this process, the same minute, on the same machine. Each timed run has a seed of
  its own, so no cache can answer it: the page decodes every one.
- the longest freeze: the longest task on the page's main thread while a run streams and ends,
  and when a round opens (Chromium's `longtask` entries).
- a class: 30 visitors (gradio_client) sending the same request at once, the slowest against one
  visitor alone; then 30 different requests at once, the last against one decode.

`--app-root` points at another checkout (e.g. a worktree of an older commit), so the same command
measures the code before and after a change, in one run of this machine. The figures are ratios
taken within one run; they are printed, never asserted (speed is not a test).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPT = "To be, or not to be"
CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).exists()), None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# Page script: every long task (Chromium's 'longtask' entries, over 50 ms) with its start and length.
LONGTASKS = """
window.__longtasks = [];
try { new PerformanceObserver((list) => { for (const e of list.getEntries())
          window.__longtasks.push([e.startTime, e.duration]); })
      .observe({type: 'longtask', buffered: true}); } catch (e) {}
"""

# Click Run; resolve with [t0, ms] from the click until the status says Done (after it has said
# something else: the previous run's Done does not count) and the page has settled: three frames in
# a row, each within 50 ms of the last (Plotly draws synchronously: a chart being drawn delays the frame).
CLICK_TO_DONE = """
() => new Promise((resolve) => {
  const box = document.querySelector('#run-status');
  const status = box.querySelector('[data-testid="markdown"], .prose') || box;   // not the progress overlay
  const t0 = performance.now();
  let started = false;
  const done = () => /^\\s*(Done|Stopped)/.test(status.innerText);
  const settle = () => {
    let last = performance.now(), calm = 0, since = last;
    const frame = (now) => {
      if (now - last < 50) { calm += 1; } else { calm = 0; since = now; }
      last = now;
      if (calm >= 3) resolve([t0, since - t0]); else requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  };
  const watch = new MutationObserver(() => {
    if (!done()) { started = true; return; }
    if (started) { watch.disconnect(); settle(); }
  });
  watch.observe(box, {childList: true, subtree: true, characterData: true});
  document.querySelector('#run').click();
})
"""


# ---------------------------------------------------------------- a server of a checkout

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """`python app.py` of the checkout at `root`, offline, on a free port; (process, url) once it serves."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py in {root} exited with code {proc.returncode}: see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"app.py in {root} did not serve within 180 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


# ---------------------------------------------------------------- the page

def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]").first
    box.fill(str(value))
    box.press("Tab")


def page_run(page, tokens: int, seed: int) -> tuple[float, float]:
    """(seconds from the click to the finished run shown, the longest main-thread task in seconds)."""
    set_number(page, "max-new", tokens)
    set_number(page, "seed", seed)
    page.wait_for_timeout(300)   # the number boxes' change events settle
    t0, ms = page.evaluate(CLICK_TO_DONE)
    longest = page.evaluate("(t0) => Math.max(0, ...window.__longtasks.filter(([s, d]) => s + d >= t0)"
                            ".map(([s, d]) => d))", t0)
    return ms / 1000, longest / 1000


def browser_figures(url: str, sizes: list[int], repeats: int, seed: int) -> dict:
    """{tokens: ([page seconds], [longest task seconds])}, after one untimed run (Plotly's JS loads)."""
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.add_init_script(LONGTASKS)
            page.goto(url, wait_until="load")
            page.wait_for_selector("#run")
            page.wait_for_selector("#timeline .js-plotly-plot", timeout=60_000)
            page_run(page, 8, seed + 999)   # untimed: the first render loads Plotly
            for tokens in sizes:
                runs = [page_run(page, tokens, seed + tokens + k) for k in range(repeats)]
                out[tokens] = ([r[0] for r in runs], [r[1] for r in runs])
            out["rounds"] = rounds_opened(page, ROUNDS_OPENED)
        finally:
            browser.close()
    return out


ROUNDS_OPENED = 5


def rounds_opened(page, times: int) -> list[float]:
    """The longest main-thread task (seconds) after each of `times` clicks on "next round", each
    given 2 s to draw (the last run has more rounds than that)."""
    out = []
    for _ in range(times):
        t0 = page.evaluate("() => performance.now()")
        page.locator("#next-round").click()
        page.wait_for_timeout(2000)
        out.append(page.evaluate("(t0) => Math.max(0, ...window.__longtasks.filter(([s, d]) => s >= t0)"
                                 ".map(([s, d]) => d))", t0) / 1000)
    return out


# ---------------------------------------------------------------- the decoder, and a class

def decoder_seconds(sizes: list[int], repeats: int, seed: int) -> dict:
    """{tokens: [seconds]}: the library's traced run of the same settings and seeds as the page's."""
    import torch

    from ..decoding import speculative_generate
    from ..models import BUNDLED, load_pair
    from ..settings import RunSettings

    torch.set_num_threads(1)   # the app's default (SPECDEC_THREADS)
    pair = load_pair(preset=BUNDLED)
    speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=8))   # warm, as the app is
    out = {}
    for tokens in sizes:
        out[tokens] = []
        for k in range(repeats):
            t0 = time.perf_counter()
            speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=tokens, seed=seed + tokens + k))
            out[tokens].append(time.perf_counter() - t0)
    return out


def class_figures(url: str, size: int, seed: int) -> dict:
    """One visitor alone, then `size` identical and `size` distinct requests at once (64 tokens each):
    seconds from the send to each result."""
    from gradio_client import Client

    from ..app.api import RunRequest

    clients = [Client(url, verbose=False) for _ in range(size)]

    def send(pair):
        """Seconds until the result; None when the request failed (refused, or it timed out)."""
        client, request = pair
        t0 = time.perf_counter()
        try:
            client.predict(*request.values(), api_name="/generate")
        except Exception as err:   # a refused or timed-out request is counted, not fatal
            print(f"    a request failed: {type(err).__name__}: {str(err)[:120]}", flush=True)
            return None
        return time.perf_counter() - t0

    alone = send((clients[0], RunRequest(seed=seed)))
    with ThreadPoolExecutor(size) as pool:
        same = list(pool.map(send, [(c, RunRequest(seed=seed + 1)) for c in clients]))
        distinct = list(pool.map(send, [(c, RunRequest(seed=seed + 2 + k)) for k, c in enumerate(clients)]))
    return dict(alone=alone, same=same, distinct=distinct)


# ---------------------------------------------------------------- the command

def run(args) -> int:
    if CHROMIUM is None:
        raise ValueError("Debian's chromium is not installed (apt-get install chromium)")
    root = Path(args.app_root or Path(__file__).resolve().parents[2]).resolve()
    if not (root / "app.py").is_file():
        raise ValueError(f"--app-root {root} holds no app.py")
    sizes, repeats, seed = [64, 200], max(1, args.repeats), 1000 + args.seed
    log = Path(tempfile.mkdtemp(prefix="specdec-bench-app-")) / "server.log"
    print(f"specdec page benchmark: {root} (bundled pair, γ=4, T=1, chromium 1400x1000, {os.cpu_count()} CPU "
          f"cores, medians of {repeats}; server log {log})", flush=True)
    proc, url = start_server(root, log)
    try:
        page = browser_figures(url, sizes, repeats, seed)
        decoder = decoder_seconds(sizes, repeats, seed)
        print_page(sizes, page, decoder)
        if args.class_size:
            print_class(class_figures(url, args.class_size, seed + 5000), statistics.median(decoder[64]))
    finally:
        stop_server(proc)
    return 0


def print_page(sizes: list[int], page: dict, decoder: dict) -> None:
    for tokens in sizes:
        p, d = statistics.median(page[tokens][0]), statistics.median(decoder[tokens])
        print(f"  {tokens:>4} tokens: page {p:6.2f} s, decoder {d:6.3f} s → page ÷ decoder {p / d:5.1f}  "
              f"(page runs: {', '.join(f'{x:.2f}' for x in page[tokens][0])} s)")
    longest = max(x for tokens in sizes for x in page[tokens][1])
    print(f"  longest main-thread task while a run streams and ends: {longest:.2f} s", flush=True)
    print(f"  longest main-thread task when a round opens ('next round', {len(page['rounds'])} times): "
          f"{max(page['rounds']):.2f} s", flush=True)


def print_class(crowd: dict, one: float) -> None:
    alone, n = crowd["alone"], len(crowd["same"])
    print(f"  one visitor alone (64 tokens): {alone:.2f} s" if alone else "  one visitor alone: failed")
    for name, times, unit, per in (("identical", crowd["same"], "one visitor alone", alone),
                                   ("distinct", crowd["distinct"], f"one decode ({one:.3f} s)", one)):
        served = [t for t in times if t is not None]
        worst = max(served) if served else float("nan")
        ratio = worst / per if per else float("nan")
        print(f"  {n} {name} at once: {len(served)} served, the slowest after {worst:.2f} s = {ratio:.1f}× {unit}",
              flush=True)
