"""A visitor's run survives a reload (or the reload after a dropped connection): the address bar
carries the run's link and the round in view (specdec/app/server/restore.py, static/app.js). In a real
browser against `python app.py`."""

from __future__ import annotations

from specdec import RunSettings, speculative_generate
from test_app_browser import RUN_TIMEOUT, round_number, run, wait_done

PROMPT = "ROMEO:\nBut, soft! what light through yonder window breaks?"


# From the status line's top to the round caption's bottom, in the page's own coordinates, read in
# one step: two reads in the window's coordinates disagree when the page scrolls between them (a
# restored run opening its round), and the clip's height can come out as nothing.
_HEAD_SPAN = """() => {
  const top = document.querySelector('#run-status').getBoundingClientRect().top + window.scrollY;
  const caption = document.querySelector('#round-caption').getBoundingClientRect();
  return [top, caption.bottom + window.scrollY];
}"""


def shot(page, path: str) -> None:
    """The run and the step viewer's head, from the status line to the round's caption (a picture
    for people to look at; the test's checks are its assertions)."""
    top, bottom = page.evaluate(_HEAD_SPAN)
    top = max(0, top - 10)
    page.screenshot(path=path, full_page=True,
                    clip={"x": 0, "y": top, "width": 1400, "height": max(1, bottom + 20 - top)})


def open_round(page, n: int) -> None:
    page.locator("#round input[type=number]").first.fill(str(n))
    page.locator("#round input[type=number]").first.press("Enter")
    page.wait_for_function("(n) => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round ' + n)", arg=n, timeout=30_000)


def test_a_reload_mid_study_finds_the_same_text_at_the_same_round(page):
    entries = page.evaluate("() => history.length")
    run(page, prompt=PROMPT, max_new=40)
    open_round(page, 4)
    text = page.locator("#token-text .specdec-text").inner_text()
    caption = page.locator("#round-caption").inner_text()
    # the address bar follows the run and the round (no new history entry)
    page.wait_for_function("() => location.search.includes('round=4')", timeout=10_000)
    assert "seed=0" in page.evaluate("() => location.search")
    assert page.evaluate("() => history.length") == entries
    shot(page, "/tmp/specdec-restore-before-reload.png")
    seen = len(page.console_errors)
    page.reload(wait_until="load")
    # A request still in flight when the old page goes (a round's last step figures, when Enter and
    # the typed number each opened the round) is aborted by the reload itself: only such aborts,
    # logged while the page reloads, are not the restored page's errors.
    aborted = [e for e in page.console_errors[seen:] if "signal is aborted" in e or "Connection errored out" in e]
    wait_done(page)
    page.wait_for_function("() => Number(document.querySelector('#round input[type=number]').value) === 4",
                           timeout=RUN_TIMEOUT)
    page.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 4')", timeout=30_000)
    assert page.locator("#token-text .specdec-text").inner_text() == text
    assert page.locator("#round-caption").inner_text() == caption
    assert page.locator("#prompt textarea").input_value() == PROMPT
    shot(page, "/tmp/specdec-restore-after-reload.png")
    # studying on after the reload moves the address along
    open_round(page, 2)
    page.wait_for_function("() => location.search.includes('round=2')", timeout=10_000)
    assert round_number(page) == 2
    assert not [e for e in page.console_errors if e not in aborted], page.console_errors


def test_an_imported_trace_takes_the_earlier_run_out_of_the_address_and_says_so(page, bundled, tmp_path):
    run(page, max_new=16)
    page.wait_for_function("() => location.search.includes('prompt=')", timeout=10_000)
    gen = speculative_generate(bundled, "HAMLET:\nWhat a piece of work is a man!",
                               RunSettings(gamma=4, max_new_tokens=16, seed=3))
    trace = tmp_path / "trace.json"
    trace.write_text(gen.to_json())
    page.set_input_files("#import input[type=file]", str(trace))
    page.wait_for_function("() => /Imported/.test(document.querySelector('#run-status').innerText)",
                           timeout=RUN_TIMEOUT)
    assert "a reload will not bring it back" in page.locator("#run-status").inner_text()
    page.wait_for_function("() => location.search === ''", timeout=10_000)
    page.reload(wait_until="load")   # a fresh page: not the run before the import
    page.wait_for_selector("#run-status")
    page.wait_for_timeout(1500)
    assert "Press" in page.locator("#run-status").inner_text()
