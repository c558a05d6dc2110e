"""Shared fixtures: a real app server on a free loopback port, and Debian's chromium via Playwright.

Browser tests are skipped with a clear reason only when chromium is not installed; `.ci/run`
installs it, so in CI they always run.

Markers (pytest.ini): a test that uses the browser gets `browser`, one that needs the app server
gets `slow`, here, from its fixtures; other slow tests and GPU tests carry their marker
themselves. `python -m pytest -m "not slow and not browser"` is the fast subset.
"""

from __future__ import annotations

import os
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

CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).exists()), None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
SCREENSHOTS = ROOT / "assets" / "screenshots"


def pytest_collection_modifyitems(items):
    for item in items:
        if {"browser", "page"} & set(item.fixturenames):
            item.add_marker(pytest.mark.browser)
        if "app_url" in item.fixturenames:
            item.add_marker(pytest.mark.slow)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url():
    """`python app.py` as a user runs it, on a free port, offline; stopped after the session."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    log = open(ROOT / ".pytest_cache" / "app-server.log", "w") if (ROOT / ".pytest_cache").is_dir() \
        else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with code {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("app.py did not serve within 120 s")
        time.sleep(0.5)
    yield url
    proc.terminate()   # Gradio takes a few seconds to exit on SIGTERM
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh page on the app, with console errors collected in `page.console_errors`."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    pg.goto(app_url, wait_until="load")   # never "networkidle": Gradio keeps a heartbeat open
    yield pg
    context.close()


@pytest.fixture(scope="session")
def bundled():
    """The bundled model pair from assets/models/, loaded offline once for the whole session."""
    from specdec import load_pair

    return load_pair(device="cpu")
