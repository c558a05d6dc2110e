// Runs before Gradio's own scripts: specdec/app/page/early.py puts it first in the page's <head>.
//
// Gradio 6.31's status tracker times a pending event with a requestAnimationFrame loop, which it
// stops when the event's status changes, not when the tracker goes away. Its loading screen's
// tracker goes away while pending, on every page load, so that loop ran for as long as the page was
// open: a frame 60 times a second with nothing to draw, ~10 % of a core in chromium here. A status
// tracker's frame callback runs here only while some status tracker on the page is pending (a
// pending one always shows its `.progress-text`): the orphaned loop ends at its first frame once the
// page has loaded, and a live tracker's timer counts as before. The status tracker is known by its
// script's name in the caller's stack; with a build of Gradio that names it otherwise, nothing
// matches and every frame runs as it would without this.
(() => {
  const requestFrame = window.requestAnimationFrame.bind(window);
  const pending = () => document.querySelector('[data-testid="status-tracker"] .progress-text') !== null;
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || "").includes("statustracker")) return requestFrame(callback);
    return requestFrame((time) => { if (pending()) callback(time); });
  };
})();
