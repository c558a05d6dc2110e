() => {
  // A replaced chart is let go: Plotly keeps a window resize listener for each chart until it is
  // purged, and the ResizeObserver below holds each chart it watches, so every chart a run replaced
  // stayed in memory with its listeners (about 2,200 nodes and 400 listeners a 64-token run).
  const retire = (gd) => {
    if (gd.__specdecRetired) return;
    gd.__specdecRetired = true;
    fit.unobserve(gd);   // `fit` is declared below: a chart is retired only after this script has run
    window.Plotly.purge(gd);
  };
  // Whether a drawn chart is as wide as its box (within 2 px).
  const fits = (gd) => {
    const svg = gd instanceof Element && gd.querySelector('.main-svg');
    return Boolean(svg) && Math.abs(svg.getBoundingClientRect().width - gd.getBoundingClientRect().width) <= 2;
  };
  // Each new figure is drawn once. Gradio's Plot draws a new figure into the chart it shows, then
  // replaces that chart by a new one (a keyed block) and draws the figure again there, then asks
  // for a resize, which redraws it 100 ms later: three draws of the timeline (50-110 ms each on 2
  // cores) at a run's end, beside its decode. Here a draw waits for the end of the current task (a
  // microtask), by which time a replaced chart has left the page and is not drawn; and a resize
  // redraws only a chart whose width differs from its box's (the ResizeObserver below refits one
  // whose box changes later).
  const drawOnce = (plotly) => {
    if (!plotly || plotly.__specdecDrawOnce) return;
    plotly.__specdecDrawOnce = true;
    const react = plotly.react, resize = plotly.Plots.resize;
    const later = (gd, draw) => new Promise((resolve, reject) => queueMicrotask(() => {
      if (gd instanceof Element && !gd.isConnected) { retire(gd); resolve(gd); return; }
      Promise.resolve(draw()).then(resolve, reject);   // (a chart named by its id is drawn as asked)
    }));
    plotly.react = (gd, ...args) => later(gd, () => react.call(plotly, gd, ...args));
    plotly.Plots.resize = (gd) => later(gd, () => (fits(gd) ? gd : resize.call(plotly.Plots, gd)));
  };
  if (window.Plotly) {
    drawOnce(window.Plotly);
  } else {   // Gradio loads Plotly with the first chart and sets window.Plotly then
    let plotly;
    Object.defineProperty(window, 'Plotly', {configurable: true, get: () => plotly,
                                             set: (value) => { plotly = value; drawOnce(value); }});
  }
  const hook = () => {
    const gd = document.querySelector('#timeline .js-plotly-plot');
    if (!gd || !gd.on || gd.__specdecHooked === gd._fullLayout) return;
    gd.__specdecHooked = gd._fullLayout;
    if (gd.removeAllListeners) gd.removeAllListeners('plotly_click');
    gd.on('plotly_click', (ev) => {
      const pt = ev && ev.points && ev.points[0];
      if (!pt || !pt.customdata) return;
      const box = document.querySelector('#timeline-click textarea, #timeline-click input');
      if (!box) return;
      box.value = `${pt.customdata[0]}:${pt.customdata[1]}:${Date.now()}`;
      box.dispatchEvent(new Event('input', {bubbles: true}));
    });
  };
  // Plotly writes a chart's clip paths and pattern fills as url('<page address>#id') when the page
  // has a <base> element (Gradio's has), with the address the page had when that chart was first
  // drawn, and keeps it for the chart's later draws. Once the address bar changes (a run's link,
  // `remember` below), those references point at another document: a first run's hatched q bars
  // and its green min(1, p/q) bar were not drawn, and bars on a log axis were not clipped to the
  // plot but ran over the tick labels (issue 38). Every chart is re-pointed at the address.
  const rebase = () => {
    const now = window.location.href.split('#')[0];
    document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
      const context = gd._context;
      if (!context || !context._baseUrl || context._baseUrl === now) return;
      const old = context._baseUrl;
      context._baseUrl = now;
      gd.querySelectorAll('[clip-path], [fill], [style]').forEach((el) => {
        for (const name of ['clip-path', 'fill', 'style']) {
          const value = el.getAttribute(name);
          if (value && value.includes(old)) el.setAttribute(name, value.split(old).join(now));
        }
      });
    });
  };
  // An error: Gradio draws its red "Error" badge in the middle of the status line, over the last
  // run's text, and says what went wrong only in a notice that fades. The line says it itself: the
  // notice's message is written beside the badge (app.css shows it there and hides the stale text).
  const tellError = () => {
    const badge = document.querySelector('#run-status .wrap .error');
    const said = Array.from(document.querySelectorAll('.toast-message-text.error')).pop();
    const text = said ? said.innerText.trim() : '';
    if (badge && text && badge.dataset.message !== text) badge.dataset.message = text;
  };
  setInterval(() => { hook(); rebase(); }, 700);
  setInterval(tellError, 250);
  // Plotly sizes a chart to its container when it draws, and on a window resize. A chart drawn while
  // hidden (another tab, a closed accordion) gets Plotly's default 700 px, and one hidden during a
  // resize keeps its old width: the speed explorer came back at 700 of 1216 px after a Decode run,
  // and the Decode charts overflowed their 704 px boxes after a narrowing. Whenever a chart's box
  // changes size (shown, or resized), it is fitted again.
  const fit = new ResizeObserver((entries) => {
    for (const entry of entries) {
      const gd = entry.target;
      if (!gd._fullLayout || !window.Plotly || gd.getBoundingClientRect().width < 10) continue;
      if (!fits(gd)) window.Plotly.Plots.resize(gd);
    }
  });
  const watched = new WeakSet();
  setInterval(() => document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
    if (!watched.has(gd)) { watched.add(gd); fit.observe(gd); }
  }), 700);
  // The run in view survives a reload: the server writes its link (settings and seed) into
  // #run-link after each run; with the round in view it goes into the address bar, which a reload
  // (or a dropped connection's reload) opens again. '-' is an imported trace: no link, so the
  // address loses an earlier run's. An empty box (nothing run yet) leaves the address alone.
  let kept = null;
  const remember = () => {
    const box = document.querySelector('#run-link textarea, #run-link input');
    if (!box || !box.value) return;
    let want = '';
    if (box.value !== '-') {
      const slider = document.querySelector('#round input[type=number]');
      const round = slider ? Math.round(Number(slider.value)) : 0;
      want = box.value + (round >= 1 ? `&round=${round}` : '');
    }
    if (want === kept) return;
    kept = want;
    history.replaceState(history.state, '', location.pathname + want + location.hash);
    rebase();
  };
  setInterval(remember, 400);
  // A link that names a round (…&round=N) opens at the step viewer once its run is shown with that
  // round open: it opened at the page's top, about 3,000 px above the round it named (issue 53).
  // Once only, and not when the visitor has scrolled meanwhile.
  const linked = Math.round(Number(new URLSearchParams(location.search).get('round')));
  if (linked >= 1) {
    const since = Date.now();
    const toRound = setInterval(() => {
      const slider = document.querySelector('#round input[type=number]');
      const status = document.querySelector('#run-status');
      const viewer = document.querySelector('#step-viewer');
      const shown = status && /^(Done|Stopped)/.test(status.innerText.trim());
      if (window.scrollY > 50 || Date.now() - since > 600000) { clearInterval(toRound); return; }
      if (shown && viewer && slider && Math.round(Number(slider.value)) === linked) {
        clearInterval(toRound);
        viewer.scrollIntoView({block: 'start'});
      }
    }, 400);
  }
  // The first run shows its answer: when a run ends (the status line turns to "Done:" or
  // "Stopped:") and its text is not wholly in view, the page scrolls once so that the status line
  // is at the top with the text under it (at 1400 x 1000 the text's end was below the fold, at
  // 800 px wide, where the sliders sit under the form, all of it). Armed again by the next run
  // (Run, Enter in the prompt, an example), so a visitor who scrolls away after is left alone.
  // Not when a link names a round: that link opens at its round in the step viewer (below).
  let armed = !(linked >= 1);
  const arm = () => { armed = true; };
  document.addEventListener('click', (ev) => { if (ev.target.closest && ev.target.closest('#run')) arm(); }, true);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && ev.target.closest && ev.target.closest('#prompt')) arm();
  }, true);
  // Judged once the text holds still: the same box at two checks in a row. Judged at the first
  // check that saw "Done:", the text could still be laid out (a clean-clone test run found it
  // 385 px tall and half below the fold, the page not scrolled: it had been judged in view while
  // it was still short).
  let lastBox = null;
  const showAnswer = () => {
    const status = document.querySelector('#run-status');
    const text = document.querySelector('#token-text');
    if (!armed || !status || !text || !/^(Done|Stopped):/.test(status.innerText.trim())) { lastBox = null; return; }
    const box = text.getBoundingClientRect();
    const now = `${Math.round(box.top)} ${Math.round(box.bottom)}`;
    if (now !== lastBox) { lastBox = now; return; }
    armed = false;
    lastBox = null;
    if (box.top >= 0 && box.bottom <= window.innerHeight) return;   // already in view: no jump
    window.scrollTo({top: window.scrollY + status.getBoundingClientRect().top - 8});
  };
  setInterval(showAnswer, 250);
  // A slider's number box takes a typed value only within its range: Gradio moves 100000 to the
  // maximum (249 tokens, what the bundled pair's context leaves after the prompt) and 0 to the
  // minimum without a word. The page says it where it happens, under the slider, until the next
  // value typed there fits. Read before Gradio clamps (capture phase, on Enter and on leaving).
  const SERVER_CAPS = ['gamma', 'max-new'];   // set by this server (SPECDEC_MAX_GAMMA, the context)
  const sayClamp = (input) => {
    const block = input.closest('[id]');
    if (!block || !block.querySelector('input[type=range]')) return;
    const typed = Number(input.value);
    const lo = Number(input.min), hi = Number(input.max);
    const name = (input.getAttribute('aria-label') || '').replace(/^number input for /, '');
    let words = '';
    if (input.value !== '' && Number.isFinite(typed) && typed > hi) {
      words = `${name} is capped at ${hi}${SERVER_CAPS.includes(block.id) ? ' on this server' : ''}` +
              ` (${input.value} was typed)`;
    } else if (input.value !== '' && Number.isFinite(typed) && typed < lo) {
      words = `${name} is at least ${lo} (${input.value} was typed)`;
    }
    if (!words) return;   // a value that fits: nothing to say (a new one typed took the note away)
    let note = block.querySelector('.specdec-clamp');
    if (!note) {
      note = document.createElement('div');
      note.className = 'specdec-clamp';
      note.setAttribute('role', 'status');
      block.appendChild(note);
    }
    note.textContent = words;
  };
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && ev.target.matches && ev.target.matches('input[type=number]')) sayClamp(ev.target);
  }, true);
  document.addEventListener('blur', (ev) => {
    if (ev.target.matches && ev.target.matches('input[type=number]')) sayClamp(ev.target);
  }, true);
  document.addEventListener('input', (ev) => {   // typing or dragging again: the note has said its piece
    const block = ev.target.closest && ev.target.closest('[id]');
    const note = block && ev.isTrusted && block.querySelector('.specdec-clamp');
    if (note) note.remove();
  }, true);
  // The round in view (1-based), marked in the text (a box around its tokens, as the server draws
  // it: charts.text_html) and on the timeline (its one shape, moved; charts.timeline_figure). A
  // step in the viewer calls this instead of the server sending the text and timeline again.
  window.specdecMarkRound = (round) => {
    const r = Math.round(Number(round)) - 1;
    document.querySelectorAll('#token-text .round[data-round]').forEach((el) => {
      const here = Number(el.dataset.round) === r;
      el.style.boxShadow = here ? '0 0 0 2px #000' : '';
      el.style.borderRadius = here ? '2px' : '';
    });
    const gd = document.querySelector('#timeline .js-plotly-plot');
    const shapes = gd && gd.layout && gd.layout.shapes;
    if (window.Plotly && shapes && shapes.length === 1 && shapes[0].x0 !== r + 0.5) {
      window.Plotly.relayout(gd, {'shapes[0].x0': r + 0.5, 'shapes[0].x1': r + 1.5});
    }
  };
  // The β strip over the text: a cell opens its round and position, by a click or, once Tab has
  // reached it, by Enter or Space; through the same hidden box as a timeline click.
  const openCell = (cell) => {
    const box = document.querySelector('#timeline-click textarea, #timeline-click input');
    if (!box) return;
    box.value = `${cell.dataset.round}:${cell.dataset.position}:${Date.now()}`;
    box.dispatchEvent(new Event('input', {bubbles: true}));
  };
  document.addEventListener('click', (ev) => {
    const cell = ev.target && ev.target.closest && ev.target.closest('#token-text .beta-cell');
    if (cell) openCell(cell);
  });
  document.addEventListener('keydown', (ev) => {
    const cell = ev.target && ev.target.closest && ev.target.closest('#token-text .beta-cell');
    if (cell && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); openCell(cell); }
  });
  // Keyboard: Enter in a number box applies it (Gradio applies a slider's typed number on blur
  // only); left / right arrow (outside text fields and sliders) step through the rounds.
  document.addEventListener('keydown', (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.defaultPrevented) return;
    const t = ev.target;
    if (ev.key === 'Enter' && t && t.tagName === 'INPUT' && t.type === 'number') {
      t.blur();
      t.focus();
      return;
    }
    if (t && (t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName))) return;
    const id = ev.key === 'ArrowLeft' ? 'prev-round' : ev.key === 'ArrowRight' ? 'next-round' : null;
    const btn = id && document.querySelector(`#${id}`);
    if (btn) { ev.preventDefault(); btn.click(); }
  });
}
