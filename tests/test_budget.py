"""What visitors' sessions hold, in bytes: the sizer, the least-recently-used choice, the message a
released visitor reads. (The budget kept on a live app: test_housekeeping.py; on a real server,
with large imported traces: test_server_budget.py.)"""

from __future__ import annotations

import dataclasses

import torch

from specdec import RunSettings, speculative_generate
from specdec.app.server import budget


def test_a_run_is_measured_by_what_it_holds(bundled):
    gen = speculative_generate(bundled, "To be, or not to be", RunSettings(gamma=4, max_new_tokens=32, seed=1))
    size, text = budget.size_of(gen), len(gen.to_json())
    # limits.py documents ~2.5x the JSON (2.8 MB of JSON became 6.9 MB): the sizer agrees
    assert 1.5 * text < size < 5 * text, (size, text)
    assert budget.size_of(gen) == size   # rounds are measured once and kept: the same answer
    noted = dataclasses.replace(gen, notes={0: "x" * 100_000})
    assert budget.size_of(noted) >= size + 100_000


def test_tensors_count_by_their_bytes_and_a_shared_object_once():
    assert budget.size_of({"t": torch.zeros(250_000)}) >= 1_000_000
    big = bytearray(100_000)
    assert 100_000 < budget.size_of([big, big, (big,)]) < 101_000
    assert budget.size_of([0.5] * 1000) >= 1000 * 8 and budget.size_of(list(range(1000, 2000))) >= 1000 * 36


def test_the_least_recently_used_go_first_until_the_rest_fit():
    sizes = {"a": 40, "b": 30, "c": 20, "d": 10}
    last_used = {"a": 4.0, "b": 1.0, "c": 2.0, "d": 3.0}
    assert budget.over_budget(sizes, last_used, limit=50) == ["b", "c"]
    assert budget.over_budget(sizes, last_used, limit=100) == []
    # the request being served (and sessions with a request running) go last, only if needed
    assert budget.over_budget(sizes, last_used, limit=50, spare={"b"}) == ["c", "d", "a"]
    assert budget.over_budget(sizes, last_used, limit=5, spare={"b"}) == ["c", "d", "a", "b"]
    # a session holding nothing is never released for the budget
    assert budget.over_budget({"a": 0, "b": 30}, {"a": 0.0, "b": 1.0}, limit=10) == ["b"]


def test_a_released_visitor_is_told_once():
    budget.tell("visitor-1", "your run was let go")
    assert budget.take_message("visitor-1") == "your run was let go"
    assert budget.take_message("visitor-1") is None
    assert budget.take_message(None) is None
    assert "SPECDEC_SESSION_BYTES" in budget.released_message()


def test_only_a_visitor_whose_session_held_something_of_theirs_is_told():
    class Session:
        state_data = {1: None, 2: (None, None), 3: []}   # a fresh page: no run, no selection

    assert not budget.holds_a_run(Session())
    Session.state_data = {1: "x" * 10_000}
    assert budget.holds_a_run(Session())
    assert not budget.holds_a_run(None)
