"""Every figure readable, in a real browser: after a default run with "compare with autoregressive"
on (and in the lab after a run), no two pieces of figure text cover each other, none is cut off,
no category axis drops a label, and no table or legend is cut off at the right.

The texts are read from the rendered SVG (tests/layout_check.py): legend entries, titles, tick
labels, annotations, button labels, as the boxes they cover on screen.
"""

from __future__ import annotations

import layout_check

RUN_TIMEOUT = 180_000   # ms: the CPU is shared

# Any element under `root` whose content is wider than its box (a table scrolled or cut at the
# right, a legend running out of its box), by id and class.
_CUT_AT_RIGHT = """(root) => {
  const out = [];
  const scope = document.querySelector(root);
  if (!scope || !scope.offsetParent) return out;
  const edge = scope.getBoundingClientRect().right + 1;
  for (const el of scope.querySelectorAll('*')) {
    if (!el.offsetParent) continue;
    const cs = getComputedStyle(el);
    if (['auto', 'scroll', 'hidden'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1)
      out.push(`${root}: ${el.tagName.toLowerCase()}.${el.className} is cut at the right ` +
               `(${el.scrollWidth} px of content in ${el.clientWidth})`);
    else if (el.matches('.legend > span') && el.getBoundingClientRect().right > edge)
      out.push(`${root}: legend entry ${JSON.stringify(el.innerText)} runs past the right edge`);
  }
  return out;
}"""


def cut_at_right(page, root: str) -> list[str]:
    return page.evaluate(_CUT_AT_RIGHT, root)


def default_run_with_comparison(page) -> None:
    page.wait_for_selector("#run")
    page.locator("#compare-ar input[type=checkbox]").check()
    page.locator("#run").click()
    page.wait_for_function("() => /Done/.test(document.querySelector('#run-status').innerText)", timeout=RUN_TIMEOUT)
    page.wait_for_function("""() => ['pq-chart', 'accept-chart', 'end-chart', 'time-chart'].every(id => {
        const gd = document.querySelector('#' + id + ' .js-plotly-plot');
        return gd && gd.data && gd.data.length >= 2; })""", timeout=RUN_TIMEOUT)
    page.wait_for_timeout(1500)   # Plotly lays out legends and annotations after the data


def test_decode_tab_figures_have_no_overlapping_clipped_or_dropped_text(page):
    default_run_with_comparison(page)
    for name in ("p and q as a table", "end of round as a table"):
        page.get_by_text(name).click()
    page.wait_for_timeout(1000)
    found = layout_check.problems(page)
    found += cut_at_right(page, "#token-text") + cut_at_right(page, "#metrics")
    # An untested position (drafted after a rejection) has its own test chart.
    labels = page.eval_on_selector_all("#position label", "els => els.map(e => e.innerText)")
    unused = next((k for k, t in enumerate(labels) if " · " in t), None)
    assert unused is not None, labels   # the default run's first rejected round leaves a draft untested
    page.locator("#position label").nth(unused).click()
    page.wait_for_function("() => document.querySelector('#accept-chart .js-plotly-plot')"
                           ".layout.title.text.includes('NOT TESTED')", timeout=RUN_TIMEOUT)
    page.wait_for_timeout(1000)
    found += layout_check.problems(page, "#accept-chart")
    assert found == [], "\n".join(found)
    assert page.console_errors == []


def test_lab_figures_have_no_overlapping_clipped_or_dropped_text(page):
    default_run_with_comparison(page)
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
    assert found == [], "\n".join(found)
    assert page.console_errors == []
