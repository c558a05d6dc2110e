"""A new visitor's session is copied from a template, not built from every component's config.

Gradio makes a `SessionState` for each new visitor (their first request) and in it builds the
config of every component of the app (`config_values`, kept for its "deep links": each component's
constructor signature read by `inspect`, plots encoded). This app has 128 blocks, so that costs
milliseconds of CPU per new visitor on the server's event loop, where every other visitor's request
waits: a class opening one link pays it thirty times before a single run is served.

Those configs are the same for every new session: they are built from the app's default blocks,
which nothing changes once the app serves (no `gr.render` here). So the first session of an app is
Gradio's own, and the configs it built become the template; each later session gets Gradio's
attributes with its own copy of them. Gradio changes a session's configs only by replacing an
entry, or its "props" dict's "value" (`SessionState._update_config`, `_update_value_in_config`), so
each session gets its own entry dicts and "props" dicts, and shares what is below them, which
Gradio only reads (its deep-link route deep-copies before it writes).

Only apps that opt in (`quick_sessions(demo)`) are affected; any other `gr.Blocks` in the process
gets Gradio's sessions. If a Gradio upgrade gives a session an attribute this module does not know,
the template is never used (`KNOWN`), and `tests/test_sessions.py` says so.
"""

from __future__ import annotations

import copy

import gradio.state_holder as state_holder

# A session's attributes as Gradio 6 sets them; a copy is made only when the template has exactly these.
KNOWN = frozenset({"blocks_config", "config_values", "state_data", "_state_ttl", "is_closed",
                   "STATE_TTL_WHEN_CLOSED"})

_gradio_init = state_holder.SessionState.__init__


def quick_sessions(demo) -> None:
    """New sessions of `demo` are copied from a template (made by Gradio, from its first session)."""
    demo.specdec_session_template = None
    state_holder.SessionState.__init__ = _session_init


def _session_init(self, blocks) -> None:
    if not hasattr(blocks, "specdec_session_template"):   # an app that did not opt in
        _gradio_init(self, blocks)
        return
    template = blocks.specdec_session_template
    if template is None:
        _gradio_init(self, blocks)
        blocks.specdec_session_template = _template_of(self) if set(vars(self)) == KNOWN else False
        return
    if template is False:   # a Gradio whose sessions this module does not know
        _gradio_init(self, blocks)
        return
    vars(self).update(template, blocks_config=copy.copy(blocks.default_config),
                      config_values=_own_configs(template["config_values"]), state_data={}, _state_ttl={})


def _template_of(session) -> dict:
    """A fresh session's attributes, with configs of its own (the session itself goes on to change them)."""
    return dict(vars(session), config_values=_own_configs(session.config_values))


def _own_configs(configs: dict) -> dict:
    """Each component's config dict and its "props" dict copied: what Gradio changes in a session."""
    out = {}
    for key, config in configs.items():
        config = dict(config)
        if isinstance(config.get("props"), dict):
            config["props"] = dict(config["props"])
        out[key] = config
    return out
