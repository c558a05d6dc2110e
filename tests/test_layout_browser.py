"""Every figure readable, in a real browser: after a default run with "compare with autoregressive"
on (and in the lab after a run), no two pieces of figure text cover each other, none is cut off,
no category axis drops a label, and no table or legend is cut off at the right.

The texts are read from the rendered SVG (tests/layout_check.py): legend entries, titles, tick
labels, annotations, button labels, as the boxes they cover on screen.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

import layout_check
from test_app_browser import steps_shown, wait_steps_shown

RUN_TIMEOUT = 180_000   # ms: the CPU is shared

# Any element under `root` whose content does not fit its box: a scrolling box (a table) wider
# inside than it shows, text cut off by a box that hides its overflow (measured on the rendered
# text itself), or a legend entry running past the right edge.
_CUT_AT_RIGHT = """(root) => {
  const out = [];
  const scope = document.querySelector(root);
  if (!scope || !scope.offsetParent) return out;
  const edge = scope.getBoundingClientRect().right + 1;
  const textRight = (el) => {   // the rightmost edge of the visible text inside el
    let right = -Infinity;
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      // 'collapse' too: a table's measuring row (Gradio's) is laid out but never shown
      if (!t.textContent.trim() || getComputedStyle(t.parentElement).visibility !== 'visible') continue;
      const range = document.createRange();
      range.selectNodeContents(t);
      for (const r of range.getClientRects()) if (r.width > 0) right = Math.max(right, r.right);
    }
    return right;
  };
  for (const el of scope.querySelectorAll('*')) {
    const cs = getComputedStyle(el);
    if (!el.offsetParent || cs.visibility === 'hidden' || !(el.innerText || '').trim()) continue;   // not shown
    const box = el.getBoundingClientRect();
    if (['auto', 'scroll'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1)
      out.push(`${root}: ${el.tagName.toLowerCase()}.${el.className} scrolls: ` +
               `${el.scrollWidth} px of content in ${el.clientWidth}`);
    else if (cs.overflowX === 'hidden' && textRight(el) > box.right + 1)
      out.push(`${root}: ${el.tagName.toLowerCase()} cuts its text ${JSON.stringify(el.innerText.slice(0, 40))}`);
    else if (el.matches('.legend > span') && box.right > edge)
      out.push(`${root}: legend entry ${JSON.stringify(el.innerText)} runs past the right edge`);
  }
  return out;
}"""


# Every shown dropdown whose chosen option is wider than its box. A dropdown shows its choice in an
# <input>, which cannot wrap: the name is cut ("Bundled Shakespeare pair (offline, 16-layer targe").
_CUT_CHOICES = """() => Array.from(document.querySelectorAll('input[role=combobox]'))
  .filter(i => i.offsetParent && i.scrollWidth > i.clientWidth)
  .map(i => `${(i.closest('[id]') || {}).id}: shows ${i.clientWidth} px of its ${i.scrollWidth} px choice ` +
            JSON.stringify(i.value))"""


def cut_at_right(page, root: str) -> list[str]:
    return page.evaluate(_CUT_AT_RIGHT, root)


def default_run_with_comparison(page) -> None:
    page.wait_for_selector("#run")
    page.locator("#compare-ar input[type=checkbox]").check()
    shown = steps_shown(page)
    page.locator("#run").click()
    page.wait_for_function("() => /Done/.test(document.querySelector('#run-status').innerText)", timeout=RUN_TIMEOUT)
    wait_steps_shown(page, shown)   # its figures follow "Done", one event each
    page.wait_for_function("""() => ['pq-chart', 'accept-chart', 'end-chart', 'time-chart'].every(id => {
        const gd = document.querySelector('#' + id + ' .js-plotly-plot');
        return gd && gd.data && gd.data.length >= 2; })""", timeout=RUN_TIMEOUT)
    page.wait_for_timeout(1500)   # Plotly lays out legends and annotations after the data


WIDTHS = [1400, 800]   # a desktop window, and a narrow one: half-width charts are then about 370 px wide


@pytest.mark.parametrize("width", WIDTHS)
def test_every_dropdown_shows_its_whole_choice(still, width):
    """The model pair's box shows the bundled pair's whole name, and no other dropdown on any tab
    cuts its choice, in a desktop window and a narrow one."""
    page = still
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_selector("#preset input")
    found = on_every_tab(page, lambda: page.evaluate(_CUT_CHOICES))
    assert found == [], "\n".join(found)


def on_every_tab(page, problems) -> list[str]:
    """`problems()` on each tab in turn, once it has laid out, each named by its tab."""
    found = []
    for tab in ("Decode", "Exactness lab", "Speed explorer"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(500)   # the tab lays out
        found += [f"({tab}) {p}" for p in problems()]
    return found
    assert page.console_errors == []


TABLES = ("Timeline as a table", "p and q as a table", "acceptance test as a table", "end of round as a table")
READ = ("#token-text", "#metrics", "#timeline-table", "#pq-table", "#accept-table", "#end-table")


def decode_tab_problems(page) -> list[str]:
    """Figures, text cut at the right, short words broken in a table, pointers off their bars."""
    for name in TABLES:
        page.get_by_text(name, exact=True).click()
    page.wait_for_timeout(1000)
    return (layout_check.problems(page) + [p for region in READ for p in cut_at_right(page, region)]
            + layout_check.broken_words(page) + layout_check.pointer_misses(page))


def lab_problems(page) -> list[str]:
    """The lab's figures from its preset, then from the step viewer's position in the last run."""
    page.get_by_role("tab", name="Exactness lab").click()
    page.wait_for_selector("#lab-run", state="visible")
    found = []
    for source in ("preset", "from the run"):
        if source == "from the run":   # a real position: 20 tokens and two long tail names
            page.locator("#lab-from-run").click()
            page.wait_for_function("() => document.querySelector('#lab-status').innerText"
                                   ".includes('Taken from the last run')", timeout=RUN_TIMEOUT)
        before = page.locator("#lab-status").inner_text()
        page.locator("#lab-run").click()
        page.wait_for_function("(b) => { const t = document.querySelector('#lab-status').innerText;"
                               " return t !== b && t.includes('trials per rule'); }", arg=before, timeout=RUN_TIMEOUT)
        page.wait_for_timeout(2500)
        found += [f"({source}) {p}" for p in layout_check.problems(page) + cut_at_right(page, "#lab-summary")]
    return found


def untested_position_problems(page) -> list[str]:
    """An untested position (drafted after a rejection) has its own test chart."""
    page.get_by_role("tab", name="Decode").click()
    labels = page.eval_on_selector_all("#position label", "els => els.map(e => e.innerText)")
    unused = next((k for k, t in enumerate(labels) if " · " in t), None)
    assert unused is not None, labels   # the default run's first rejected round leaves a draft untested
    page.locator("#position label").nth(unused).click()
    page.wait_for_function("() => document.querySelector('#accept-chart .js-plotly-plot')"
                           ".layout.title.text.includes('NOT TESTED')", timeout=RUN_TIMEOUT)
    page.wait_for_timeout(1000)
    return layout_check.problems(page, "#accept-chart")


@pytest.mark.parametrize("width", WIDTHS)
def test_decode_tab_and_lab_figures_have_no_overlapping_clipped_or_dropped_text(page, width):
    """One default run with the comparison on (a run costs most of this test), then: the Decode
    tab's figures and tables; the lab's from its preset and from the run's shown position; and the
    test chart of a position the run never tested. At 1400 px, on the same compared run, the speed
    explorer and the charts' fitting after tab switches and resizes
    (`speed_explorer_and_fitting_problems`; a compared run of its own cost ~25 s)."""
    page.set_viewport_size({"width": width, "height": 1000})
    default_run_with_comparison(page)
    found = [f"(Decode) {p}" for p in decode_tab_problems(page)]
    found += [f"(lab) {p}" for p in lab_problems(page)]
    found += [f"(untested position) {p}" for p in untested_position_problems(page)]
    if width == 1400:
        found += speed_explorer_and_fitting_problems(page)
    assert found == [], "\n".join(found)
    assert page.console_errors == []


def speed_explorer_problems(page) -> list[str]:
    """After a compared run, the explorer draws the run's measured speedup (the metrics' number)
    on its own curves, says it is within its noise, and its figures pass the same checks."""
    metrics = page.locator("#metrics").inner_text()
    measured = metrics.split("measured speedup ")[1].split("×")[0]
    page.get_by_role("tab", name="Speed explorer").click()
    page.wait_for_function("""() => { const gd = document.querySelector('#speed-curves .js-plotly-plot');
        return gd && gd.data && gd.data.some(t => t.name === 'this run, measured'); }""", timeout=RUN_TIMEOUT)
    page.wait_for_timeout(1500)
    y = page.evaluate("""() => document.querySelector('#speed-curves .js-plotly-plot').data
        .find(t => t.name === 'this run, measured').y[0]""")
    assert f"{y:.2f}" == measured
    note = page.locator("#speed-note").inner_text()
    assert f"Measured speedup {measured}×" in note and "within its noise" in note
    return layout_check.problems(page) + cut_at_right(page, "#speed-note")


# Each shown chart: its drawn width against its box's (Plotly's own SVG against the plot element).
_MISFITS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd.offsetParent).map(gd => {
    const svg = gd.querySelector('.main-svg');
    const box = Math.round(gd.getBoundingClientRect().width);
    const drawn = svg ? Math.round(svg.getBoundingClientRect().width) : 0;
    return Math.abs(box - drawn) > 2 ? `${gd.closest('[id]')?.id}: drawn ${drawn} px in a ${box} px box` : null;
}).filter(x => x)"""


def speed_explorer_and_fitting_problems(page) -> list[str]:
    """After a compared run at 1400 px: the speed explorer (`speed_explorer_problems`), then a chart
    drawn while its tab was hidden, or hidden while the window narrowed, is fitted to its box once
    shown (app.js). Before: the speed explorer came back at Plotly's default 700 px in a 1216 px box
    after a Decode run, and the Decode charts stayed 1214 px wide in 704 px boxes after the window
    narrowed to 800 px with the speed explorer in front."""
    found = [f"(speed explorer) {p}" for p in speed_explorer_problems(page)]
    tab = page.get_by_role("tab", name="Speed explorer"), page.get_by_role("tab", name="Decode")
    for step, act in (("the speed explorer after a run", lambda: tab[0].click()),
                      ("narrowed to 800 px", lambda: page.set_viewport_size({"width": 800, "height": 1000})),
                      ("back on Decode at 800 px", lambda: tab[1].click()),
                      ("widened to 1400 px", lambda: page.set_viewport_size({"width": 1400, "height": 1000}))):
        act()
        page.wait_for_timeout(2500)   # the tab lays out; the fitting looks at new charts every 0.7 s
        found += [f"({step}) {m}" for m in page.evaluate(_MISFITS)]
    return found


_TEXT_IN_VIEW = """() => {
  const r = document.querySelector('#token-text').getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, height: innerHeight,
          tokens: document.querySelectorAll('#token-text .round[data-round]').length};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_run_shows_its_answer(page, width):
    """After the first Run, with nothing scrolled, the generated text is in view, whole: at
    1400 x 1000 it sat ~1,400 px below the Run button, under the examples."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_selector("#run")
    page.locator("#run").click()
    page.wait_for_function("() => /^Done:/.test(document.querySelector('#run-status').innerText.trim())",
                           timeout=RUN_TIMEOUT)
    # The page's check runs every 250 ms and judges the text once it holds still (app.js): waited
    # for, not a fixed pause (a clean-clone run read it after 1 s, unscrolled, under load).
    in_view = f"() => {{ const b = ({_TEXT_IN_VIEW})(); return b.tokens > 0 && b.top >= 0 && b.bottom <= b.height; }}"
    try:
        page.wait_for_function(in_view, timeout=10_000)
    except PlaywrightTimeout:
        pass   # the assertions below say where the text is
    box = page.evaluate(_TEXT_IN_VIEW)
    assert box["tokens"] > 0, box   # the run's text, not the empty box
    assert 0 <= box["top"] and box["bottom"] <= box["height"], box


def test_a_pending_status_line_hides_its_stale_text_under_the_progress(still):
    """While the real model is fetched, Gradio draws its progress ("dequantising the weights ...
    30%") where the greyed "Press Run ..." line stands. Gradio marks the line's
    own text `pending` meanwhile: here it is put in that state as Gradio puts it, and the stale
    text must not show (its space kept); back out of it, it shows again (the control)."""
    page = still
    page.wait_for_function("() => { const w = document.querySelector('#run-status [data-testid=markdown-wrapper]');"
                           " return w && !w.classList.contains('pending'); }")   # the page's load event over
    # Past Gradio's 0.15 s transitions; then the state is set once more and read in the same task,
    # as a late status from the server may have rendered the line anew meanwhile (in the full suite
    # the line was read without the class: 'visible').
    shown = """async (pending) => {
      const line = () => document.querySelector('#run-status [data-testid=markdown-wrapper]');
      line().classList.toggle('pending', pending);
      await new Promise((done) => setTimeout(done, 500));
      const wrapper = line();
      wrapper.classList.toggle('pending', pending);
      const text = wrapper.querySelector('p');
      return [getComputedStyle(text).visibility, wrapper.getBoundingClientRect().height > 0];
    }"""
    assert page.evaluate(shown, True) == ["hidden", True]
    assert page.evaluate(shown, False) == ["visible", True]


@pytest.mark.parametrize("slider, typed, said", [
    ("#max-new", "100000", "max new tokens is capped at {hi} on this server (100000 was typed)"),
    ("#gamma", "0", "γ (drafts per round) is at least 1 (0 was typed)"),
    ("#gamma", "99", "γ (drafts per round) is capped at {hi} on this server (99 was typed)"),
])
def test_a_value_out_of_a_sliders_range_is_clamped_and_said(still, slider, typed, said):
    """The page clamped silently (max new tokens 100000 -> 249, γ 0 -> 1, γ 99 -> 16): the clamp
    is now said under the slider, where it happens, until a new value is typed there."""
    page = still
    box = page.locator(f"{slider} input[type=number]")
    page.wait_for_function("() => /this prompt takes/.test((document.querySelector('#max-new') || {}).innerText)")
    hi = box.get_attribute("max")
    box.fill(typed)
    box.press("Enter")
    note = page.locator(f"{slider} .specdec-clamp")
    note.wait_for(timeout=10_000)
    assert note.inner_text() == said.format(hi=hi)
    assert box.input_value() == (hi if int(typed) > int(hi) else box.get_attribute("min"))   # Gradio's clamp
    box.fill("2")   # a value that fits: the note has said its piece
    box.press("Enter")
    assert note.count() == 0


_STATUS_IN_ERROR = """() => {
  const line = document.querySelector('#run-status');
  const badge = line.querySelector('.wrap .error');
  const text = line.querySelector('[data-testid=markdown-wrapper]');
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {message: badge && badge.dataset.message, badge: badge && box(badge),
          stale: !!text && text.offsetParent !== null && getComputedStyle(text).visibility === 'visible',
          line: box(line)};
}"""


def test_an_error_is_said_on_the_status_line_not_over_the_last_runs_text(opened, tmp_path):
    """Gradio centred its red "Error" badge over the status line, on the last line's text, and
    said what went wrong only in a notice that fades. After a bad import the stale text is gone,
    the badge opens the line (inside it) and carries the error's own message. (On a fresh page the
    opening event's end would hide the badge: `opened` waits for it.)"""
    page = opened
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    page.set_input_files("#import input[type=file]", str(bad))
    page.wait_for_function("() => !!document.querySelector('#run-status .wrap .error')?.dataset.message",
                           timeout=30_000)
    found = page.evaluate(_STATUS_IN_ERROR)
    assert found["message"].startswith("Not a valid specdec trace"), found
    assert not found["stale"], found
    (left, top, _, _), line = found["badge"], found["line"]
    assert line[0] <= left <= line[0] + 40 and line[1] <= top, found   # at the line's start, inside it


# Every shown slider whose maximum (or minimum) number runs past the slider's own row.
_SLIDER_ENDS_CUT = """() => Array.from(document.querySelectorAll('.slider_input_container'))
  .filter(row => row.offsetParent)
  .flatMap(row => Array.from(row.querySelectorAll('.min_value, .max_value')).map(end => {
    const r = end.getBoundingClientRect(), box = row.getBoundingClientRect();
    return r.right > box.right + 1 || r.left < box.left - 1
      ? `${(row.closest('[id]') || {}).id}: ${end.className.split(' ')[0]} ${JSON.stringify(end.innerText)} ends ` +
        `${(r.right - box.right).toFixed(1)} px past its row` : null; }))
  .filter(x => x)"""


@pytest.mark.parametrize("width", WIDTHS)
def test_every_sliders_range_ends_show_whole(still, width):
    """At 800 px the round slider's maximum ran past its block, which cut "45" to "4": each shown
    slider's two end numbers stay inside its row, on every tab."""
    page = still
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_selector("#round .max_value")
    def ends_cut():
        page.evaluate("() => document.querySelectorAll('#round .max_value').forEach(e => { e.textContent = '45'; })")
        return page.evaluate(_SLIDER_ENDS_CUT)

    found = on_every_tab(page, ends_cut)
    assert found == [], "\n".join(found)


# Every shown element under `root` that scrolls up and down: rows hidden inside its box.
_SCROLLS_DOWN = """(root) => Array.from(document.querySelectorAll(root + ' *'))
  .filter(el => el.offsetParent && ['auto', 'scroll'].includes(getComputedStyle(el).overflowY)
                && el.scrollHeight > el.clientHeight + 1)
  .map(el => `${root}: ${el.tagName.toLowerCase()}.${el.className} shows ${el.clientHeight} px of `
              + `${el.scrollHeight}`)"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_speed_profile_table_shows_every_row_and_breaks_no_word(still, width):
    """The profiles' table cut its last rows inside a scroll box, and at 800 px broke "nearest"
    over two lines: every row shows, nothing is cut at the right, no short word breaks."""
    page = still
    page.set_viewport_size({"width": width, "height": 1000})
    page.get_by_role("tab", name="Speed explorer").click()
    opener = page.get_by_text("The profiles as a table, and why their costs differ")
    if not page.locator("#speed-table").is_visible():
        opener.click()
    page.wait_for_function("() => document.querySelectorAll('#speed-table [role=gridcell], #speed-table td')"
                           ".length > 20", timeout=30_000)
    page.wait_for_timeout(1000)
    found = (page.evaluate(_SCROLLS_DOWN, "#speed-table") + cut_at_right(page, "#speed-table")
             + layout_check.broken_words(page, "#speed-table"))
    assert found == [], "\n".join(found)
