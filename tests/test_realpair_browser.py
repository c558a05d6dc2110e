"""The real pair (SmolLM2-135M-Instruct and its features drafter) on the page, in a real browser, at
1400 and 800 px: its drafters, and its run read as a visitor reads it, figures and tables.

One app server of its own (on the session's cache of the real model, `real_cache`) and one page for
the whole module. The page picks the pair, then imports a run of it decoded in-process on the real
model (`real_pair`): the same trace a run on the page makes, for a fraction of the time (a 24-token
run streamed to the page took 51 s here, decoded in-process 7 s). Every check reads that one page.
No run decodes on this server but its start's warm-up: it decodes in its own threads
(`serverload.THREADS_ONLY`), without the two decode worker processes (~8 s of CPU each to start)
that the page's own server keeps for its runs (conftest's `app_url`, where the browser tests run them).
"""

from __future__ import annotations

import subprocess

import pytest

import layout_check
from conftest import _start_app, close_page, free_port, open_page
from serverload import THREADS_ONLY
from specdec import RunSettings, SamplingConfig, speculative_generate
from specdec.app.server.api import CHAT_PROMPT
from specdec.app.shows import outside
from specdec.core.registry import labels, runnable
from specdec.models.pair import BUNDLED, PRESETS
from test_app_browser import wait_done
from test_layout_browser import TABLES, WIDTHS, cut_at_right

REAL = "smollm2-135m"
TIMEOUT = 180_000   # ms: loading the real model on a shared CPU
# The run every check reads: full-vocabulary sampling (what shows the residual best), 24 tokens;
# it rejects drafts, leaves drafts untested and draws tokens with 5-digit ids (checked below).
SETTINGS = RunSettings(gamma=4, max_new_tokens=24, seed=0, drafter="features",
                       sampling=SamplingConfig(temperature=1.0, top_k=0, top_p=1.0))
# What a visitor reads; each a region that must not cut its text at the right.
REGIONS = ("#token-text", "#metrics", "#timeline-table", "#round-caption", "#pq-table", "#accept-table", "#end-table")


@pytest.fixture(scope="module")
def real_url(real_cache, tmp_path_factory):
    """`python app.py` on the session's cache of the real model, for this module only (its runs, the
    warm-up's, in its own threads)."""
    log = tmp_path_factory.mktemp("real-app") / "app.log"
    port = free_port()
    proc = _start_app(port, log, {"SPECDEC_CACHE": str(real_cache), **THREADS_ONLY})
    if isinstance(proc, str):
        raise RuntimeError(proc)
    yield f"http://127.0.0.1:{port}/"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def real_trace(real_pair, tmp_path_factory):
    gen = speculative_generate(real_pair, CHAT_PROMPT, SETTINGS)
    rejected = gen.rounds[1]
    assert not rejected.n_accepted and len(rejected.positions) == 4, "round 2 rejects draft 1 (the page opens it)"
    assert any(t >= 10_000 for t in rejected.positions[0].p.ids), "a 5-digit id in the p/q table"
    path = tmp_path_factory.mktemp("real-trace") / "real.json"
    path.write_text(gen.to_json(), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def real_page(visitors, real_url):
    page = open_page(visitors, real_url)
    page.wait_for_selector("#preset input")
    yield page
    close_page(page)


def drafters_offered(page) -> list[str]:
    return page.eval_on_selector_all("#drafter label", "els => els.map(e => e.innerText.trim())")


def pick_pair(page, key: str) -> None:
    page.locator("#preset input").first.click()
    page.get_by_role("option", name=PRESETS[key].label, exact=True).click()


def test_the_real_pair_offers_only_the_drafters_it_can_run(real_page):
    """Picking SmolLM2-135M-Instruct (no draft model) leaves the n-gram and features drafters: the
    "small draft model" stayed selectable, and Run then failed with a red Error badge over the
    status line while the previous run's results stayed under the changed controls. Back on the
    bundled pair, its draft model is offered again."""
    page = real_page
    # The radio renders after the preset box (a clean-clone run read it empty at 0f…): wait for it.
    every = list(labels().values())
    real = [labels()[name] for name in runnable(has_draft=False, has_features=True)]   # no draft model
    page.wait_for_function("(n) => document.querySelectorAll('#drafter label').length === n",
                           arg=len(every), timeout=30_000)
    assert drafters_offered(page) == every
    pick_pair(page, REAL)
    page.wait_for_function("() => document.querySelector('#run-status').innerText.includes('is loaded')",
                           timeout=TIMEOUT)
    page.wait_for_function("(n) => document.querySelectorAll('#drafter label').length === n", arg=len(real),
                           timeout=30_000)
    assert drafters_offered(page) == real
    assert page.locator("#drafter input:checked").first.get_attribute("value") == "features"
    pick_pair(page, BUNDLED)
    page.wait_for_function("(n) => document.querySelectorAll('#drafter label').length === n", arg=len(every),
                           timeout=30_000)
    assert drafters_offered(page) == every
    assert page.console_errors == []


@pytest.fixture(scope="module")
def imported(real_page, real_trace):
    """The real pair's run on the page, with every table open."""
    real_page.set_input_files("#import input[type=file]", str(real_trace))
    wait_done(real_page)
    real_page.wait_for_function("() => document.querySelector('#end-chart .js-plotly-plot')?.layout?.title?.text"
                                "?.includes('Round 2')", timeout=30_000)
    for name in TABLES:
        real_page.get_by_text(name, exact=True).click()
    return real_page


def reader_problems(page) -> list[str]:
    """Everything the layout checks find on the page as it is: overlapping, clipped or dropped
    figure text; text cut at the right; short words broken over lines in a table; pointers that
    end away from their bar."""
    return (layout_check.problems(page) + [p for r in REGIONS for p in cut_at_right(page, r)]
            + layout_check.broken_words(page) + layout_check.pointer_misses(page))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_real_pairs_run_reads_cleanly(imported, width):
    """At 1400 and 800 px, the run's text, timeline and its table, metrics, and the step viewer at
    the rejected draft (round 2, draft 1), then at a draft thrown away untested (draft 2). Found
    before: the acceptance table's values off its right edge and the timeline table's
    times; a 5-digit id broken "3807/5"; at 800 px the p/q chart's title cut and its legend under the
    scale buttons, token labels overlapping, "REJECTED" clipped, one digit a line in the tables;
    the pointers' arrows ending in empty space over their bars."""
    page = imported
    page.set_viewport_size({"width": width, "height": 1000})
    page.locator("#position label").first.click()
    page.wait_for_timeout(2500)   # the page lays out; the charts are fitted to their boxes (app.js)
    found = [f"(draft 1) {p}" for p in reader_problems(page)]
    page.locator("#position label").nth(1).click()
    page.wait_for_function("() => document.querySelector('#accept-chart .js-plotly-plot')"
                           ".layout.title.text.includes('NOT TESTED')", timeout=30_000)
    page.wait_for_timeout(1500)
    found += [f"(draft 2, untested) {p}" for p in reader_problems(page)]
    assert found == [], "\n".join(found)
    assert page.console_errors == []


def test_where_q_came_from_follows_the_selected_draft(imported):
    """The features drafter's picture of where q came from names the selected draft: draft 1
    reads the target's feature, draft 3 the drafter's own predicted one and draft 2's token. It
    said "q for draft 1" whichever draft was selected."""
    page = imported
    for k, reads in ((0, "target's feature h"), (2, "drafter's predicted feature (from draft 2)")):
        page.locator("#position label").nth(k).click()
        page.wait_for_function("(n) => document.querySelector('#round-caption').innerText.includes('q for draft ' + n)",
                               arg=k + 1, timeout=30_000)
        picture = page.locator("#round-caption .q-source").inner_text()
        assert reads in picture and f"q for draft {k + 1}" in picture, picture
        assert f"(draft {k + 1}):" in page.locator("#round-caption").inner_text()


def test_the_p_q_chart_marks_the_tokens_outside_the_vocabulary_and_the_round_goes_on_a_sheet(imported):
    """The features drafter reads 16,384 of the 49,152 ids: at the rejected draft the p/q chart
    cross-hatches the shown tokens outside them under a legend entry of their own and names them
    in its title, its table notes each (the layout checks above read the chart with them); "this
    round on one sheet" gives the round's sheet, with its numbers and charts, as a file."""
    page = imported
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.get_by_role("tab", name="Decode").click()
    page.locator("#position label").first.click()
    page.wait_for_function("() => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 2, draft 1:')", timeout=30_000)
    chart = page.evaluate("() => { const g = document.querySelector('#pq-chart .js-plotly-plot');"
                          " return {names: g.data.map(t => t.name), title: g.layout.title.text}; }")
    assert outside.LEGEND in chart["names"] and outside.NAME in chart["title"], chart
    page.wait_for_function("(note) => document.querySelector('#pq-table').innerText.includes(note)", arg=outside.NOTE,
                           timeout=30_000)
    page.locator("#round-sheet").click()
    page.wait_for_function("() => !!document.querySelector('#round-sheet-file a[href*=\"specdec-round-2-of\"]')",
                           timeout=60_000)
    href = page.locator("#round-sheet-file a[href*='specdec-round-2-of']").first.get_attribute("href")
    sheet = page.request.get(href).text()
    assert "specdec · round 2 of" in sheet and "α of this round = 0/1" in sheet and "Plotly.newPlot" in sheet
    assert page.console_errors == []


def test_the_lab_from_the_real_pairs_rejected_draft_reads_cleanly(imported):
    """One click from the step viewer ("Open this position in the exactness lab") at the rejected
    draft, one lab run on its p and q (the real vocabulary's top tokens and tails), then its
    figures and summary at 1400 and 800 px."""
    page = imported
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.locator("#position label").first.click()
    page.wait_for_function("() => document.querySelector('#pq-chart .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('Round 2, draft 1:')", timeout=30_000)
    page.locator("#send-to-lab").click()
    page.wait_for_function("() => (document.querySelector('#lab-status')?.innerText || '')"   # the tab opens first
                           ".includes('Taken from the last run')", timeout=TIMEOUT)
    before = page.locator("#lab-status").inner_text()
    page.locator("#lab-run").click()
    page.wait_for_function("(b) => { const t = document.querySelector('#lab-status').innerText;"
                           " return t !== b && t.includes('trials per rule'); }", arg=before, timeout=TIMEOUT)
    found = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(2500)   # the page lays out; the charts are fitted to their boxes (app.js)
        found += [f"({width} px) {p}" for p in layout_check.problems(page) + cut_at_right(page, "#lab-summary")
                  + layout_check.broken_words(page)]
    assert found == [], "\n".join(found)
    assert page.console_errors == []
