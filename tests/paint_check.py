"""Reading a rendered page's figures as they are painted, not as their data says: the defects a
reader saw at a first run that a figure's data and its text boxes cannot show.

- a reference that resolves nowhere: Plotly draws clip paths and pattern fills (hatched bars) as
  url('<page address>#id'); when the page's address changed after the draw, the hatched bars
  were not painted at all and bars on a log axis were not clipped, running over the tick labels;
- a trace with points that painted nothing (no bar, line or marker drawn);
- a legend over the plot area (the tokens-per-second legend covered the lower lines);
- a bar that leaves the plot area with no working clip path to cut it there.

Used by tests/test_paint_browser.py; also runnable by hand against any page (`problems(page)`).
"""

from __future__ import annotations

TOLERANCE = 1.0   # pixels, as in layout_check

_COLLECT = """(root) => {
  const out = [];
  const here = window.location.href.split('#')[0];
  // A url(...) reference resolves when it names this document (or none) and an element that exists.
  const broken = (value) => {
    const m = /url\\(\\s*['"]?([^'")]*)['"]?\\s*\\)/.exec(value || '');
    if (!m) return null;
    const cut = m[1].lastIndexOf('#');
    const [base, id] = cut >= 0 ? [m[1].slice(0, cut), m[1].slice(cut + 1)] : [m[1], ''];
    if (base && base !== here) return `points at another address (${base.slice(0, 60)}…)`;
    if (!document.getElementById(id)) return `names #${id}, which is not on the page`;
    return null;
  };
  const rect = (r) => ({x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  for (const gd of document.querySelectorAll(root + ' .js-plotly-plot')) {
    if (!gd.offsetParent || !gd._fullLayout) continue;
    const host = gd.closest('[id]');
    const name = host ? host.id : '?';
    const refs = new Set();
    for (const el of gd.querySelectorAll('[clip-path], [style*="url("], [fill^="url("]')) {
      for (const value of [el.getAttribute('clip-path'), el.style.fill, el.getAttribute('fill'), el.style.clipPath]) {
        const why = broken(value);
        if (why) refs.add(`${name}: a ${el.tagName.toLowerCase()}'s clip path or fill ${why}`);
      }
    }
    out.push(...refs);
    const size = gd._fullLayout._size;
    const box = gd.getBoundingClientRect();
    const plots = [];   // every subplot's area on screen
    for (const sp of Object.values(gd._fullLayout._plots || {})) {
      const xa = sp.xaxis, ya = sp.yaxis;
      plots.push({x0: box.left + xa._offset, x1: box.left + xa._offset + xa._length,
                  y0: box.top + ya._offset, y1: box.top + ya._offset + ya._length});
    }
    if (!plots.length) plots.push({x0: box.left + size.l, x1: box.left + size.l + size.w,
                                   y0: box.top + size.t, y1: box.top + size.t + size.h});
    // Each trace with points painted something.
    const drawn = Array.from(gd.querySelectorAll('.trace'));
    (gd._fullData || []).forEach((trace, i) => {
      if (trace.visible !== true || !trace.y || !trace.y.some((y) => y !== null && y !== 0)) return;
      const g = drawn.find((el) => el.__data__ && el.__data__[0] && el.__data__[0].trace &&
                                   el.__data__[0].trace.index === i);
      const marks = g ? Array.from(g.querySelectorAll('path')).filter((p) => {
        const d = p.getAttribute('d'); const b = p.getBBox();
        return d && d !== 'M0,0Z' && (b.width > 0 || b.height > 0); }) : [];
      if (!marks.length) out.push(`${name}: trace ${JSON.stringify(trace.name || i)} has points but painted nothing`);
    });
    // Bars inside the plot, or cut there by a working clip path.
    for (const bar of gd.querySelectorAll('.barlayer .point path')) {
      const r = bar.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      const inside = plots.some((p) => r.left >= p.x0 - 1 && r.right <= p.x1 + 1 &&
                                        r.top >= p.y0 - 1 && r.bottom <= p.y1 + 1);
      if (inside) continue;
      let clipped = false;
      for (let e = bar; e && e !== gd; e = e.parentElement)
        if (e.getAttribute && e.getAttribute('clip-path') && !broken(e.getAttribute('clip-path'))) {
          clipped = true;
          break;
        }
      if (!clipped) { out.push(`${name}: a bar runs outside the plot area, unclipped`); break; }
    }
    // The legend beside the data, not over it.
    for (const bg of gd.querySelectorAll('.legend rect.bg')) {
      const l = rect(bg.getBoundingClientRect());
      for (const p of plots) {
        const w = Math.min(l.x1, p.x1) - Math.max(l.x0, p.x0), h = Math.min(l.y1, p.y1) - Math.max(l.y0, p.y0);
        if (w > 1 && h > 1) {
          out.push(`${name}: the legend covers the plot area (${Math.round(w)} x ${Math.round(h)} px)`);
          break;
        }
      }
    }
  }
  return out;
}"""

# A text box whose content is taller than the box and cannot be scrolled, or that runs into the
# block under it (the greedy run's last lines hid behind the Timeline card).
_TEXT_BOX = """([box, next]) => {
  const out = [];
  const el = document.querySelector(box);
  if (!el || !el.offsetParent) return out;
  const cs = getComputedStyle(el);
  if (el.scrollHeight > el.clientHeight + 1 && !['auto', 'scroll'].includes(cs.overflowY))
    out.push(`${box}: ${el.scrollHeight} px of text in a ${el.clientHeight} px box that does not scroll`);
  const under = document.querySelector(next);
  const block = el.closest('.block') || el;
  if (under && under.offsetParent && block.getBoundingClientRect().bottom > under.getBoundingClientRect().top + 1)
    out.push(`${box} runs ${Math.round(block.getBoundingClientRect().bottom - under.getBoundingClientRect().top)} px ` +
             `into ${next}`);
  return out;
}"""


def problems(page, root: str = "body") -> list[str]:
    """Every unpainted trace, broken reference, unclipped bar and covering legend under `root`."""
    return page.evaluate(_COLLECT, root)


def text_box_problems(page, box: str, next_block: str) -> list[str]:
    return page.evaluate(_TEXT_BOX, [box, next_block])


# Each rejected draft's text: a newline in it, or right after it, breaks the line it sits on.
REJECTED_BREAKS = """() => Array.from(document.querySelectorAll('#token-text .tok-rejected')).filter((el) => {
  const after = el.nextSibling;
  return el.textContent.includes('\\n') || (after && after.nodeType === 3 && after.textContent.startsWith('\\n'));
}).map((el) => JSON.stringify(el.textContent))"""
