"""Every view right at first paint, in a real browser, in a new visitor's page: after a
default run, every trace of each figure is painted (the hatched q bars and the green min(1, p/q) bar
were not), on a log axis too, with no bar outside its plot; the round slider and the position say
the round the viewer shows; the text fits its box; a rejected newline breaks no line; the β strip's
cells open their round from the keyboard; the speed explorer's legends sit beside the data and its
profiles table fits its panel.

The checks are tests/paint_check.py's; a negative control shows they see a moved address.
"""

from __future__ import annotations

import pytest

import paint_check
from test_app_browser import click_run, steps_shown, wait_steps_shown
from test_layout_browser import RUN_TIMEOUT, WIDTHS, cut_at_right

VIEW = """() => ({slider: Number(document.querySelector('#round input[type=number]').value),
  position: (document.querySelector('#position input:checked') || {}).value ?? null,
  caption: document.querySelector('#round-caption').innerText})"""


def default_run(page) -> None:
    page.wait_for_selector("#run")
    click_run(page)
    page.wait_for_timeout(1500)   # the address bar takes the run's link (app.js), the charts are re-pointed


@pytest.mark.parametrize("width", WIDTHS)
def test_a_new_visitor_s_first_run_paints_every_view(page, width):
    page.set_viewport_size({"width": width, "height": 1000})
    default_run(page)
    assert "?" in page.url   # the address changed after the charts were drawn: what broke them
    found = paint_check.problems(page)
    found += paint_check.text_box_problems(page, "#token-text .specdec-text", "#timeline")
    found += [f"a rejected draft breaks its line: {t}" for t in page.evaluate(paint_check.REJECTED_BREAKS)]
    view = page.evaluate(VIEW)
    assert view["caption"].startswith(f"Round {view['slider']} of"), view
    assert view["position"] is not None, view
    # The β strip: Tab reaches a cell, Enter opens its round and position (here the last one's).
    cell = page.locator("#token-text .beta-cell").last
    cell.focus()
    assert page.evaluate("() => document.activeElement.classList.contains('beta-cell')")
    want = int(cell.get_attribute("data-round")) + 1
    shown = steps_shown(page)
    page.keyboard.press("Enter")
    page.wait_for_function("(r) => Number(document.querySelector('#round input[type=number]').value) === r"
                           " && document.querySelector('#round-caption').innerText.startsWith(`Round ${r} of`)",
                           arg=want, timeout=RUN_TIMEOUT)
    wait_steps_shown(page, shown)   # the step figures follow the caption, one event each
    for chart in ("#pq-chart", "#end-chart"):   # the log scale keeps its bars inside the plot
        page.locator(f"{chart} .updatemenu-button").nth(1).click()
    page.wait_for_timeout(1000)
    found += [f"(log) {p}" for p in paint_check.problems(page, "#pq-chart") + paint_check.problems(page, "#end-chart")]
    page.get_by_role("tab", name="Speed explorer").click()
    page.wait_for_function("() => document.querySelector('#speed-rates .js-plotly-plot')?.data?.length > 4",
                           timeout=RUN_TIMEOUT)
    page.get_by_text("The profiles as a table").click()
    page.wait_for_timeout(2000)
    found += [f"(speed explorer) {p}" for p in paint_check.problems(page) + cut_at_right(page, "#speed-table")]
    assert found == [], "\n".join(found)
    # Negative control: the address moved in the same task, before app.js re-points the charts.
    moved = page.evaluate("(root) => { history.replaceState(null, '', location.pathname + '?moved=1');"
                          f" return ({paint_check._COLLECT})(root); }}", "#speed-rates")
    assert any("another address" in p for p in moved), moved
    assert page.console_errors == []
