"""One round on one sheet, for a teacher to print or paste into slides: the round's three
charts (p against q, the acceptance test, how the round ended) with their numbers (each draft's
verdict, α of the round, the tokens emitted) and the run's settings.

A single HTML file that needs nothing but a browser, offline: Plotly's own script is inlined (the
one the plotly package ships, as the page's charts use it), the charts are drawn from the same
figures as the step viewer's. Printed (the print button or the browser's own), it fits A4 or
Letter in portrait: print to PDF there. Its "Save as PNG" button draws the sheet into one image in
the browser (`Plotly.toImage` for each chart, the text drawn beside them): nothing is rendered on
the server, so a CPU Space without a browser or Kaleido serves it as well as any machine.
"""

from __future__ import annotations

import html
import json

import plotly.io as pio
from plotly.offline import get_plotlyjs

from ...core.registry import labels
from ...explain.looks import LOOKS, token_label, token_text
from ...trace.outcomes import Status
from ...trace.spine import Generation
from .step_charts import acceptance_figure, end_figure, pq_figure

SHEET_PX = 700   # a chart's width on the sheet: A4 or Letter, portrait, at the browser's 96 px an inch
# (the charts' ids, their names above them on the sheet, and their widths in the PNG: the p/q chart
# and the test side by side, the end of the round under both)
CHARTS = (("sheet-pq", "p (target) and q (draft)", SHEET_PX), ("sheet-accept", "acceptance test", SHEET_PX),
          ("sheet-end", "how the round ended", 2 * SHEET_PX))


def file_stem(gen: Generation, round_index: int) -> str:
    return f"specdec-round-{round_index + 1}-of-{len(gen.rounds)}"


def settings_line(gen: Generation) -> str:
    """The run's settings in one line: what reproduces it."""
    s, sampling, models = gen.settings, gen.settings.sampling, gen.models or {}
    pair = models.get("label") or " / ".join(str(m) for m in (models.get("target"), models.get("draft")) if m)
    rule = "skip the adjustment (biased)" if s.skip_adjustment else "exact"
    template = "" if s.chat is None else " · chat template" if s.chat else " · raw text"
    return (f"{pair} · drafter: {labels().get(s.drafter, s.drafter)} · γ = {s.gamma} · "
            f"T = {sampling.temperature:g}, top-k {sampling.top_k}, top-p {sampling.top_p:g} · seed {s.seed} · "
            f"rule: {rule}{template}")


def round_numbers(gen: Generation, round_index: int) -> list[str]:
    """The round's numbers in lines: what was drafted and tested, α of the round, what it emitted
    and how its last token was drawn, then one line per draft."""
    r = gen.rounds[round_index]
    tested = sum(pos.status is not Status.UNUSED for pos in r.positions)
    rejected = [k for k, pos in enumerate(r.positions) if pos.status is Status.REJECTED]
    untested = len(r.positions) - tested
    verdict = (f"accepted {r.n_accepted}" + (f", rejected draft {rejected[0] + 1}" if rejected else "")
               + (f", {untested} thrown away untested" if untested else ""))
    alpha = (f"α of this round = {r.n_accepted}/{tested} = {r.n_accepted / tested:.3f} (accepted of tested)"
             if tested else "α of this round: no draft tested")
    emitted = json.dumps("".join(token_text(gen, t) for t in r.emitted), ensure_ascii=False)
    look = LOOKS[r.ending]
    lines = [f"Drafted {len(r.positions)}: {verdict}. {alpha}.",
             f"Emitted {len(r.emitted)} token{'' if len(r.emitted) == 1 else 's'}: {emitted}; the last, "
             f"{json.dumps(token_text(gen, r.end_token), ensure_ascii=False)}, {look.symbol} {look.label}."]
    for k, pos in enumerate(r.positions):
        test = "" if pos.status is Status.UNUSED else f", min(1, p/q) = {min(1.0, pos.ratio):.3f}, u = {pos.u:.3f}"
        lines.append(f"Draft {k + 1} {LOOKS[pos.status].symbol} {token_label(gen, pos.draft_token)}: "
                     f"p(x) = {pos.p_draft:.3g}, q(x) = {pos.q_draft:.3g}{test}, β = {pos.beta:.3f} → "
                     f"{pos.status.value}")
    if round_index in gen.notes:
        lines.append(f"Note: {gen.notes[round_index]}")
    return lines


def sheet_lines(gen: Generation, round_index: int, position: int | None) -> list[str]:
    """Every line of text on the sheet, the heading first."""
    title = f" — {gen.title}" if gen.title else ""
    s = gen.stats
    shown = "" if position is None else f", draft {position + 1} in the p/q chart and the test"
    prompt = gen.prompt if len(gen.prompt) <= 300 else gen.prompt[:299] + "…"
    return [f"specdec · round {round_index + 1} of {len(gen.rounds)}{shown}{title}",
            f"Prompt: {json.dumps(prompt, ensure_ascii=False)}", settings_line(gen),
            *round_numbers(gen, round_index),
            f"The run: {s.new_tokens} tokens in {s.rounds} rounds, α = {s.acceptance_rate:.3f} "
            f"({s.accepted} of {s.tested} tested drafts accepted)."]


def sheet_figures(gen: Generation, round_index: int, position: int | None) -> list[str]:
    """The three charts as Plotly JSON, as the step viewer draws them, less their linear/log
    buttons (on paper they do nothing), at the sheet's width."""
    figures = [pq_figure(gen, round_index, position), acceptance_figure(gen, round_index, position),
               end_figure(gen, round_index)]
    for fig in figures:
        fig.layout.updatemenus = ()   # update_layout(updatemenus=[]) keeps them
        fig.layout.width = SHEET_PX
        # the title from the chart's left edge, not the plot's: 55 px more for its longest line
        fig.layout.title.update(xref="container", x=0.01)
    return [pio.to_json(fig, validate=False) for fig in figures]


def sheet_html(gen: Generation, round_index: int, position: int | None) -> str:
    """The sheet: one HTML file, offline (Plotly inlined), made for print, with a PNG button."""
    lines = sheet_lines(gen, round_index, position)
    data = dict(lines=lines, file=file_stem(gen, round_index),
                charts=[dict(id=i, label=label, width=w) for i, label, w in CHARTS])
    text = "".join(f"<p{HEAD if k == 0 else ''}>{html.escape(line)}</p>" for k, line in enumerate(lines))
    charts = "".join(f'<section class="chart"><h2>{html.escape(label)}</h2><div id="{i}"></div></section>'
                     for i, label, _ in CHARTS)
    figures = ",".join(f.replace("</", "<\\/") for f in sheet_figures(gen, round_index, position))
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(lines[0])}</title>"
            f"<style>{SHEET_CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            '<div class="no-print tools"><button id="print-sheet" onclick="window.print()">Print (or save as PDF)'
            '</button> <button id="png-sheet" onclick="sheetPng()">Save as PNG (for slides)</button></div>'
            f'<header>{text}</header>{charts}'
            f'<script id="sheet-data" type="application/json">{_script_json(data)}</script>'
            f"<script>const FIGURES = [{figures}];{SHEET_JS}</script></body></html>")


HEAD = ' class="head"'


def _script_json(value) -> str:
    """JSON inside a <script> element: "</" written so that it cannot close the element."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


SHEET_CSS = """
body { font-family: system-ui, sans-serif; color: #111; margin: 16px auto; width: 700px; }
header p { margin: 2px 0; font-size: 13px; line-height: 1.35; }
header p.head { font-size: 17px; font-weight: 600; margin-bottom: 6px; }
h2 { font-size: 13px; font-weight: 600; margin: 12px 0 0; }
.chart { break-inside: avoid; page-break-inside: avoid; }
.tools { margin-bottom: 10px; }
@page { size: auto; margin: 12mm; }
@media print { .no-print { display: none; } body { margin: 0 auto; } }
"""

# Draws the charts, then (the PNG button) the sheet into one canvas: the text at the top, the p/q
# chart and the test side by side, the end of the round under both, at twice the pixels (slides).
SHEET_JS = """
const SHEET = JSON.parse(document.getElementById('sheet-data').textContent);
window.sheetReady = Promise.all(SHEET.charts.map((c, k) => Plotly.newPlot(c.id, FIGURES[k].data, FIGURES[k].layout,
  {staticPlot: true, displayModeBar: false}))).then(() => { document.body.dataset.ready = '1'; });
function wrapText(ctx, text, width) {
  const out = []; let line = '';
  for (const word of text.split(' ')) {
    const next = line ? line + ' ' + word : word;
    if (ctx.measureText(next).width > width && line) { out.push(line); line = word; } else { line = next; }
  }
  return out.concat(line ? [line] : []);
}
async function sheetPng() {
  await window.sheetReady;
  const scale = 2, pad = 20, width = SHEET.charts[2].width;
  const shots = await Promise.all(SHEET.charts.map(async c => {
    const el = document.getElementById(c.id), height = el._fullLayout.height;
    const img = new Image();
    img.src = await Plotly.toImage(el, {format: 'png', width: c.width, height: height, scale: scale});
    await img.decode();
    return {img: img, width: c.width, height: height, label: c.label};
  }));
  const canvas = document.createElement('canvas'), ctx = canvas.getContext('2d');
  const fonts = ['600 19px system-ui, sans-serif', '14px system-ui, sans-serif'];
  const lines = SHEET.lines.flatMap((text, k) => { ctx.font = fonts[k ? 1 : 0];
    return wrapText(ctx, text, width - 2 * pad).map(t => [t, k ? 1 : 0]); });
  const top = pad + lines.length * 20 + 8, row = Math.max(shots[0].height, shots[1].height);
  canvas.width = width * scale; canvas.height = (top + row + shots[2].height + pad) * scale;
  ctx.scale(scale, scale); ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, width, canvas.height);
  ctx.fillStyle = '#111'; ctx.textBaseline = 'top';
  lines.forEach(([text, font], k) => { ctx.font = fonts[font]; ctx.fillText(text, pad, pad + k * 20); });
  const at = [[0, top], [shots[0].width, top], [0, top + row]];
  shots.forEach((s, k) => { ctx.drawImage(s.img, at[k][0], at[k][1], s.width, s.height);
    ctx.font = fonts[0]; ctx.fillText(s.label, at[k][0] + pad, at[k][1] + 12); });
  canvas.toBlob(blob => { const a = document.createElement('a'); a.href = URL.createObjectURL(blob);
    a.download = SHEET.file + '.png'; document.body.appendChild(a); a.click(); a.remove(); }, 'image/png');
}
"""
