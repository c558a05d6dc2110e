"""One round on one sheet (specdec/app/shows/round_sheet.py): an HTML file a teacher prints (to PDF)
or saves as a PNG for slides, offline. Its text from the trace; in Debian's chromium, from the file
alone (no server, no network), its charts drawn, its PNG made and its print layout."""

from __future__ import annotations

import io
import json
import re

import pytest

from specdec import RunSettings, SamplingConfig, speculative_generate
from specdec.app.shows import round_sheet
from specdec.trace.outcomes import Status

SETTINGS = RunSettings(gamma=4, max_new_tokens=24, seed=5, drafter="model", sampling=SamplingConfig(temperature=1.0))


@pytest.fixture(scope="module")
def run(bundled):
    gen = speculative_generate(bundled, "To be, or not to be", SETTINGS)
    r = next(r.index for r in gen.rounds if r.n_accepted < len(r.positions) - 1)   # rejected, then untested
    return gen, r


def test_the_sheet_says_the_rounds_numbers_and_the_runs_settings(run):
    gen, r = run
    rnd = gen.rounds[r]
    lines = round_sheet.sheet_lines(gen, r, rnd.n_accepted)
    assert lines[0].startswith(f"specdec · round {r + 1} of {len(gen.rounds)}, draft {rnd.n_accepted + 1}")
    tested = rnd.n_accepted + 1
    text = "\n".join(lines)
    assert f"α of this round = {rnd.n_accepted}/{tested} = {rnd.n_accepted / tested:.3f}" in text, text
    assert f"rejected draft {rnd.n_accepted + 1}" in text and "thrown away untested" in text
    assert "γ = 4" in text and "T = 1, top-k 0, top-p 1" in text and "seed 5" in text and "rule: exact" in text
    emitted = json.dumps("".join(gen.token(t) for t in rnd.emitted), ensure_ascii=False)
    assert f"Emitted {len(rnd.emitted)} tokens: {emitted}" in text or f"Emitted 1 token: {emitted}" in text
    drafts = [line for line in lines if line.startswith("Draft ")]
    assert [line.rsplit("→ ", 1)[1] for line in drafts] == [pos.status.value for pos in rnd.positions]
    rejected = rnd.positions[rnd.n_accepted]
    assert rejected.status is Status.REJECTED and f"u = {rejected.u:.3f}" in drafts[rnd.n_accepted]
    page = round_sheet.sheet_html(gen, r, rnd.n_accepted)
    figures = json.loads("[" + re.search(r"const FIGURES = \[(.*?)\];", page, re.S).group(1) + "]")
    assert len(figures) == 3 and all(not f["layout"].get("updatemenus") for f in figures)   # no buttons on paper
    assert figures[0]["layout"]["title"]["text"].startswith(f"Round {r + 1}, draft {rnd.n_accepted + 1}:")
    assert "@media print" in page and "Plotly.newPlot" in page and 'id="png-sheet"' in page
    assert "https://" not in page.split("<script>", 1)[0]   # nothing fetched: Plotly is inlined


def test_a_sheets_text_cannot_close_its_script(run):
    """A title (or a token) holding "</script>" stays text: the sheet's data cannot end its element."""
    from dataclasses import replace

    gen, r = run
    page = round_sheet.sheet_html(replace(gen, title="</script><b>x"), r, None)
    assert page.count("</script>") == page.count("<script")   # each element closed once, by itself
    assert "&lt;/script&gt;&lt;b&gt;x" in page


def test_the_sheet_draws_prints_and_saves_a_png_offline(run, browser, tmp_path):
    """Opened from the file alone, the sheet draws its three charts; its PNG button saves one
    image (the text above, p/q and the test side by side, the end of the round under them, twice
    the pixels); printed, its buttons are hidden and it makes a PDF."""
    from PIL import Image

    gen, r = run
    path = tmp_path / "sheet.html"
    path.write_text(round_sheet.sheet_html(gen, r, None), encoding="utf-8")
    context = browser.new_context(viewport={"width": 900, "height": 1000}, accept_downloads=True, offline=True)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=30_000)
    assert page.locator(".js-plotly-plot").count() == 3
    heights = page.evaluate("() => ['sheet-pq', 'sheet-accept', 'sheet-end'].map("
                            "id => document.getElementById(id)._fullLayout.height)")
    with page.expect_download(timeout=30_000) as download:
        page.locator("#png-sheet").click()
    assert download.value.suggested_filename == f"specdec-round-{r + 1}-of-{len(gen.rounds)}.png"
    image = Image.open(io.BytesIO(download.value.path().read_bytes()))
    assert image.format == "PNG" and image.width == 2 * 2 * round_sheet.SHEET_PX
    assert image.height > 2 * (max(heights[:2]) + heights[2])   # the charts, and the text above them
    colours = image.convert("RGB").resize((140, 140)).getcolors(140 * 140)
    assert colours is None or len(colours) > 20   # drawn, not a blank canvas
    page.emulate_media(media="print")
    assert not page.locator("#png-sheet").is_visible()
    pdf = page.pdf(format="A4")
    assert pdf.startswith(b"%PDF")
    assert errors == []
    context.close()


def test_each_step_chart_saves_a_16_9_png_of_its_round_straight_from_the_page(run):
    """Beside the sheet (for print), each of the step viewer's charts saves a 16:9 PNG for a slide
    from the page itself: its figure's JSON, as the server sends it (Gradio's own encoding, and the
    one a class shares), carries Plotly's config, whose camera button saves a 1600 x 900 PNG named
    after the round; the browser draws it, so nothing is rendered on the server. The figure is the
    step viewer's own otherwise."""
    import plotly.graph_objects as go
    from gradio.components import Plot

    from specdec.app.server.encoded import plot_data
    from specdec.app.shows import views

    gen, r = run
    view = views.step_view(gen, r, None)
    stem = round_sheet.file_stem(gen, r)
    for name, chart in (("pq_plot", "p-and-q"), ("acc_plot", "acceptance-test"), ("end_plot", "end-of-round")):
        figure = view[name]
        for sent in (Plot().postprocess(figure).plot, plot_data(figure).plot):
            options = json.loads(sent)["config"]["toImageButtonOptions"]
            assert options == dict(format="png", width=1600, height=900, scale=1, filename=f"{stem}-{chart}")
        drawn = json.loads(figure.to_json())
        assert {k: v for k, v in drawn.items() if k != "config"} == json.loads(go.Figure(figure).to_json())
    assert "config" not in json.loads(views.final_view(gen)["timeline"].to_json())   # a run's chart, not a round's


def test_a_step_charts_camera_button_saves_a_1600_by_900_png(run, browser, tmp_path):
    """In Debian's chromium, offline: the p/q chart's JSON as the server sends it, drawn as the
    page's Plotly draws a figure (data, layout and the config its JSON holds); its modebar's
    camera button saves a PNG of 1600 x 900 pixels named after the round."""
    from PIL import Image
    from plotly.offline import get_plotlyjs

    from specdec.app.server.encoded import plot_data
    from specdec.app.shows import views

    gen, r = run
    sent = plot_data(views.step_view(gen, r, None)["pq_plot"]).plot.replace("</", "<\\/")
    path = tmp_path / "chart.html"
    path.write_text(f'<!doctype html><html><head><meta charset="utf-8"><script>{get_plotlyjs()}</script></head>'
                    f'<body><div id="chart"></div><script>const f = {sent};'
                    "Plotly.newPlot('chart', f.data, f.layout, f.config);</script></body></html>", encoding="utf-8")
    context = browser.new_context(viewport={"width": 1000, "height": 800}, accept_downloads=True, offline=True)
    page = context.new_page()
    page.goto(path.as_uri(), wait_until="load")
    page.locator("#chart").hover()
    with page.expect_download(timeout=30_000) as download:
        page.locator('.modebar-btn[data-title^="Download plot"]').first.click()
    assert download.value.suggested_filename == f"{round_sheet.file_stem(gen, r)}-p-and-q.png"
    image = Image.open(io.BytesIO(download.value.path().read_bytes()))
    assert image.format == "PNG" and image.size == (1600, 900)
    context.close()
