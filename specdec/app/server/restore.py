"""A visitor's run survives a reload or a dropped connection: the address bar carries its link.

A run is exact for its settings and seed, so its link (`api.link_query`) is the run. After every
run (the Run button, Enter, a link opened) the server writes the link of the run in view into a
hidden box, `run_link`; the page's script (static/app.js) adds the round in view and puts both
into the address bar with `history.replaceState` (no new history entry). Reloading the page, or
opening it again after the connection dropped, opens that link: `handlers.open_link` runs it again
and opens the round, so the visitor finds the same text at the same round. The browser's own
address is the storage: nothing is kept on the server, and a copied address shares the run.

An imported trace has no link (it may come from models this server does not have, or carry a
teacher's notes): after an import the box says NO_LINK, the script takes any earlier run's link
out of the address bar (a reload then opens a fresh page, not an older run), and the import's
status line says that a reload will not bring the trace back.
"""

from __future__ import annotations

from ...models.pair import PRESETS, display_name
from ...trace.spine import Generation
from .api import RunRequest, link_query

__all__ = ["NO_LINK", "request_of", "run_link", "keep_links"]

NO_LINK = "-"   # the run in view cannot be reproduced from a link (an imported trace)
QUIET = dict(api_name=False, queue=False, show_progress="hidden")


def _preset_of(gen: Generation, fallback: str) -> str:
    models = gen.models or {}
    for key, preset in PRESETS.items():
        if (display_name(preset.target), display_name(preset.draft)) == (models.get("target"), models.get("draft")):
            return key
    return fallback


def request_of(gen: Generation, preset: str) -> RunRequest:
    """The request that reproduces a run: its prompt, pair, settings and seed."""
    s = gen.settings
    return RunRequest(prompt=gen.prompt, preset=_preset_of(gen, preset), drafter=s.drafter, gamma=s.gamma,
                      max_new_tokens=s.max_new_tokens, temperature=s.sampling.temperature, top_k=s.sampling.top_k,
                      top_p=s.sampling.top_p, seed=s.seed, skip_adjustment=s.skip_adjustment)


def run_link(gen: Generation | None, preset: str | None = None) -> str:
    """The query string of the run in view, without its round ("" when there is none)."""
    if not isinstance(gen, Generation) or not gen.settings.speculative:
        return ""
    return link_query(request_of(gen, preset or ""))


def keep_links(v, runs=(), imports=()) -> None:
    """After each event in `runs` the run's link goes into `v.run_link`; after each in `imports`,
    NO_LINK (see the module docstring). `v` has run_state, preset and run_link."""
    for event in runs:
        event.then(run_link, [v.run_state, v.preset], [v.run_link], **QUIET)
    for event in imports:
        event.then(lambda: NO_LINK, None, [v.run_link], **QUIET)
