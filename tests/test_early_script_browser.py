"""The page's first script (specdec/app/page/static/early.js, put first in its <head> by
`early.EarlyScript`): Gradio 6.31's loading screen leaves its status tracker's timer running, a
frame every 1/60 s for as long as the page is open, and a pending event whose progress is hidden
runs the same loop with nothing to show; with the script both end, and a live status tracker's
timer still counts. On a small Gradio app served in this process, in chromium, with and without
the middleware (the control: without it the loops run)."""

from __future__ import annotations

import threading

import pytest

gr = pytest.importorskip("gradio")

from conftest import free_port  # noqa: E402
from specdec.app.page import early  # noqa: E402
from specdec.app.page.layout import launch_kwargs  # noqa: E402

# Counts the frames Gradio's status tracker asks for (its script's name in the caller's stack), and
# the frames the browser draws (a loop of its own, the clock the count is read against: a loaded
# machine draws fewer frames a second, and a running tracker then asks for fewer too). An init
# script runs before any of the page's own, early.js included, so it sees every request.
COUNT_TRACKER_FRAMES = """(() => { window.__trackerFrames = 0; window.__frames = 0;
  const request = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    if ((new Error().stack || '').includes('statustracker')) window.__trackerFrames += 1;
    return request(callback); };
  const tick = () => { window.__frames += 1; request(tick); }; request(tick); })();"""
FRAMES = "() => [window.__trackerFrames, window.__frames]"
DRAWN = 60   # the frames a reading spans: a second at 60 a second (as before), longer on a loaded machine
TIMER = '[data-testid="status-tracker"] .progress-text'


def served(with_script: bool, release: threading.Event):
    """A button whose event stays pending until `release` is set: its output's status tracker times
    it. And one whose event does the same with its progress hidden (`show_progress="hidden"`, as the
    app's quiet events): its tracker is pending but shows nothing."""
    with gr.Blocks() as demo:
        out = gr.Textbox(label="out")
        gr.Button("go").click(lambda: "done" if release.wait(60) else "timed out", None, out)
        quiet = gr.Textbox(label="quiet")
        gr.Button("quiet").click(lambda: "done" if release.wait(60) else "timed out", None, quiet,
                                 show_progress="hidden")
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False,
                app_kwargs=early.app_kwargs() if with_script else None)
    return demo, f"http://127.0.0.1:{port}/"


def frames_while_idle(browser, url: str, click: str | None = None) -> tuple[int, int]:
    """The status tracker's frame requests while the browser draws DRAWN frames, once the page has
    loaded (and the button `click`, if any, was clicked) and sat 1 s: (requests, frames drawn)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.add_init_script(COUNT_TRACKER_FRAMES)
        page.goto(url, wait_until="load")
        page.get_by_role("button", name="go", exact=True).wait_for()
        if click is not None:
            page.get_by_role("button", name=click, exact=True).click()
        page.wait_for_timeout(1000)
        tracker, drawn = page.evaluate(FRAMES)
        page.wait_for_function(f"() => window.__frames >= {drawn + DRAWN}", timeout=30_000)
        tracker_after, drawn_after = page.evaluate(FRAMES)
        return tracker_after - tracker, drawn_after - drawn
    finally:
        context.close()


def test_the_loading_screens_timer_stops_once_the_page_has_loaded_and_a_live_timer_still_counts(browser):
    release = threading.Event()
    plain, plain_url = served(False, release)
    fixed, fixed_url = served(True, release)
    try:
        # The control: Gradio's own page asks for a frame at every frame the browser draws (half
        # of them is far below that, and far above the none a stopped loop asks for). Counted
        # against the frames drawn, not a second of the clock: on a loaded machine (three test
        # workers on two cores) chromium drew 19 frames in a second.
        requests, drawn = frames_while_idle(browser, plain_url)
        assert requests >= drawn / 2, (requests, drawn)
        requests, drawn = frames_while_idle(browser, fixed_url)
        assert requests == 0, (requests, drawn)
        # A pending event whose progress is hidden: Gradio's page times it at every frame too, with
        # nothing to show (the app's page had one from its load on, ~12 % of a core in chromium
        # while it sat idle); with the script none.
        requests, drawn = frames_while_idle(browser, plain_url, click="quiet")
        assert requests >= drawn / 2, (requests, drawn)
        requests, drawn = frames_while_idle(browser, fixed_url, click="quiet")
        assert requests == 0, (requests, drawn)
        context = browser.new_context()
        page = context.new_page()
        page.goto(fixed_url, wait_until="load")
        page.get_by_role("button", name="go", exact=True).click()
        timer = page.locator(TIMER).first
        timer.wait_for(state="attached")
        first = timer.inner_text()
        page.wait_for_timeout(500)   # the timer shows tenths of a second
        assert timer.inner_text() != first, "a pending event's timer stopped counting"
        release.set()
        page.wait_for_function("() => [...document.querySelectorAll('textarea')].some(t => t.value === 'done')")
        context.close()
    finally:
        release.set()
        plain.close()
        fixed.close()


def test_the_script_goes_first_in_the_page_and_nowhere_else():
    html = b"<!doctype html><html><head><title>x</title></head><body><head></body></html>"
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(html)).encode())]
    body, out = early.with_script(html, headers)
    assert body == html.replace(b"<head>", b"<head>" + early.TAG, 1)
    assert dict(out)[b"content-length"] == str(len(body)).encode()
    assert early.with_script(b"", headers, head_only=True) == (b"", out)   # HEAD: GET's length, no body
    for kept in ([(b"content-type", b"application/json")],
                 [(b"content-type", b"text/html"), (b"content-encoding", b"gzip")]):
        assert early.with_script(html, kept) == (html, kept)
    middleware = launch_kwargs()["app_kwargs"]["middleware"]   # app.py's page has it
    assert [m.cls for m in middleware] == [early.EarlyScript]
