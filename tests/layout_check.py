"""Reading a rendered page's figures as a reader sees them: every piece of SVG text Plotly drew
(titles, legend entries, tick labels, annotations, button labels, bar texts), as the quadrilateral
it covers on screen, and the three defects a careful reader notices:

- two pieces of text that cover each other (more than `TOLERANCE` pixels deep), or text under the
  page's own label of the figure (Gradio draws it over the figure's top left corner);
- text cut off: outside its figure, or a legend entry outside the legend's own box;
- a category axis that shows fewer labels than it has categories (Plotly drops every second
  label when they are crowded).

Used by tests/test_layout_browser.py; also runnable by hand against any page (`problems(page)`).
"""

from __future__ import annotations

TOLERANCE = 1.0   # pixels: two boxes that touch, or overlap by a pixel of antialiasing, are fine

# For every visible Plotly figure under `root`: its box, its texts (corners on screen, rotated
# text included), the legend's box, and its category axes with their rendered tick labels.
_COLLECT = """(root) => {
  const figs = [];
  const visible = (el, stop) => {
    for (let e = el; e && e !== stop; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity) === 0) return false;
    }
    return true;
  };
  const rect = (r) => ({x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  for (const gd of document.querySelectorAll(root + ' .js-plotly-plot')) {
    if (!gd.offsetParent || !gd._fullLayout) continue;          // in a hidden tab or not drawn
    const host = gd.closest('[id]');
    const fig = {id: host ? host.id : '?', box: rect(gd.getBoundingClientRect()), texts: [], legends: [],
                 axes: [], labels: []};
    // The page's own label of the figure (Gradio's, drawn over the figure's top left corner).
    const block = gd.closest('.block') || host;
    if (block) for (const lab of block.querySelectorAll('label[data-testid="block-label"]'))
      if (lab.offsetParent) fig.labels.push({text: lab.innerText.trim(), box: rect(lab.getBoundingClientRect())});
    for (const t of gd.querySelectorAll('text')) {
      const s = (t.textContent || '').trim();
      if (!s || !visible(t, gd)) continue;
      if (t.closest('.hoverlayer')) continue;
      const bb = t.getBBox();
      if (bb.width === 0 || bb.height === 0) continue;
      const m = t.getScreenCTM();
      const corners = [[bb.x, bb.y], [bb.x + bb.width, bb.y], [bb.x + bb.width, bb.y + bb.height],
                       [bb.x, bb.y + bb.height]].map(([x, y]) => {
        const p = new DOMPoint(x, y).matrixTransform(m); return [p.x, p.y]; });
      const legend = t.closest('.legend');
      const parent = t.parentElement;
      fig.texts.push({text: s, corners: corners, legend: !!legend,
                      kind: (parent && parent.getAttribute('class')) || t.getAttribute('class') || ''});
    }
    for (const bg of gd.querySelectorAll('.legend rect.bg')) fig.legends.push(rect(bg.getBoundingClientRect()));
    const L = gd._fullLayout;
    for (const key of Object.keys(L)) {
      if (!/^[xy]axis\\d*$/.test(key)) continue;
      const ax = L[key];
      if (!ax || ax.type !== 'category' || ax.visible === false || ax.showticklabels === false) continue;
      const cats = (ax._categories || []).length;
      if (!cats) continue;
      const labels = Array.from(gd.querySelectorAll('g.' + ax._id + 'tick text'))
        .filter(t => (t.textContent || '').trim() && visible(t, gd)).length;
      const ticks = ax.tickmode === 'array' && ax.tickvals ? ax.tickvals.length : cats;
      fig.axes.push({axis: key, categories: Math.min(cats, ticks), labels: labels});
    }
    figs.push(fig);
  }
  return figs;
}"""


def figures(page, root: str = "body") -> list[dict]:
    """What `_COLLECT` reads from every visible figure under the CSS selector `root`."""
    return page.evaluate(_COLLECT, root)


def _project(poly, axis):
    dots = [x * axis[0] + y * axis[1] for x, y in poly]
    return min(dots), max(dots)


def overlap_depth(a, b) -> float:
    """How deep two convex quadrilaterals (lists of 4 corners) overlap, in pixels (separating
    axis test: the smallest overlap of their projections on the edges' normals; <= 0 = apart)."""
    depth = float("inf")
    for poly in (a, b):
        for i in range(4):
            (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % 4]
            nx, ny = y0 - y1, x1 - x0
            norm = (nx * nx + ny * ny) ** 0.5
            if norm == 0:
                continue
            axis = (nx / norm, ny / norm)
            lo_a, hi_a = _project(a, axis)
            lo_b, hi_b = _project(b, axis)
            depth = min(depth, min(hi_a, hi_b) - max(lo_a, lo_b))
            if depth <= 0:
                return depth
    return depth


def _inside(corners, box, slack: float = TOLERANCE) -> bool:
    return all(box["x0"] - slack <= x <= box["x1"] + slack and box["y0"] - slack <= y <= box["y1"] + slack
               for x, y in corners)


def figure_problems(fig: dict) -> list[str]:
    """Every overlap, clipped text and dropped label of one figure, in words."""
    out = []
    texts = fig["texts"]
    for i, a in enumerate(texts):
        if not _inside(a["corners"], fig["box"]):
            out.append(f"{fig['id']}: text {a['text']!r} is cut off (outside the figure)")
        if a["legend"] and fig["legends"] and not any(_inside(a["corners"], lg) for lg in fig["legends"]):
            out.append(f"{fig['id']}: legend entry {a['text']!r} is cut off (outside the legend's box)")
        for b in texts[i + 1:]:
            depth = overlap_depth(a["corners"], b["corners"])
            if depth > TOLERANCE:
                out.append(f"{fig['id']}: {a['text']!r} and {b['text']!r} overlap ({depth:.0f} px)")
    for label in fig.get("labels", []):
        box = label["box"]
        corners = [[box["x0"], box["y0"]], [box["x1"], box["y0"]], [box["x1"], box["y1"]], [box["x0"], box["y1"]]]
        for a in texts:
            depth = overlap_depth(a["corners"], corners)
            if depth > TOLERANCE:
                out.append(f"{fig['id']}: {a['text']!r} is under the page's label {label['text']!r} ({depth:.0f} px)")
    for ax in fig["axes"]:
        if ax["labels"] < ax["categories"]:
            out.append(f"{fig['id']}: {ax['axis']} shows {ax['labels']} of its {ax['categories']} category labels")
    return out


def problems(page, root: str = "body") -> list[str]:
    return [p for fig in figures(page, root) for p in figure_problems(fig)]


# ---------------------------------------------------------------- tables

WORD_CHARS = 12   # a word this short (a number, an id, a short token) never breaks over two lines

# Every shown table cell under `root` whose text breaks a short word over lines ("3807/5", or one
# digit a line in a column too narrow for its numbers). A longer word (a long token) may break, and
# a line may break at a space, at a space the page shows as a mark (a token's ␣, ↵ or ⇥), or after
# a hyphen or an en dash ("1.33–/1.55×").
_BROKEN_WORDS = """([root, most]) => {
  const out = [];
  const seen = new Set();
  // Gradio's tables: a header <table>, and a body of div grid cells (a virtual list)
  for (const cell of document.querySelectorAll(root + ' :is(td, th, [role=gridcell], [role=columnheader])')) {
    if (!cell.offsetParent) continue;
    const host = cell.closest('[id]');
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      if (seen.has(t) || getComputedStyle(t.parentElement).visibility !== 'visible') continue;
      seen.add(t);
      // words: between spaces, the page's shown spaces (␣ ↵ ⇥); a break after a hyphen or a dash is fine
      for (const m of t.textContent.matchAll(/[^\\s\u2423\u21b5\u21e5\u2013-]+/g)) {
        if (m[0].length > most) continue;
        const range = document.createRange();
        range.setStart(t, m.index);
        range.setEnd(t, m.index + m[0].length);
        const lines = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0)
                              .map(r => Math.round(r.top)));
        if (lines.size > 1)
          out.push(`${host ? host.id : '?'}: ${JSON.stringify(m[0])} breaks over ${lines.size} lines`);
      }
    }
  }
  return out;
}"""


def broken_words(page, root: str = "body") -> list[str]:
    """Every short word (`WORD_CHARS`) in a shown table under `root` that breaks over lines."""
    return page.evaluate(_BROKEN_WORDS, [root, WORD_CHARS])


# ---------------------------------------------------------------- pointers

POINTER_SLACK = 6   # px between an arrow's tip and the top of the bar it names (the arrowhead's own size)

# A figure's first annotation, when it is an arrow at a category of the x axis (the p/q chart's
# "drafted", the end chart's "drawn"): where its tip is, and where the tallest bar at that category
# ends, on screen.
_POINTER = """(id) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  const ann = gd && gd.layout && (gd.layout.annotations || [])[0];
  if (!ann || !ann.showarrow || ann.xref !== 'x') return null;
  const arrow = gd.querySelector('.annotation[data-index="0"] .annotation-arrow-g');
  if (!arrow) return null;
  let top = Infinity;
  for (const g of gd.querySelectorAll('.barlayer .trace')) {
    const trace = g.__data__ && g.__data__[0] && g.__data__[0].trace;
    if (!trace || (trace.xaxis || 'x') !== 'x') continue;
    const k = Array.from(trace.x).indexOf(ann.x);
    const bar = k >= 0 ? g.querySelectorAll('.point')[k] : null;
    const box = bar && bar.getBoundingClientRect();
    if (box && box.height > 0) top = Math.min(top, box.top);
  }
  return {text: ann.text, tip: arrow.getBoundingClientRect().bottom, top: top};
}"""


def pointer_misses(page, ids: tuple[str, ...] = ("pq-chart", "end-chart")) -> list[str]:
    """Every figure among `ids` whose pointer's arrow ends away from the top of the bar it names."""
    out = []
    for fig in ids:
        found = page.evaluate(_POINTER, fig)
        if found is not None and abs(found["tip"] - found["top"]) > POINTER_SLACK:
            out.append(f"{fig}: {found['text']!r} ends {found['tip'] - found['top']:+.0f} px from its bar's top")
    return out
