// Runs before Gradio's own scripts: specdec/app/page/early.py puts it first in the page's <head>.
//
// Gradio 6.31's status tracker times a pending event with a requestAnimationFrame loop, which it
// stops when the event's status changes, not when the tracker goes away. Its loading screen's
// tracker goes away while pending, on every page load, so that loop ran for as long as the page was
// open: a frame 60 times a second with nothing to draw, ~10 % of a core in chromium here. A tracker
// whose progress is hidden (`show_progress="hidden"`, `.hide`) times its pending event the same way
// with nothing to show: the app's page had one pending from its load on (the max-new-tokens
// slider's), keeping chromium busy while the page sat idle. A status
// tracker's frame callback runs here only while some shown status tracker is pending (a pending one
// shows its `.progress-text`): an orphaned or hidden loop ends at its first frame, and a live
// tracker's timer counts as before. A hidden tracker stays hidden for its whole event (Gradio hides
// it by the event's show_progress, and once it streams or completes), so no timer that shows stops.
// The status tracker is known by its script's name in the caller's stack; with a build of Gradio
// that names it otherwise, nothing matches and every frame runs as it would without this.
(() => {
  const requestFrame = window.requestAnimationFrame.bind(window);
  const pending = () => document.querySelector('[data-testid="status-tracker"]:not(.hide) .progress-text') !== null;
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || "").includes("statustracker")) return requestFrame(callback);
    return requestFrame((time) => { if (pending()) callback(time); });
  };
})();
