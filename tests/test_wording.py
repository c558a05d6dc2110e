"""Sentences a careful reader flagged as odd, each checked where it is built."""

from __future__ import annotations

from types import SimpleNamespace

from specdec.app.page import speed_tab
from specdec.app.shows import charts, step_charts, views
from specdec.core.settings import RunSettings
from specdec.explain import lab
from specdec.trace.outcomes import Status
from specdec.trace.spine import Dist, Generation, Position, Stats


def _gen() -> Generation:
    return Generation(prompt="x", prompt_ids=[0], token_ids=[], text="", rounds=[], stats=Stats(),
                      settings=RunSettings(), models={}, token_text={0: "a", 1: "\n"})


def _position(p_draft: float, q_draft: float) -> Position:
    d = Dist([1], [p_draft], 1 - p_draft)
    return Position(draft_token=1, p_draft=p_draft, q_draft=q_draft, ratio=p_draft / q_draft, u=0.5,
                    status=Status.REJECTED, beta=0.5, p=d, q=Dist([1], [q_draft], 1 - q_draft))


def test_a_rejected_draft_with_p_zero_is_not_asked_about_with_though():
    assert "though" not in views.why_no_residual(_gen(), _position(0.0, 0.4))
    assert "though p(↵) = 0.1" in views.why_no_residual(_gen(), _position(0.1, 0.4))


def test_a_sum_near_one_is_printed_with_the_digits_that_tell_it_from_one():
    notes = lab.validate(["a", "b"], [0.5, 0.5000021], [1, 0])[3]
    assert notes == ["p summed to 1.0000021, not 1; normalised to 1"]


def test_column_names_say_what_the_columns_hold():
    assert "draft s" not in charts.TIMELINE_HEADERS and "drafts" in charts.TIMELINE_HEADERS
    assert "sampled from" not in step_charts.END_HEADERS   # the column holds probabilities


def test_a_source_ending_in_a_full_stop_gets_no_second_one():
    chosen = SimpleNamespace(name="x", when="today", where="here", engine="eager", dtype="", source="notes.")
    assert not speed_tab.note_markdown(None, chosen, None).endswith("..")


def test_a_hub_pair_out_of_reach_is_said_when_picked_and_at_run_in_the_pages_words(monkeypatch):
    """Offline, a hub pair picked on the page says at once that it cannot load (it said nothing
    until Run), and Run says the same, with no "preset" or "local folder": the page has neither.
    The CLI and the library keep their own words for it."""
    import pytest

    from specdec.app.page import handlers
    from specdec.app.shows.messages import user_message
    from specdec.models import pair as models
    from specdec.models.errors import HubUnreachable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = models.PRESETS["smollm2"]
    if models._in_hub_cache(hub.target, hub.draft):
        pytest.skip("this machine's hub cache holds the smollm2 pair: it loads offline")
    said = handlers.pick_pair("smollm2", "model", "To be, or not to be")[2]
    assert said == f"Not done: {hub.label} needs the Hugging Face Hub, which this server cannot reach. Pick the " \
                   "bundled pair under Model pair: it is always here.", said
    with pytest.raises(HubUnreachable) as raised:
        models.load_pair(preset="smollm2", device="cpu")
    said_offline = str(raised.value)   # the CLI's words: all three that load offline
    assert "preset 'bundled'" in said_offline and "local folder" in said_offline, said_offline
    assert "preset 'smollm2-135m'" in said_offline and ("which is here" in said_offline
                                                        or "fetch smollm2-135m" in said_offline), said_offline
    assert f"Not done: {user_message(raised.value)}" == said
    assert not isinstance(handlers.pick_pair("bundled", "model", "To be")[2], str)   # control: nothing said
