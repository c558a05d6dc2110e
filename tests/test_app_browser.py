"""The real app in a real browser (Debian chromium via Playwright): runs, step viewer, skip toggle,
export/import and escaping. Takes the README's screenshots into the `screenshots` folder (a
temporary one; `python scripts/screenshots.py` refreshes assets/screenshots/ with them)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import layout_check
from conftest import close_page, open_page, wait_app_idle
from specdec.bench.app_browser import IDLE  # Gradio's tracker on the status line is hidden

RUN_TIMEOUT = 120_000   # ms: the CPU is shared
DEFAULT_RUN_SEED = 24   # no other test runs the default settings with it


def plot_data(page, elem_id: str) -> list[dict]:
    """The traces Plotly drew in a gr.Plot (name, x, y, and a few extras)."""
    return page.evaluate(
        """(id) => {
            const gd = document.querySelector('#' + id + ' .js-plotly-plot');
            if (!gd || !gd.data) return null;
            return gd.data.map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []),
                                      customdata: t.customdata || null, meta: t.meta || null}));
        }""", elem_id)


def plot_title(page, elem_id: str) -> str:
    return page.evaluate("(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');"
                         " const t = gd && gd.layout && gd.layout.title; return t ? (t.text || '') : ''; }", elem_id)


def wait_plot(page, elem_id: str, names: list[str]) -> None:
    page.wait_for_function(
        """([id, names]) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
            return gd && gd.data && names.every(n => gd.data.some(t => t.name === n)); }""",
        arg=[elem_id, names], timeout=RUN_TIMEOUT)


def wait_ended(page, said: str) -> None:
    """Until the status line matches the regular expression `said` and Gradio's progress tracker
    on it is hidden, i.e. the run's event has ended. A run's last words ("Done:", "From the cache",
    "Stopped:") come with its last update, while the event still shows as generating (133 ms later
    on a quiet machine, more under load), and Gradio drops a click on Run in between (its
    trigger_mode "once"): tests that clicked Run again at once waited 120 s for a run that never
    started."""
    page.wait_for_function("(said) => { const s = document.querySelector('#run-status');"
                           f" return s && new RegExp(said).test(s.innerText) && ({IDLE})(); }}",
                           arg=said, timeout=RUN_TIMEOUT)


def steps_shown(page) -> int:
    """How many step views the page has shown in full (`window.specdecStepsShown`): read before a
    click, then `wait_steps_shown`."""
    return page.evaluate("() => window.specdecStepsShown || 0")


def wait_steps_shown(page, before: int) -> None:
    """Until the page has shown one more step view than `before`: the step figures follow "Done"
    (and a new round's caption), one event each, and the page counts one more once the last is
    drawn (specdec/app/page/layout.py, `STEPS_SHOWN`)."""
    page.wait_for_function("(n) => (window.specdecStepsShown || 0) > n", arg=before, timeout=RUN_TIMEOUT)


def click_run(page) -> None:
    """Click Run, then wait until the run is done and its step view drawn."""
    shown = steps_shown(page)
    page.locator("#run").click()
    wait_done(page)
    wait_steps_shown(page, shown)


def wait_done(page) -> None:
    """Until the run has ended (`wait_ended`) with its own "Done:" or "Imported", not the bare
    "Done" that Gradio's progress tracker shows there when any event on it completes (the page's
    load)."""
    wait_ended(page, "Done:|Imported")


# Whether the page showed the run while it streamed: the status line at "Round k" with the text
# and the timeline already drawn. Looked at after every change of the page (a MutationObserver
# runs after each task that changed it), not at animation frames: on a loaded machine the browser
# may draw no frame between two updates of the stream. `window.__statuses`: the status lines seen.
WATCH_STREAM = """() => { window.__streamed = false; window.__statuses = [];
  const status = document.querySelector('#run-status');
  const look = () => { const s = status.innerText, gd = document.querySelector('#timeline .js-plotly-plot');
    if (window.__statuses[window.__statuses.length - 1] !== s) window.__statuses.push(s);
    if (/Round \\d+/.test(s) && gd && gd.data && gd.data.length > 0
        && document.querySelectorAll('#token-text .tok[data-round]').length > 0) {
      window.__streamed = true; seen.disconnect(); } };
  const seen = new MutationObserver(look);
  seen.observe(document.body, {childList: true, subtree: true, characterData: true}); }"""


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]").first
    box.fill(str(value))
    box.press("Tab")


# Records what the page's live regions (read aloud by screen readers) say, into window.__said.
ANNOUNCEMENTS = """() => { window.__said = [];
    new MutationObserver(ms => { for (const m of ms) {
        const el = m.target.nodeType === 3 ? m.target.parentElement : m.target;
        const live = el && el.closest && el.closest('[aria-live]');
        if (live) window.__said.push(live.textContent.trim()); } })
      .observe(document.body, {subtree: true, childList: true, characterData: true}); }"""


def test_enter_in_a_number_box_applies_the_number(still):
    """Typed and confirmed with Enter, a number takes effect at once (Gradio applies a slider's
    typed number when its box loses focus: 99 stayed in γ's box beside a slider at 16), and the
    focus stays where the keyboard left it."""
    page = still
    box = page.locator("#gamma input[type=number]").first
    box.wait_for()
    box.click()
    box.fill("99")
    box.press("Enter")
    page.wait_for_function("() => document.querySelector('#gamma input[type=number]').value === '16'", timeout=5_000)
    assert page.evaluate("() => document.activeElement === document.querySelector('#gamma input[type=number]')")


def wait_slider_max(page, elem_id: str, most: int) -> None:
    page.wait_for_function("([id, m]) => document.querySelector('#' + id + ' input[type=range]').max === String(m)",
                           arg=[elem_id, most], timeout=30_000)


def test_the_max_new_tokens_slider_leaves_room_for_the_prompt(page, bundled):
    """The slider's maximum is what the bundled pair's context leaves after the prompt: on page
    load, and as a long prompt is typed; the value moves down with it, and a run of it decodes."""
    def room(prompt: str) -> int:   # as the decoder counts the prompt
        return bundled.context_length - len(bundled.encode(prompt)[1])

    page.wait_for_selector("#max-new input[type=range]", state="attached")
    default = page.locator("#prompt textarea").input_value()
    wait_slider_max(page, "max-new", room(default))
    assert f"this prompt takes {len(bundled.encode(default)[1])}, leaving {room(default)}" in \
        page.locator("#max-new").inner_text()
    set_number(page, "max-new", room(default))
    # ~180 of the bundled pair's 256-token context: the run below fills the ~75 left
    long = "First Citizen:\nBefore we proceed any further, hear me speak. " * 9
    box = page.locator("#prompt textarea")
    box.fill(long[:-12])
    box.press_sequentially(long[-12:])   # a change event a key, in quick succession: the last one's answer stays
    wait_slider_max(page, "max-new", room(long))
    page.wait_for_function("(m) => document.querySelector('#max-new input[type=number]').value === String(m)",
                           arg=room(long), timeout=10_000)
    assert f"leaving {room(long)}." in page.locator("#max-new").inner_text()
    page.locator("#run").click()
    wait_done(page)
    assert f"Done: {room(long)} tokens" in page.locator("#run-status").inner_text()
    assert page.console_errors == []


def run(page, prompt: str | None = None, max_new: int | None = None, skip: bool = False) -> None:
    page.wait_for_selector("#run")
    if prompt is not None:
        page.locator("#prompt textarea").fill(prompt)
    if max_new is not None:
        set_number(page, "max-new", max_new)
    if skip:
        page.locator("#skip-adjustment input[type=checkbox]").check()
    click_run(page)
    wait_plot(page, "pq-chart", ["p (target)", "q (draft)"])


# Which rounds (1-based) the text boxes, and where the timeline's highlight is centred.
MARKED = """() => {
    const text = [...document.querySelectorAll('#token-text .round[data-round]')]
        .filter(el => getComputedStyle(el).boxShadow !== 'none').map(el => Number(el.dataset.round) + 1);
    const gd = document.querySelector('#timeline .js-plotly-plot');
    const shapes = (gd && gd.layout && gd.layout.shapes) || [];
    return {text, timeline: shapes.map(s => (s.x0 + s.x1) / 2)}; }"""


def wait_marked(page, round_number: int) -> None:
    """Until the text and the timeline mark round `round_number` (1-based), and only it."""
    try:
        page.wait_for_function(f"(n) => {{ const m = ({MARKED})(); return m.text.length === 1 && m.text[0] === n"
                               " && m.timeline.length === 1 && m.timeline[0] === n; }",
                               arg=round_number, timeout=10_000)
    except Exception:
        raise AssertionError(f"round {round_number} is not the one marked: {page.evaluate(MARKED)}") from None


def round_number(page) -> int:
    return int(float(page.locator("#round input[type=number]").first.input_value()))


# Every chart on the page that has data has drawn it, and the count of drawn marks held still over
# half a second: Plotly draws axes first and marks later, and on a loaded machine a screenshot taken
# once the data arrived caught a timeline with no marks and a p/q chart with no q bars.
DRAWN = """() => new Promise(done => {
    const marks = () => [...document.querySelectorAll('.js-plotly-plot')]
        .map(gd => (gd.data || []).some(t => (t.x || t.y || []).length)
            ? gd.querySelectorAll('.point, .js-line').length : -1);
    const first = marks();
    if (first.some(n => n === 0)) return done(false);
    setTimeout(() => requestAnimationFrame(() => done(JSON.stringify(marks()) === JSON.stringify(first))), 500);
})"""


def wait_drawn(page) -> None:
    page.wait_for_function(DRAWN, timeout=60_000, polling=250)


def still_shot(page, path, clip: dict | None = None) -> None:
    """A picture of the whole page (or `clip` of it) with every chart drawn. A full-page screenshot
    makes the browser lay the page out at its full height, which fires a resize: Plotly redraws its
    responsive charts, and the picture caught them half drawn (an empty "where the time went").
    So the window itself is made as tall as the page, the charts settle, the picture is taken
    inside the window, and the window goes back to its size."""
    size = page.viewport_size
    height = page.evaluate("() => document.documentElement.scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], height)})
    wait_drawn(page)
    page.screenshot(path=str(path), clip=clip, full_page=False)
    page.set_viewport_size(size)
    wait_drawn(page)


def shot(page, path: Path, top: str, bottom: str) -> None:
    """Screenshot of the page from element `top` to element `bottom` (for the README), to `path`,
    once every chart has drawn its marks."""
    page.evaluate("() => window.scrollTo(0, 0)")
    wait_drawn(page)
    a = page.locator(top).first.bounding_box()
    b = page.locator(bottom).first.bounding_box()
    y0 = max(0, a["y"] - 10)
    still_shot(page, path, {"x": 0, "y": y0, "width": 1400, "height": b["y"] + b["height"] + 10 - y0})


@contextmanager
def fresh_page(visitors, url: str):
    """A new visitor's page at `url` (conftest's `open_page`: no state shared with the test's page),
    closed afterwards."""
    pg = open_page(visitors, url)
    try:
        yield pg
    finally:
        close_page(pg)


def export_trace(page, app_url: str, path: Path) -> bytes:
    """The run on `page` exported with its Export button, downloaded into `path`; its bytes."""
    page.locator("#export-run").click()
    page.wait_for_selector("#export a", timeout=30_000)
    href = page.locator("#export a").first.get_attribute("href")
    body = page.request.get(href if href.startswith("http") else app_url.rstrip("/") + href).body()
    path.write_bytes(body)
    return body


@contextmanager
def imported_on_a_fresh_page(visitors, app_url: str, trace: Path):
    """A fresh page with the trace file `trace` imported and its step viewer drawn."""
    with fresh_page(visitors, app_url) as fresh:
        fresh.wait_for_selector("#import input[type=file]", state="attached")
        fresh.set_input_files("#import input[type=file]", str(trace))
        wait_done(fresh)
        wait_plot(fresh, "pq-chart", ["p (target)", "q (draft)"])
        yield fresh


def test_page_loads_without_console_errors(page, screenshots):
    page.wait_for_selector("#run")
    page.wait_for_selector("#timeline .js-plotly-plot", timeout=30_000)
    assert page.locator("#prompt textarea").input_value()
    page.get_by_role("tab", name="How it works").click()
    page.wait_for_selector("text=Why the output is exactly", timeout=30_000)
    page.wait_for_selector(".katex", timeout=30_000)   # the formulas are typeset
    page.screenshot(path=str(screenshots / "how-it-works.png"), full_page=False)
    assert page.console_errors == []


def test_default_run_renders_text_timeline_and_step_charts(page, screenshots, app_url):
    page.wait_for_selector("#run")
    wait_app_idle(app_url)   # in CI, a run on a server still starting its workers reached the page in one piece
    # The default run but for its seed: one no other test uses, so that this run is decoded and
    # streams. A run the server decoded before (another browser test's default run, on the same
    # server) comes whole from its cache: no "Round k" on the status line, ever.
    set_number(page, "seed", DEFAULT_RUN_SEED)
    page.evaluate(ANNOUNCEMENTS)
    settle(page)   # a fresh page busy drawing when Run is clicked reads the whole stream at once, late
    page.evaluate(WATCH_STREAM)
    shown = steps_shown(page)
    page.locator("#run").click()
    wait_done(page)
    # While it streamed, the text and the timeline were already there (the progress on the status line).
    assert page.evaluate("() => window.__streamed"), " | ".join(page.evaluate("() => window.__statuses"))   # whole
    assert page.locator("#timeline .js-plotly-plot").is_visible()
    # The one-line result is in view after the click, at the top of a 1000 px window, not below the fold.
    status_box = page.locator("#run-status").bounding_box()
    assert status_box["y"] + status_box["height"] <= 1000 and "α = " in page.locator("#run-status").inner_text()
    # What a screen reader hears when the run ends: a word, not Gradio's missing key "common.complete".
    page.wait_for_function("() => window.__said.includes('Done')", timeout=10_000)
    assert not [t for t in page.evaluate("() => window.__said") if "common." in t]
    wait_steps_shown(page, shown)   # the step figures follow "Done", one event each
    # The text: every generated token is a marked span, with a legend.
    kinds = page.eval_on_selector_all("#token-text .tok[data-round]", "els => els.map(e => e.dataset.kind)")
    assert kinds and set(kinds) <= {"accepted", "rejected", "residual", "bonus", "plain"}
    assert "accepted" in kinds
    assert page.locator("#token-text .legend").count() == 1
    # The timeline: one cell per drafted position plus one end token per round.
    timeline = plot_data(page, "timeline")
    ends = [t for t in timeline if t["meta"] in ("residual", "biased_p", "bonus", "greedy", "plain")]
    n_rounds = sum(len(t["x"]) for t in ends)
    assert n_rounds >= 2
    assert sorted({x for t in ends for x in t["x"]}) == list(range(1, n_rounds + 1))
    # Step viewer: p/q with the "everything else" bar, the test, the round's end.
    pq = plot_data(page, "pq-chart")
    assert [t["name"] for t in pq] == ["p (target)", "p (target)", "q (draft)", "q (draft)"]   # top, tail panels
    assert pq[1]["x"] == ["rest where p ≥ q", "rest where p < q"]   # the tail, in its own panel
    assert abs(sum(pq[0]["y"]) + sum(pq[1]["y"]) - 1) < 1e-3 and abs(sum(pq[2]["y"]) + sum(pq[3]["y"]) - 1) < 1e-3
    acc = plot_data(page, "accept-chart")
    assert {"min(1, p(x)/q(x))", "u (uniform draw)"} <= {t["name"] for t in acc}
    end = plot_data(page, "end-chart")
    if "rejected" in kinds:   # the viewer opens the first round with a rejection: its residual
        names = [t["name"] for t in end]
        assert names[0].startswith("normalised residual") and names[1:] == [
            "max(0, p − q)", "q ≥ p: residual 0 (its p was given at acceptance)"]
        assert "rejected" in plot_title(page, "accept-chart").lower()
    # The position selector switches the drafted position (keyboard-usable radio).
    page.locator("#position label").first.click()
    page.wait_for_function("() => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('draft 1:')", timeout=30_000)
    assert "Run metrics" in page.content() and "tokens per target forward" in page.locator("#metrics").inner_text()
    shot(page, screenshots / "decode.png", "#prompt", "#metrics")

    # Stepping to the next round changes the charts.
    first = round_number(page)
    assert first >= 1
    before = (json.dumps(plot_data(page, "pq-chart")), plot_title(page, "end-chart"))
    page.locator("#next-round").click()
    page.wait_for_function("(n) => Number(document.querySelector('#round input[type=number]').value) === n",
                           arg=first + 1)
    page.wait_for_function(
        "(t) => { const gd = document.querySelector('#end-chart .js-plotly-plot');"
        " return gd && gd.layout.title && gd.layout.title.text !== t; }", arg=before[1], timeout=30_000)
    after = (json.dumps(plot_data(page, "pq-chart")), plot_title(page, "end-chart"))
    assert after != before
    assert f"Round {first + 1}" in after[1]
    wait_marked(page, first + 1)   # the text and the timeline mark the new round (the page moves the marks)
    # ... and back with the previous button.
    page.locator("#prev-round").click()
    page.wait_for_function("(n) => Number(document.querySelector('#round input[type=number]').value) === n",
                           arg=first)
    page.wait_for_function("(t) => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text === t",
                           arg=before[1], timeout=30_000)
    wait_marked(page, first)
    # ... and with the keyboard: arrow keys outside text fields step through the rounds.
    page.locator("#step-viewer").click()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("(n) => Number(document.querySelector('#round input[type=number]').value) === n",
                           arg=first + 1)
    wait_marked(page, first + 1)
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("(n) => Number(document.querySelector('#round input[type=number]').value) === n",
                           arg=first)
    page.wait_for_function("(t) => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text === t",
                           arg=before[1], timeout=30_000)
    shot(page, screenshots / "step-viewer.png", "#step-viewer", "#end-chart")


def test_stop_ends_a_run_midway_and_shows_what_it_decoded(page):
    """Stop sets the run's stop on the server: the decoder ends at its next forward and the page
    shows the rounds so far. (The page clicks Stop itself, every 250 ms from just after Run and at
    each change of the status line: on a loaded machine the browser falls seconds behind the
    stream, so a test's click would come late.) It clicks until the status line's own "Stopped:" or
    "Done:": Gradio's progress tracker inside the status shows a bare "Done" when any event on it
    completes (the page's load event), and a page that stopped clicking at that word let the run
    finish (2 of 6 runs under load). Run is clicked once the fresh page is idle: in a full CI run
    the page's first tick came 3.8 s after Run, when the 2.5 s decode had ended on the server."""
    page.wait_for_selector("#run")
    set_number(page, "max-new", 240)
    set_number(page, "gamma", 1)
    settle(page)
    page.evaluate("""() => { window.__ticks = [];
        const status = document.querySelector('#run-status'), stop = document.querySelector('#stop');
        const tick = (why) => { const s = status.innerText;
            window.__ticks.push(why + ' ' + s.replace(/\\s+/g, ' ').slice(0, 40));
            if (/Stopped:|Done:/.test(s)) { clearInterval(timer); seen.disconnect(); } else stop.click(); };
        const seen = new MutationObserver(() => tick('changed'));   // the moment the stream shows
        seen.observe(status, {childList: true, subtree: true, characterData: true});
        const timer = setInterval(() => tick('timer'), 250);
        document.querySelector('#run').click(); }""")
    wait_ended(page, "Stopped:|Done:")
    status = page.locator("#run-status").inner_text()
    ticks = page.evaluate("() => window.__ticks")   # what the page saw at each click, should this fail
    assert status.startswith("Stopped:") and "it was stopped on request" in status, (status, ticks)
    assert int(status.split()[1]) < 240   # the text, timeline and step viewer show those tokens
    set_number(page, "max-new", 8)
    page.locator("#run").click()
    wait_done(page)
    assert page.console_errors == []


def settle(page) -> None:
    """Wait until the page's main thread is idle (a fresh page still draws its charts and runs
    its load events): `requestIdleCallback`, twice, at most 15 s each."""
    for _ in range(2):
        page.evaluate("() => new Promise(done => requestIdleCallback(() => done(), {timeout: 15000}))")


def test_timeline_click_opens_round(page):
    run(page, max_new=24)
    page.wait_for_selector("#timeline .js-plotly-plot")
    page.wait_for_timeout(1000)   # the click hook attaches within 0.7 s
    # Fire Plotly's own click event for the end token of round 3 (customdata = [round, position]).
    page.evaluate("() => document.querySelector('#timeline .js-plotly-plot')"
                  ".emit('plotly_click', {points: [{customdata: [2, -1]}]})")
    page.wait_for_function("() => Number(document.querySelector('#round input[type=number]').value) === 3",
                           timeout=30_000)
    page.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 3')", timeout=30_000)
    wait_marked(page, 3)
    # "next rejection" opens the next round with a rejected draft, at that draft.
    rejected = sorted((c[0], c[1]) for t in plot_data(page, "timeline") if t["name"].startswith("rejected")
                      for c in t["customdata"] or [])   # (round, position), 0-based
    after, draft = next((r + 1, k + 1) for r, k in rejected if r > 2)
    page.locator("#next-rejection").click()
    page.wait_for_function("(t) => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes(t)", arg=f"Round {after}, draft {draft}:", timeout=30_000)
    assert round_number(page) == after


def test_skip_adjustment_marks_tokens_sampled_from_p(page, screenshots):
    run(page, skip=True)
    kinds = page.eval_on_selector_all("#token-text .tok[data-round]", "els => els.map(e => e.dataset.kind)")
    assert "residual" not in kinds
    assert "biased_p" in kinds, "a T=1, γ=4 run of 64 tokens should reject at least one draft"
    names = [t["name"] for t in plot_data(page, "timeline")]
    assert "sampled from p (adjustment skipped: biased)" in names
    assert "resampled from the residual" not in names
    assert "biased" in page.locator("#metrics").inner_text().lower()
    # Open a round that ended by sampling p: the end chart says so, with the warning.
    r = int(page.locator("#token-text .tok-biased_p[data-round]").first.get_attribute("data-round"))
    page.evaluate("(r) => document.querySelector('#timeline .js-plotly-plot')"
                  ".emit('plotly_click', {points: [{customdata: [r, -1]}]})", r)
    page.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('BIASED')", timeout=30_000)
    assert plot_data(page, "end-chart")[0]["name"] == "p (used instead of the residual: biased)"
    # Its "drawn" arrow ends at the drawn bar's top , not high over a short bar in empty
    # space, on the scale it opens on and on the other.
    page.wait_for_timeout(1000)   # Plotly draws the annotations after the bars
    misses = layout_check.pointer_misses(page, ("end-chart",))
    scale = page.evaluate("() => document.querySelector('#end-chart .js-plotly-plot').layout.yaxis.type")
    page.locator("#end-chart .updatemenu-button").nth(0 if scale == "log" else 1).click()
    page.wait_for_function("(s) => document.querySelector('#end-chart .js-plotly-plot').layout.yaxis.type !== s",
                           arg=scale, timeout=10_000)
    page.wait_for_timeout(500)
    misses += layout_check.pointer_misses(page, ("end-chart",))
    assert misses == [], misses
    shot(page, screenshots / "skip-adjustment.png", "#token-text", "#end-chart")


def test_export_then_import_shows_the_same_charts(page, visitors, app_url, tmp_path):
    run(page, max_new=24)
    charts = {i: plot_data(page, i) for i in ("timeline", "pq-chart", "accept-chart", "end-chart")}
    text = page.locator("#token-text").inner_text()
    # A teacher's title and a note on the open round travel with the export (typed as text, shown escaped).
    note_round = round_number(page)
    page.locator("#run-title input, #run-title textarea").first.fill("Lesson <1> & residuals")
    page.locator("#run-title input, #run-title textarea").first.press("Tab")
    page.wait_for_timeout(800)   # the title's input event reaches the server
    page.locator("#round-note textarea").first.click()
    page.locator("#round-note textarea").first.type("Look: *the* residual <b>here</b>.", delay=10)
    page.wait_for_timeout(2500)   # the note's last input event reaches the server
    trace = tmp_path / "trace.json"
    body = export_trace(page, app_url, trace)
    assert json.loads(body)["schema"] == "specdec.trace"

    with imported_on_a_fresh_page(visitors, app_url, trace) as fresh:
        for elem_id, data in charts.items():
            assert plot_data(fresh, elem_id) == data, elem_id
        assert fresh.locator("#token-text").inner_text() == text
        assert "Lesson <1> & residuals" in fresh.locator("#run-status").inner_text()
        assert fresh.locator("#run-title input, #run-title textarea").first.input_value() == "Lesson <1> & residuals"
        stored = json.loads(body)
        assert stored["title"] == "Lesson <1> & residuals"
        assert stored["notes"] == {str(note_round - 1): "Look: *the* residual <b>here</b>."}
        # open the noted round: its note is shown as text
        fresh.locator("#round input[type=number]").first.fill(str(note_round))
        fresh.locator("#round input[type=number]").first.press("Enter")
        fresh.wait_for_function("() => document.querySelector('#round-note textarea').value.includes('residual')",
                                timeout=30_000)
        assert fresh.locator("#round-note textarea").first.input_value() == "Look: *the* residual <b>here</b>."
        assert fresh.evaluate("() => document.querySelectorAll('#run-status b').length") == 0


def test_bad_import_shows_an_error_and_the_app_stays_up(still, tmp_path):
    page = still
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something else"}')
    page.wait_for_selector("#import input[type=file]", state="attached")
    page.set_input_files("#import input[type=file]", str(bad))
    page.wait_for_selector("text=Not a valid specdec trace", timeout=30_000)


def test_prompt_with_html_is_shown_as_text(page):
    evil = "<b>bold</b><img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>"
    run(page, prompt=evil, max_new=8)
    prompt_text = page.locator("#token-text .prompt").inner_text()
    assert prompt_text == evil
    assert page.locator("#token-text b, #token-text img, #token-text script").count() == 0
    assert page.evaluate("() => window.__pwned === undefined")


def test_compare_shows_where_the_time_went(page, screenshots):
    """With "compare with autoregressive": a stacked time chart for both runs, and the measured and
    predicted speedups side by side with a sentence. The figure itself is not asserted (speed
    goals are measured by `python -m specdec bench`, never by timed tests); it is printed."""
    page.wait_for_selector("#run")
    page.locator("#compare-ar input[type=checkbox]").check()
    page.locator("#run").click()
    wait_done(page)
    wait_plot(page, "time-chart", ["draft forwards (and drafting)", "target forwards (verify)",
                                   "everything else (sampling, bookkeeping, trace)"])
    bars = plot_data(page, "time-chart")
    assert all(t["y"] == ["speculative", "autoregressive"] for t in bars)
    assert all(v >= 0 for t in bars for v in t["x"])
    metrics = page.locator("#metrics").inner_text()
    assert "measured" in metrics and "predicted from this run's costs" in metrics
    measured = float(metrics.split("measured speedup ")[1].split("×")[0])
    predicted = float(metrics.split("α: ")[1].split("×")[0])
    assert measured > 0 and predicted > 0
    print(f"page comparison: measured {measured:.2f}×, predicted {predicted:.2f}×")
    shot(page, screenshots / "speed.png", "#metrics", "#time-chart")
    assert page.console_errors == []


def test_side_by_side_shows_both_texts(page, screenshots):
    """One click re-runs the same prompt and seed with the other rule, and the target alone; each
    view shows the two texts one above the other with their numbers."""
    run(page, max_new=32)
    page.get_by_text("Side by side: the same run").click()
    page.locator("#rerun-rule").click()
    page.wait_for_function("() => document.querySelectorAll('#side-by-side .side-run').length === 2", timeout=60_000)
    blocks = page.locator("#side-by-side .side-run")
    assert "exact rule" in blocks.nth(0).inner_text() and "adjustment skipped" in blocks.nth(1).inner_text()
    assert blocks.nth(1).locator(".tok-biased_p").count() + blocks.nth(1).locator(".tok-bonus").count() > 0
    page.locator("#rerun-target").click()
    page.wait_for_function("() => document.querySelector('#side-by-side').innerText.includes('the target alone:')",
                           timeout=60_000)
    target_text = page.locator("#side-by-side .side-run").nth(1).inner_text()
    assert "32 tokens" in target_text and len(target_text) > 60   # the autoregressive run's own text
    shot(page, screenshots / "side-by-side.png", "#side-by-side", "#side-by-side")
    assert page.console_errors == []


def test_a_copied_link_reproduces_the_run_and_the_round(page, visitors, app_url):
    run(page, prompt="HAMLET:\nWhat a piece of work is a man!", max_new=40)
    page.locator("#round input[type=number]").first.fill("3")
    page.locator("#round input[type=number]").first.press("Enter")
    page.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 3')", timeout=30_000)
    wait_marked(page, 3)
    page.locator("#position label").nth(1).click()   # draft 2 of round 3: the link opens it
    page.wait_for_function("() => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 3, draft 2')", timeout=30_000)
    text = page.locator("#token-text .specdec-text").inner_text()
    page.locator("#copy-link").click()
    page.wait_for_function("() => (document.querySelector('#link input, #link textarea') || {}).value"
                           "?.startsWith('http')", timeout=30_000)
    url = page.locator("#link input, #link textarea").first.input_value()
    assert "round=3" in url and "draft=2" in url and "seed=0" in url
    with fresh_page(visitors, url) as fresh:
        wait_done(fresh)
        fresh.wait_for_function("() => Number(document.querySelector('#round input[type=number]').value) === 3",
                                timeout=60_000)
        assert fresh.locator("#token-text .specdec-text").inner_text() == text
        assert fresh.locator("#prompt textarea").input_value() == "HAMLET:\nWhat a piece of work is a man!"
        fresh.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                                "?.includes('Round 3')", timeout=30_000)
        fresh.wait_for_function("() => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                                "?.includes('Round 3, draft 2')", timeout=30_000)
        # The link opens at the step viewer, not at the page's top ~3,000 px above it.
        fresh.wait_for_function("() => Math.abs(document.querySelector('#step-viewer').getBoundingClientRect().top)"
                                " < 100", timeout=10_000)


def test_whitespace_tokens_are_visible_and_labels_are_not_double_escaped(page):
    """Every table cell for a token shows something (␣, ↵, ⇥, ⟨eos⟩), and no chart label shows
    an HTML entity as text."""
    run(page, prompt='KING. "Come, come," quoth he;\n', max_new=48)
    for name in ("p and q as a table", "end of round as a table"):   # accordions render when opened
        page.get_by_text(name).click()
    page.wait_for_function("() => document.querySelectorAll('#pq-table div[role=row]').length > 3 && "
                           "document.querySelectorAll('#end-table div[role=row]').length > 3", timeout=30_000)
    rows = page.eval_on_selector_all(      # Gradio 6 renders data rows as div[role=row]
        "#pq-table div[role=row], #end-table div[role=row]",
        "rows => rows.map(r => Array.from(r.querySelectorAll('[role=gridcell], td')).map(c => c.innerText))")
    rows = [r for r in rows if r]
    assert len(rows) > 4 and all(r[0].strip() for r in rows), rows
    labels = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot text'))
        .map(t => t.textContent)""")
    assert not [t for t in labels if "&amp;" in t or "&quot;" in t or "&lt;" in t], labels[:20]


# The speed explorer's curves as the page drew them: a number that changes at each drawing.
CURVES_DRAWN = """() => { const gd = document.querySelector('#speed-curves .js-plotly-plot');
  if (!gd || !gd.data) return 0;
  if (gd.data !== window.__curvesData) {
    window.__curvesData = gd.data; window.__curvesDrawn = (window.__curvesDrawn || 0) + 1; }
  return window.__curvesDrawn; }"""


def test_the_speed_explorer_is_drawn_when_its_tab_opens_not_at_every_run(page):
    """A run's end drew the explorer's three charts in its hidden tab (once the tab had been opened;
    and it cost the server 0.1-0.25 s either way) on the cores that draw the run's own step charts:
    a run ended while the Decode tab is in view leaves the explorer as it was, and opening its tab
    draws it with that run."""
    page.get_by_role("tab", name="Speed explorer").click()   # drawn once, so its charts are on the page
    page.wait_for_function(f"() => ({CURVES_DRAWN})() > 0", timeout=RUN_TIMEOUT)
    page.get_by_role("tab", name="Decode").click()
    before = page.evaluate(CURVES_DRAWN)
    run(page, max_new=16)
    page.wait_for_timeout(2000)   # a change event's drawing comes within a few hundred ms of "Done"
    assert page.evaluate(CURVES_DRAWN) == before
    page.get_by_role("tab", name="Speed explorer").click()
    page.wait_for_function(f"(n) => ({CURVES_DRAWN})() > n", arg=before, timeout=RUN_TIMEOUT)
    alpha = page.locator("#metrics").inner_text().split("acceptance rate α")[1].split()[0]
    page.wait_for_function("(said) => document.querySelector('#speed-note').innerText.includes(said)",
                           arg=f"This run: γ = 4, α = {alpha} from", timeout=RUN_TIMEOUT)
    page.get_by_role("tab", name="Decode").click()
