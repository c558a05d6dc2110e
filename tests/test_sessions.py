"""A new visitor's session copied from the template (specdec/app/server/sessions.py) is the session Gradio
would have built: the same attributes, the same component configs, and changes of its own."""

from __future__ import annotations

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from specdec.app.page.layout import build_app
from specdec.app.server import sessions
from specdec.app.server.serving import configure


@pytest.fixture(scope="module")
def demo():
    return configure(build_app(), housekeeping_thread=False)


def gradios_own(blocks) -> SessionState:
    session = SessionState.__new__(SessionState)
    sessions._gradio_init(session, blocks)
    return session


def test_a_copied_session_is_the_session_gradio_builds(demo):
    demo.specdec_session_template = None
    SessionState(demo)   # the first: Gradio's own, and the template
    copied, own = SessionState(demo), gradios_own(demo)
    assert isinstance(demo.specdec_session_template, dict)    # made from the first session
    assert set(vars(copied)) == set(vars(own)) == sessions.KNOWN
    assert copied.config_values == own.config_values and len(own.config_values) > 100
    assert copied.blocks_config.blocks == own.blocks_config.blocks
    assert copied.blocks_config is not demo.default_config and copied.blocks_config.fns == own.blocks_config.fns
    assert copied.state_data == {} and copied._state_ttl == {} and copied.is_closed is False
    assert copied.STATE_TTL_WHEN_CLOSED == own.STATE_TTL_WHEN_CLOSED


def test_what_gradio_changes_in_one_session_stays_in_it(demo):
    demo.specdec_session_template = None
    first, second = SessionState(demo), SessionState(demo)
    key = next(k for k, c in second.config_values.items() if "value" in c.get("props", {}))
    before = dict(first.config_values[key]["props"])
    second._update_value_in_config(key, "changed in the second session")   # as Gradio does after an event
    second.state_data[0] = "a value"
    assert second.config_values[key]["props"]["value"] == "changed in the second session"
    assert first.config_values[key]["props"] == before and first.state_data == {}
    third = SessionState(demo)
    assert third.config_values[key]["props"] == before and third.state_data == {}


def test_an_app_that_did_not_opt_in_gets_gradios_sessions(demo):
    with gr.Blocks() as plain:
        gr.Textbox("hello")
    session = SessionState(plain)
    assert not hasattr(plain, "specdec_session_template")
    assert session.config_values == gradios_own(plain).config_values


def test_a_session_with_attributes_this_module_does_not_know_is_never_copied(demo, monkeypatch):
    """The negative control: a Gradio whose sessions hold something more (here: a known set made smaller)."""
    monkeypatch.setattr(sessions, "KNOWN", sessions.KNOWN - {"is_closed"})
    demo.specdec_session_template = None
    SessionState(demo)
    assert demo.specdec_session_template is False
    assert SessionState(demo).config_values == gradios_own(demo).config_values   # Gradio's own build
    demo.specdec_session_template = None
