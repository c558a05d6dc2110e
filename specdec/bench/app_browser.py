"""How fast the page is, against the decoder it shows (`python -m specdec bench-app --browser`).

A real server (`python app.py` of a checkout, on a free loopback port) and Debian's chromium at
1400x1000, driven by Playwright:

- page ÷ decoder: a click on Run until the finished run is shown (the status says Done and the
  browser has painted the next frame), against the library's traced run of the same settings and
  seed, timed in this process, the same minute, on the same machine. Each timed run has a seed of
  its own, so no cache can answer it: the page decodes every one. Beside it, the same until the
  step viewer's charts, which follow "Done" one event each, are drawn too.
- the longest freeze: the longest task on the page's main thread while a run streams and ends,
  and when a round opens (Chromium's `longtask` entries).
- a class: 30 visitors sending the same request at once, the slowest against one visitor alone;
  then 30 different requests at once, the last against one decode. A visitor is a lean client of
  Gradio's queue protocol (`visit`: join, then read the event stream to the end), as a student's
  browser is on the server's side. gradio_client, which the figures used until 2026-11, spends
  about 70 ms of CPU per request in its own threads (polling, heartbeats); thirty of them in one
  process on the server's 2 cores took as much CPU as the server did, and they measured themselves
  (`--gradio-client` measures with it still, for comparison).

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
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPT = "To be, or not to be"

CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).exists()), None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def what_runs(preset: str | None) -> dict:
    """The pair, prompt and drafter every timed run uses: the bundled pair's Shakespeare with its draft
    model, or a real chat model asked a question with its features drafter (γ 4, T = 1 for both): one
    whose answer runs long ("What is the capital of France?" ends after 8 tokens, so the page's 64- and
    200-token runs would time an answer of a few tokens)."""
    from ..explain.measure import CHAT_PROMPTS
    from ..models.pair import BUNDLED, PRESETS

    if preset in (None, BUNDLED):
        return {"preset": BUNDLED, "prompt": PROMPT, "drafter": "model"}
    if preset not in PRESETS or PRESETS[preset].source is None:
        raise ValueError(f"--preset {preset!r}: the page benchmark runs the bundled pair or a real model "
                         f"({', '.join(k for k, p in PRESETS.items() if p.source)})")
    return {"preset": preset, "prompt": CHAT_PROMPTS[1], "drafter": "features"}   # a cup of tea


# Page script: every long task (Chromium's 'longtask' entries, over 50 ms) with its start and length.
LONGTASKS = """
window.__longtasks = [];
try { new PerformanceObserver((list) => { for (const e of list.getEntries())
          window.__longtasks.push([e.startTime, e.duration]); })
      .observe({type: 'longtask', buffered: true}); } catch (e) {}
"""

# Click Run; resolve with [t0, ms, silent] from the click until the status says Done (after it has said
# something else: the previous run's Done does not count) and the page has settled: three frames in
# a row, each within 50 ms of the last (Plotly draws synchronously: a chart being drawn delays the frame).
# It also watches the step charts, which come after "Done" (`DRAWN_AFTER`), and `silent`: the longest
# the status line said the same thing between the click and "Done", in ms.
STEP_CHARTS = ("pq-chart", "accept-chart", "end-chart")

CLICK_TO_DONE = """
() => new Promise((resolve) => {
  const STEP_CHARTS = """ + str(list(STEP_CHARTS)) + """;
  const box = document.querySelector('#run-status');
  const status = box.querySelector('[data-testid="markdown"], .prose') || box;   // not the progress overlay
  const t0 = performance.now();
  let started = false;
  // The step charts come after "Done", one event each: the last change to any of them, for "all drawn".
  window.__lastStepChart = t0;
  const charts = new MutationObserver(() => { window.__lastStepChart = performance.now(); });
  for (const id of STEP_CHARTS) charts.observe(document.getElementById(id), {childList: true, subtree: true});
  window.__stepCharts = charts;
  const done = () => /^\\s*(Done|Stopped)/.test(status.innerText);
  const settle = () => {
    let last = performance.now(), calm = 0, since = last;
    const frame = (now) => {
      if (now - last < 50) { calm += 1; } else { calm = 0; since = now; }
      last = now;
      if (calm >= 3) resolve([t0, since - t0, silent]); else requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  };
  // The longest the status line went unchanged between the click and "Done".
  let said = status.innerText, saidAt = t0, silent = 0;
  const watch = new MutationObserver(() => {
    const now = performance.now(), text = status.innerText;
    if (text !== said) { silent = Math.max(silent, now - saidAt); said = text; saidAt = now; }
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
                    wait_idle(proc.pid)
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"app.py in {root} did not serve within 180 s")


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by a process and its children (Linux's /proc; 0 where there is none)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").iterdir():   # a child belongs to the thread that started it
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def wait_idle(pid: int, seconds: float = 120) -> None:
    """Until the server has finished starting: its page answers before its pair is warm and its
    decoding workers (`specdec.app.server.workers`) have loaded, and a page timed meanwhile shares the
    cores with them. Idle: under 0.1 s of CPU in a second, the server and its children together."""
    deadline, last = time.time() + seconds, cpu_seconds(pid)
    while time.time() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - last < 0.1:
            return
        last = now


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


# No event of the page shows progress on its status line any more (Gradio's tracker there hidden): a
# link's run, or the last run, has ended. Gradio drops a click on Run while its last run's event is
# still pending, and a link's run sets the controls when it ends: without this wait, on a real
# model's link each timed run measured the end of the run before it (a 64-token run timed 2.9 s,
# the end of the previous one, against the 6.3 s it takes to decode).
IDLE = """() => { const s = document.querySelector('#run-status');
  return s && [...s.querySelectorAll('.wrap')].every(w => w.classList.contains('hide')); }"""


def page_run(page, tokens: int, seed: int) -> tuple[float, float, float, float]:
    """(seconds from the click to the finished run shown, the longest main-thread task in seconds,
    seconds from the click until the step charts are drawn too, the longest the status line said
    the same thing before "Done", in seconds)."""
    page.wait_for_function(IDLE, timeout=600_000)
    set_number(page, "max-new", tokens)
    set_number(page, "seed", seed)
    page.wait_for_timeout(300)   # the number boxes' change events settle
    shown = [page.locator(f"#{i} input[type=number]").first.input_value() for i in ("max-new", "seed")]
    if shown != [str(tokens), str(seed)]:
        raise RuntimeError(f"the page holds max-new {shown[0]} and seed {shown[1]}, not {tokens} and {seed}")
    t0, ms, silent = page.evaluate(CLICK_TO_DONE)
    page.wait_for_timeout(DRAWN_AFTER)
    drawn = max(ms, page.evaluate("(t0) => { window.__stepCharts.disconnect(); return window.__lastStepChart - t0; }",
                                  t0))
    longest = page.evaluate("(t0) => Math.max(0, ...window.__longtasks.filter(([s, d]) => s + d >= t0)"
                            ".map(([s, d]) => d))", t0)
    return ms / 1000, longest / 1000, drawn / 1000, silent / 1000


# Milliseconds after "Done" that the last step chart may still change (drawn, then Gradio's resize of
# it 100 ms later): the step charts' events come after the run's, one at a time.
DRAWN_AFTER = 1500


def browser_figures(url: str, sizes: list[int], repeats: int, seed: int, runs: dict | None = None) -> dict:
    """{tokens: ([page seconds], [longest task seconds])}, after one untimed run (Plotly's JS loads; a
    real model's first run loads it). `runs` (`what_runs`): the page opens on them by its link."""
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.add_init_script(LONGTASKS)
            runs = runs or what_runs(None)   # a link opens the page on another pair than the bundled one
            link = "" if runs == what_runs(None) else "?" + urllib.parse.urlencode(
                {"pair": runs["preset"], "prompt": runs["prompt"], "drafter": runs["drafter"]})
            page.goto(url + link, wait_until="load")
            page.wait_for_selector("#run")
            page.wait_for_selector("#timeline .js-plotly-plot", timeout=60_000)
            page_run(page, 8, seed + 999)   # untimed: the first render loads Plotly
            for tokens in sizes:
                runs = [page_run(page, tokens, seed + tokens + k) for k in range(repeats)]
                out[tokens] = tuple([r[k] for r in runs] for k in range(4))
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

def decoder_seconds(sizes: list[int], repeats: int, seed: int, runs: dict | None = None) -> dict:
    """{tokens: [seconds]}: the library's traced run of the same settings and seeds as the page's."""
    import torch

    from ..core.settings import RunSettings
    from ..decoding.loop import speculative_generate
    from ..models.pair import load_pair

    runs = runs or what_runs(None)
    torch.set_num_threads(1)   # the app's default (SPECDEC_THREADS)
    pair = load_pair(preset=runs["preset"])
    prompt, drafter = runs["prompt"], runs["drafter"]
    speculative_generate(pair, prompt, RunSettings(gamma=4, max_new_tokens=8, drafter=drafter))   # warm, as the app is
    out = {}
    for tokens in sizes:
        out[tokens] = []
        for k in range(repeats):
            t0 = time.perf_counter()
            speculative_generate(pair, prompt, RunSettings(gamma=4, max_new_tokens=tokens, seed=seed + tokens + k,
                                                           drafter=drafter))
            out[tokens].append(time.perf_counter() - t0)
    return out


class Endpoint:
    """The server's /generate as Gradio's queue takes it: its event's index and where its inputs
    hold a session state (the visitor's list of running requests), which a request sends empty."""

    def __init__(self, url: str, api_name: str = "generate"):
        import json

        with urllib.request.urlopen(url + "config", timeout=30) as r:
            config = json.load(r)
        kinds = {c["id"]: c["type"] for c in config["components"]}
        dep = next(d for d in config["dependencies"] if d.get("api_name") == api_name)
        self.url, self.fn_index = url + config.get("api_prefix", "/gradio_api").strip("/") + "/", dep["id"]
        self.states = [i for i, component in enumerate(dep["inputs"]) if kinds[component] == "state"]

    def data(self, values: list) -> list:
        data = list(values)
        for i in self.states:
            data.insert(i, None)
        return data


def visit(endpoint: Endpoint, values: list) -> float:
    """One visitor's request, as a page sends it: join the queue (a session of its own), then read
    the event stream until the run's last message. Seconds until then; raises when refused or failed.
    The standard library's HTTP client: on a loopback server it costs next to no CPU (httpx makes a
    TLS context per client, 20-40 ms here, even for plain HTTP)."""
    import http.client
    import json
    import uuid

    session = uuid.uuid4().hex
    where = urllib.parse.urlsplit(endpoint.url)
    t0 = time.perf_counter()
    join = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    events = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    try:
        body = json.dumps({"data": endpoint.data(values), "fn_index": endpoint.fn_index, "session_hash": session,
                           "event_data": None, "trigger_id": None})
        join.request("POST", where.path + "queue/join", body, {"Content-Type": "application/json"})
        joined = join.getresponse()
        if joined.status != 200:
            raise RuntimeError(f"queue/join answered {joined.status}: {joined.read()[:120]!r}")
        event = json.loads(joined.read())["event_id"]
        events.request("GET", where.path + "queue/data?" + urllib.parse.urlencode({"session_hash": session}))
        stream = events.getresponse()
        for line in iter(stream.readline, b""):
            if not line.startswith(b"data:"):
                continue
            message = json.loads(line[5:])
            if message.get("event_id") == event and message.get("msg") == "process_completed":
                if not message.get("success"):
                    raise RuntimeError(str(message.get("output", {}).get("error"))[:120])
                return time.perf_counter() - t0
    finally:
        join.close()
        events.close()
    raise RuntimeError("the event stream ended before the run did")


def class_figures(url: str, size: int, seed: int, gradio_client: bool = False, runs: dict | None = None) -> dict:
    """One visitor alone, then `size` identical and `size` distinct requests at once (64 tokens each):
    seconds from the send to each result. `gradio_client`: the visitors are gradio_client Clients."""
    from ..app.server.api import RunRequest

    if gradio_client:
        from .app_client import app_client

        clients = [app_client(url) for _ in range(size)]

        def request(k, values):
            clients[k].predict(*values, api_name="/generate")
    else:
        endpoint = Endpoint(url)

        def request(k, values):
            visit(endpoint, values)

    def send(pair):
        """Seconds until the result; None when the request failed (refused, or it timed out)."""
        k, run = pair
        t0 = time.perf_counter()
        try:
            request(k, run.values())
        except Exception as err:   # a refused or timed-out request is counted, not fatal
            print(f"    a request failed: {type(err).__name__}: {str(err)[:120]}", flush=True)
            return None
        return time.perf_counter() - t0

    runs = runs or what_runs(None)
    alone = send((0, RunRequest(seed=seed, **runs)))
    with ThreadPoolExecutor(size) as pool:
        same = list(pool.map(send, [(k, RunRequest(seed=seed + 1, **runs)) for k in range(size)]))
        distinct = list(pool.map(send, [(k, RunRequest(seed=seed + 2 + k, **runs)) for k in range(size)]))
    return dict(alone=alone, same=same, distinct=distinct,
                clients="gradio_client" if gradio_client else "lean clients of Gradio's queue protocol")


# ---------------------------------------------------------------- the command

def run(args) -> int:
    if CHROMIUM is None:
        raise ValueError("Debian's chromium is not installed (apt-get install chromium)")
    root = Path(args.app_root or Path(__file__).resolve().parents[2]).resolve()
    if not (root / "app.py").is_file():
        raise ValueError(f"--app-root {root} holds no app.py")
    sizes, repeats, seed = [64, 128, 200], max(1, args.repeats), 1000 + args.seed   # 128: the goal's answer
    runs = what_runs(getattr(args, "preset", None))
    log = Path(tempfile.mkdtemp(prefix="specdec-bench-app-")) / "server.log"
    print(f"specdec page benchmark: {root} ({runs['preset']} pair, {runs['drafter']} drafter, γ=4, T=1, "
          f"chromium 1400x1000, {os.cpu_count()} CPU "
          f"cores, medians of {repeats}; server log {log})", flush=True)
    proc, url = start_server(root, log)
    try:
        page = browser_figures(url, sizes, repeats, seed, runs)
        decoder = decoder_seconds(sizes, repeats, seed, runs)
        print_page(sizes, page, decoder)
        if args.class_size:
            print_class(class_figures(url, args.class_size, seed + 5000, args.gradio_client, runs),
                        statistics.median(decoder[64]))
    finally:
        stop_server(proc)
    return 0


def print_page(sizes: list[int], page: dict, decoder: dict) -> None:
    for tokens in sizes:
        p, d = statistics.median(page[tokens][0]), statistics.median(decoder[tokens])
        a = statistics.median(page[tokens][2])
        print(f"  {tokens:>4} tokens: page {p:6.2f} s, decoder {d:6.3f} s → page ÷ decoder {p / d:5.1f}  "
              f"(page runs: {', '.join(f'{x:.2f}' for x in page[tokens][0])} s); "
              f"the step charts drawn too: {a:.2f} s, ÷ decoder {a / d:.1f}")
    longest = max(x for tokens in sizes for x in page[tokens][1])
    print(f"  longest main-thread task while a run streams and ends: {longest:.2f} s", flush=True)
    silent = max(x for tokens in sizes for x in page[tokens][3])
    print(f"  longest the status line went unchanged between the click and Done: {silent:.2f} s", flush=True)
    print(f"  longest main-thread task when a round opens ('next round', {len(page['rounds'])} times): "
          f"{max(page['rounds']):.2f} s", flush=True)


def print_class(crowd: dict, one: float) -> None:
    alone, n = crowd["alone"], len(crowd["same"])
    print(f"  a class of {n} ({crowd['clients']}):")
    print(f"  one visitor alone (64 tokens): {alone:.2f} s" if alone else "  one visitor alone: failed")
    for name, times, unit, per in (("identical", crowd["same"], "one visitor alone", alone),
                                   ("distinct", crowd["distinct"], f"one decode ({one:.3f} s)", one)):
        served = [t for t in times if t is not None]
        worst = max(served) if served else float("nan")
        ratio = worst / per if per else float("nan")
        print(f"  {n} {name} at once: {len(served)} served, the slowest after {worst:.2f} s = {ratio:.1f}× {unit}",
              flush=True)
