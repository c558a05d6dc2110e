"""The exactness lab in the real app, in a real browser (Debian chromium via Playwright).

Picks a preset and runs the lab (histogram and convergence charts: one trace per rule), then runs
the Decode tab and takes p and q from a real drafted position. Takes lab.png into the
`screenshots` folder (a temporary one; scripts/screenshots.py refreshes the README's).
"""

from __future__ import annotations

import re

import pytest

from specdec.bench.app_client import app_client
from test_app_browser import steps_shown, still_shot, wait_steps_shown

TIMEOUT = 120_000   # ms: the CPU is shared
RULES = ["exact", "skip_adjustment", "accept_all", "greedy_match"]


def rule_traces(page, elem_id: str) -> list[str] | None:
    """Rules of the traces marked role=observed in a lab chart, in order (None before it renders)."""
    return page.evaluate(
        """(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
            if (!gd || !gd.data) return null;
            return gd.data.filter(t => t.meta && t.meta.role === 'observed').map(t => t.meta.rule); }""",
        elem_id)


def wait_rule_traces(page, elem_id: str) -> None:
    page.wait_for_function(
        """(id) => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
            return gd && gd.data && gd.data.filter(t => t.meta && t.meta.role === 'observed').length === 4; }""",
        arg=elem_id, timeout=TIMEOUT)


def open_lab(page) -> None:
    page.get_by_role("tab", name="Exactness lab").click()
    page.wait_for_selector("#lab-run", state="visible")


def choose_preset(page, name: str) -> None:
    page.locator("#lab-preset input").first.click()
    page.get_by_role("option", name=name, exact=True).click()
    page.wait_for_function("(n) => document.querySelector('#lab-status').innerText.includes('Preset ' + n)",
                           arg=name, timeout=TIMEOUT)


def set_samples(page, n: int) -> None:
    box = page.locator("#lab-samples input[type=number]").first
    box.fill(str(n))
    box.press("Tab")


def run_lab(page) -> None:
    before = page.locator("#lab-status").inner_text()
    page.locator("#lab-run").click()
    page.wait_for_function("(b) => { const t = document.querySelector('#lab-status').innerText;"
                           " return t !== b && t.includes('trials per rule'); }", arg=before, timeout=TIMEOUT)
    wait_rule_traces(page, "lab-histogram")
    wait_rule_traces(page, "lab-convergence")


def test_lab_preset_run_and_take_from_decode_run(page, screenshots):
    page.wait_for_selector("#run")
    open_lab(page)
    choose_preset(page, "under-confident")
    assert "0.55" in page.locator("#lab-dist").inner_text()       # p(the) of the preset
    set_samples(page, 20_000)
    run_lab(page)
    assert rule_traces(page, "lab-histogram") == RULES
    assert rule_traces(page, "lab-convergence") == RULES
    page.wait_for_selector("#lab-decomposition .js-plotly-plot")
    page.wait_for_selector("#lab-acceptance .js-plotly-plot")
    summary = page.locator("#lab-summary").inner_text()
    assert "exact (residual)" in summary and "not rejected" in summary

    # A real run in the Decode tab, then take p and q from its step viewer's position.
    page.get_by_role("tab", name="Decode").click()
    before = steps_shown(page)
    page.locator("#run").click()
    page.wait_for_function("() => /Done/.test(document.querySelector('#run-status').innerText)", timeout=TIMEOUT)
    wait_steps_shown(page, before)   # the step figures follow "Done", one event each
    open_lab(page)
    page.locator("#lab-from-run").click()
    page.wait_for_function("() => document.querySelector('#lab-status').innerText.includes('Taken from the last run')",
                           timeout=TIMEOUT)
    page.wait_for_function("() => document.querySelector('#lab-dist').innerText.includes('(rest where p')",
                           timeout=TIMEOUT)
    # The same position the step viewer shows: its round and draft, and its p values.
    status = page.locator("#lab-status").inner_text()
    shown = page.evaluate("() => document.querySelector('#pq-chart .js-plotly-plot').layout.title.text")
    m = re.search(r"Round (\d+), draft (\d+)", shown)
    assert m and f"round {m[1]}, drafted position {m[2]}" in status, (shown, status)
    step_p = page.evaluate("() => document.querySelector('#pq-chart .js-plotly-plot').data"
                           ".filter(t => t.name === 'p (target)').flatMap(t => Array.from(t.y))")   # top and tail
    rows = page.eval_on_selector_all(
        "#lab-dist div[role=row]",      # Gradio 6 renders data rows as div[role=row]
        "rows => rows.map(r => r.innerText.split(/[\\n\\t]/).map(s => s.trim()).filter(s => s))")
    rows = [r for r in rows if len(r) == 3]
    assert rows[-1][0].startswith("(rest where p") and 3 <= len(rows) <= 20
    lab_p = [float(r[1]) for r in rows]
    assert abs(sum(lab_p) - 1) < 1e-4 and abs(sum(step_p) - 1) < 1e-4
    for x in [float(r[1]) for r in rows if not r[0].startswith("(rest")]:   # each named token's p is the step's
        assert min(abs(x - y) for y in step_p) < 1e-5, (x, step_p)
    run_lab(page)
    assert rule_traces(page, "lab-histogram") == RULES
    page.locator("#lab-intro").scroll_into_view_if_needed()
    still_shot(page, screenshots / "lab.png")
    assert page.console_errors == []


def test_lab_api_by_name(app_url):
    """The lab's endpoints through gradio_client: lab_preset fills the table, lab_run returns the
    per-rule summary, and a bad table comes back as one clear error."""
    pytest.importorskip("gradio_client")
    from gradio_client.exceptions import AppError

    client = app_client(app_url)
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/lab_run", "/lab_preset", "/lab_from_run"} <= names
    table, status, *_ = client.predict("disjoint", api_name="/lab_preset")   # then the cleared results
    assert "Preset **disjoint**" in status and table["headers"] == ["token", "p", "q"]
    out = client.predict(table, 5000, 0, api_name="/lab_run")
    assert "5,000 trials per rule" in out[0]
    rows = {r[0]: r for r in out[2]["data"]}
    assert rows["exact (residual)"][5] == "not rejected" and rows["accept every draft"][5] == "rejected"
    bad = {"headers": ["token", "p", "q"], "data": [["a", 0.5, -1], ["b", 0.5, 1]]}
    with pytest.raises(AppError, match="non-negative"):
        client.predict(bad, 100, 0, api_name="/lab_run")
