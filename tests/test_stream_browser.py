"""A streamed run ends on the same page as the run itself (specdec/app/page/handlers.py streams a few
updates a second, the step viewer only once): in chromium against `python app.py`, the page after
a streamed run is compared with the same run imported from its trace (shown in one piece, no
stream) and with the library's own run of the same settings and seed."""

from __future__ import annotations

import json

from conftest import close_page
from specdec import RunSettings, speculative_generate
from test_app_browser import (
    RUN_TIMEOUT,
    click_run,
    export_trace,
    imported_on_a_fresh_page,
    plot_data,
    plot_title,
    set_number,
    settle,
    wait_done,
    wait_ended,
    wait_plot,
)

PROMPT = "KING HENRY:\nOnce more unto the breach, dear friends"
SEED = 7731   # a seed no other browser test uses: this run is decoded, not found in the server's cache

# The status lines the page showed, in order (a run streams "Round k · n/N tokens…" lines).
WATCH_STATUS = """() => { window.__statuses = [];
  const box = document.querySelector('#run-status');
  new MutationObserver(() => { const t = (box.querySelector('[data-testid="markdown"], .prose') || box).innerText;
      if (window.__statuses[window.__statuses.length - 1] !== t) window.__statuses.push(t); })
    .observe(box, {childList: true, subtree: true, characterData: true}); }"""

CHARTS = ("timeline", "pq-chart", "accept-chart", "end-chart")


def page_state(page) -> dict:
    """What the page shows of a run: text, timeline, metrics, step viewer."""
    return dict(text=page.locator("#token-text").inner_text(),
                kinds=page.eval_on_selector_all("#token-text .tok[data-round]",
                                                "els => els.map(e => [e.dataset.kind, e.dataset.round])"),
                metrics=page.locator("#metrics").inner_text(),
                caption=page.locator("#round-caption").inner_text(),
                round=page.locator("#round input[type=number]").first.input_value(),
                charts={i: json.dumps(plot_data(page, i)) for i in CHARTS},
                titles={i: plot_title(page, i) for i in CHARTS})


def test_a_streamed_run_ends_on_the_same_page_as_the_run_itself(page, visitors, app_url, bundled, tmp_path):
    page.wait_for_selector("#run")
    page.locator("#prompt textarea").fill(PROMPT)
    set_number(page, "max-new", 120)
    set_number(page, "seed", SEED)
    settle(page)   # a fresh page busy drawing when Run is clicked may read the whole stream at once
    page.evaluate(WATCH_STATUS)
    click_run(page)   # and its step view drawn: its figures follow "Done"
    wait_plot(page, "pq-chart", ["p (target)", "q (draft)"])
    streamed = page_state(page)
    statuses = page.evaluate("() => window.__statuses")
    assert any(s.startswith("Round ") for s in statuses), statuses       # it streamed
    assert statuses[-1].startswith("Done: 120 tokens"), statuses         # and the last word is the end's

    # The library's own run of the same settings and seed: every token of it is on the page.
    gen = speculative_generate(bundled, PROMPT, RunSettings(gamma=4, max_new_tokens=120, seed=SEED))
    emitted = [k for k, _ in streamed["kinds"] if k != "rejected"]   # a rejected draft is shown, not emitted
    assert len(emitted) == gen.stats.new_tokens == 120
    assert f"Done: 120 tokens in {len(gen.rounds)} rounds" in statuses[-1]
    ends = [t for t in json.loads(streamed["charts"]["timeline"]) if t["meta"] in
            ("residual", "biased_p", "bonus", "greedy", "plain")]
    assert sum(len(t["x"]) for t in ends) == len(gen.rounds)             # one end token per round, none lost

    # The same run shown in one piece (its trace imported on a fresh page): the same page.
    trace = tmp_path / "trace.json"
    export_trace(page, app_url, trace)
    with imported_on_a_fresh_page(visitors, app_url, trace) as fresh:
        whole = page_state(fresh)
    for part in ("text", "kinds", "metrics", "caption", "round", "titles"):
        assert streamed[part] == whole[part], part
    for elem_id in CHARTS:
        assert streamed["charts"][elem_id] == whole["charts"][elem_id], elem_id
    assert page.console_errors == []


def test_the_same_run_again_comes_from_the_cache_and_says_so(page):
    page.wait_for_selector("#run")
    page.locator("#prompt textarea").fill(PROMPT)
    set_number(page, "max-new", 16)
    set_number(page, "seed", SEED + 1)
    page.locator("#run").click()
    wait_done(page)
    first = page.locator("#run-status").inner_text()
    assert "From the cache" not in first and "Decoded now: the models ran" in first   # said as plainly
    text = page.locator("#token-text").inner_text()
    page.locator("#run").click()
    wait_ended(page, "From the cache")   # and its event over: Run is clicked again next
    again = page.locator("#run-status").inner_text()
    # the same run, its time when it was decoded
    assert again.split(" From the cache")[0] == first.split(" Decoded now")[0].strip()
    # "decode afresh": the models run again, and give the same tokens, with this decode's own time
    page.locator("#fresh input").check()
    page.locator("#run").click()
    page.wait_for_function("() => /Decoded now, afresh/.test(document.querySelector('#run-status').innerText)",
                           timeout=RUN_TIMEOUT)
    afresh = page.locator("#run-status").inner_text()
    assert "the same 16 tokens, token for token" in afresh and "this decode took" in afresh, afresh
    assert page.locator("#token-text").inner_text() == text


# Every draw of a chart, counted where Plotly keeps a chart's drawn layout: a draw sets `_fullLayout`
# on the chart's div (its whole figure, once or more a draw). Counted from `window.__countDraws` on,
# with the draws of a chart that had left the page at the time.
COUNT_DRAWS = """window.__draws = new Map(); window.__offPage = 0; window.__countDraws = false;
  Object.defineProperty(HTMLDivElement.prototype, '_fullLayout', {configurable: true,
    get() { return this.__drawn; },
    set(value) {
      if (window.__countDraws) {
        if (!this.isConnected) window.__offPage += 1;
        window.__draws.set(this, (window.__draws.get(this) || 0) + 1);
      }
      this.__drawn = value; }});"""

# Each chart on the page that was drawn while counting: its count, and the count of the same figure
# drawn once into a new chart of the same width (a figure can take more than one pass: Plotly draws
# again when the labels need wider margins).
DRAWS = """async () => {
  const out = [];
  for (const [gd, n] of window.__draws) {
    if (!gd.isConnected) continue;
    const box = document.createElement('div');
    box.style.width = gd.getBoundingClientRect().width + 'px';
    document.body.appendChild(box);
    await window.Plotly.react(box, JSON.parse(JSON.stringify(gd.data)), JSON.parse(JSON.stringify(gd.layout)),
                              {responsive: true});
    out.push([gd.closest('[id]').id, n, window.__draws.get(box)]);
    window.__draws.delete(box);
    box.remove();
  }
  return {offPage: window.__offPage, charts: out}; }"""


# Whether the status line was seen streaming (Gradio's `.generating` border on it), and the most
# endless animations running on that border at any change of the page meanwhile (a transition ends).
WATCH_PULSE = """window.__generating = false; window.__pulses = 0;
  document.addEventListener('DOMContentLoaded', () => new MutationObserver(() => {
    const wrap = document.querySelector('#run-status .wrap.generating');
    if (!wrap) return;
    window.__generating = true;
    const endless = wrap.getAnimations().filter(a => a.effect.getComputedTiming().iterations === Infinity);
    window.__pulses = Math.max(window.__pulses, endless.length);
  }).observe(document.body, {childList: true, subtree: true, attributes: true, characterData: true}));"""


def test_each_figure_a_run_sends_is_drawn_once(visitors, app_url):
    """Gradio's Plot drew each new figure into the chart it replaced, then into the new chart, and
    redrew that one on a resize 100 ms later: three draws of each figure, at the run's end beside
    its decode. The page draws each once (app.js, `drawOnce`): no chart is drawn after it left the
    page, and every chart on it was drawn as many times as its figure drawn once into a new chart.
    While it streams, the status line's border stands still: Gradio's pulse on it had chromium draw
    about 50 frames a second, each with a style pass, beside the decode."""
    page = visitors.new_page()
    try:
        page.add_init_script(COUNT_DRAWS)
        page.add_init_script(WATCH_PULSE)
        page.goto(app_url, wait_until="load")
        page.wait_for_selector("#run")
        set_number(page, "max-new", 120)
        set_number(page, "seed", SEED + 2)   # decoded, not from the cache: it streams
        settle(page)
        page.evaluate("() => { window.__countDraws = true; }")
        click_run(page)
        wait_plot(page, "pq-chart", ["p (target)", "q (draft)"])
        page.wait_for_timeout(1500)   # a resize comes 100 ms after a draw; the step charts one at a time
        drawn = page.evaluate(DRAWS)
        pulse = page.evaluate("() => ({generating: window.__generating, animations: window.__pulses})")
    finally:
        close_page(page)
    assert pulse == {"generating": True, "animations": 0}, pulse
    assert drawn["offPage"] == 0, drawn
    ids = [chart for chart, _, _ in drawn["charts"]]
    assert "timeline" in ids and "pq-chart" in ids, drawn   # the run's charts were counted
    assert all(n == once >= 1 for _, n, once in drawn["charts"]), drawn
    # and the timeline, which the page draws as the run streams and at its end, in one pass: its
    # margin holds its labels, so Plotly's automargin does not draw it again with a wider one
    assert [n for chart, n, _ in drawn["charts"] if chart == "timeline"] == [1], drawn


# The page's event listeners and DOM nodes, live or detached, after a full garbage collection.
def held(cdp) -> dict:
    cdp.send("HeapProfiler.collectGarbage")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {"listeners": metrics["JSEventListeners"], "nodes": metrics["Nodes"]}


# One more chart of the page's kind (a responsive Plotly chart) drawn into the page: what it holds.
ONE_CHART = """async () => { const box = document.createElement('div'); box.style.width = '600px';
  document.body.appendChild(box); window.__oneChart = box;
  await window.Plotly.react(box, [{x: [1, 2, 3], y: [1, 3, 2], name: 'a'}, {x: [1, 2], y: [2, 1], name: 'b'}],
                            {height: 300, title: {text: 'one chart'}}, {responsive: true}); }"""
DROP_ONE_CHART = """() => { const box = window.__oneChart; delete window.__oneChart;
  window.Plotly.purge(box); box.remove(); }"""


def test_the_charts_a_run_replaces_are_let_go(page, visitors):
    """Gradio replaces a chart with each new figure without purging the old one: Plotly keeps a
    window resize listener for it, and the page's ResizeObserver watched it, so every chart a run
    replaced stayed in memory with its listeners (about 2,200 nodes and 400 listeners a 64-token
    run, growing with every run). One more run leaves the page holding fewer listeners than one chart
    has."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.wait_for_selector("#run")
    page.wait_for_function("() => window.Plotly && document.querySelector('#timeline .js-plotly-plot')")
    before_chart = held(cdp)
    page.evaluate(ONE_CHART)
    with_chart = held(cdp)
    one = {k: with_chart[k] - before_chart[k] for k in with_chart}
    page.evaluate(DROP_ONE_CHART)
    assert one["listeners"] > 0 and one["nodes"] > 0, one
    set_number(page, "max-new", 24)
    after = []
    for k in range(2):
        set_number(page, "seed", SEED + 10 + k)   # each run decoded: its figures are new
        settle(page)
        click_run(page)
        wait_plot(page, "pq-chart", ["p (target)", "q (draft)"])
        page.wait_for_timeout(1500)   # the step charts come one at a time after "Done"
        after.append(held(cdp))
    grew = {k: after[1][k] - after[0][k] for k in one}
    # Listeners, not nodes: a run's own text and step view differ from the last one's by hundreds of
    # nodes (384 more in one run, against a small chart's 157), while a run adds no listener.
    assert grew["listeners"] < one["listeners"], (grew, one)
