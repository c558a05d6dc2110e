"""One decode per distinct run (specdec/app/server/flights.py): the cache of finished runs, the line of
decodes, riders joining a flight; and a class of 30 against a real server on 127.0.0.1 (in this
process, so the test can count the decodes it did)."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from specdec import RunSettings
from specdec.app.server import flights, runs
from specdec.app.server.api import MAIN_OUTPUTS, RunRequest, api_outputs
from specdec.bench.app_client import app_client
from specdec.decoding.loop import StopSignal
from specdec.models.pair import BUNDLED

PROMPT = "To be, or not to be"


# ---------------------------------------------------------------- the cache

class Sized:
    """A value `budget.size_of` measures at about `n` bytes (a bytes object of that length)."""

    def __init__(self, n: int):
        self.blob = b"x" * n


def test_the_cache_keeps_what_fits_and_lets_the_least_recently_used_go_first():
    runs_ = {k: Sized(1000) for k in "abcd"}
    size = {k: flights.budget.size_of(v) for k, v in runs_.items()}
    cache = flights.RunCache(max_bytes=size["a"] + size["b"] + size["c"])
    for k in "abc":
        cache.put(k, runs_[k])
    assert len(cache) == 3 and cache.bytes == cache.max_bytes
    assert cache.get("a") is runs_["a"]        # "a" is now the most recently used
    cache.put("d", runs_["d"])                 # over the budget: "b" (least recently used) goes
    assert cache.get("b") is None and all(cache.get(k) is runs_[k] for k in "acd")
    assert cache.bytes == size["a"] + size["c"] + size["d"] <= cache.max_bytes
    cache.put("huge", Sized(10_000))           # larger than the whole cache: not kept, nothing dropped
    assert cache.get("huge") is None and len(cache) == 3


def test_a_run_is_keyed_by_its_prompt_settings_seed_and_pair():
    s = RunSettings(gamma=4, max_new_tokens=8, seed=1)
    key = flights.key_of(PROMPT, BUNDLED, s)
    assert key == flights.key_of(PROMPT, BUNDLED, RunSettings(gamma=4, max_new_tokens=8, seed=1))
    assert key != flights.key_of(PROMPT, BUNDLED, s.with_(seed=2))
    assert key != flights.key_of(PROMPT + ".", BUNDLED, s)
    assert len(key[2]) == 64 and len(key[3]) == 64   # the bundled pair's manifest, by its sha256


def test_the_real_models_runs_are_keyed_by_its_converted_folders_manifest(tmp_path, monkeypatch):
    """The real model (no draft model) is keyed by the manifest of its folder in the user's cache."""
    import hashlib

    from specdec.models import realmodel

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    folder = realmodel.folder_of(realmodel.SMOLLM2_135M)
    folder.mkdir(parents=True)
    (folder.parent / "manifest.json").write_text('{"files": {}}')
    key = flights.key_of(PROMPT, "smollm2-135m", RunSettings(drafter="ngram"))
    assert key[2] == hashlib.sha256(b'{"files": {}}').hexdigest() and key[3] == ""


# ---------------------------------------------------------------- the line of decodes

def test_the_line_admits_its_slots_first_come_first_served_and_tells_the_place():
    line = flights.Line(slots=2)
    order, told, gate = [], {}, threading.Event()

    def run(name):
        with line.slot(on_wait=lambda ahead, secs: told.setdefault(name, []).append((ahead, secs))):
            order.append(name)
            gate.wait(10)

    holders = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in holders:
        t.start()
    while len(order) < 2:
        time.sleep(0.01)
    waiters = []
    for name in ("c", "d"):
        t = threading.Thread(target=run, args=(name,))
        t.start()
        waiters.append(t)
        while name not in told:
            time.sleep(0.01)
    assert told["c"][0] == (2, None) and told["d"][0] == (3, None)   # 2 decoding; no decode timed yet
    gate.set()
    for t in holders + waiters:
        t.join(10)
    assert order[2:] == ["c", "d"]
    assert line.estimate(3) is not None and line.estimate(3) >= 0


def test_stopping_while_in_the_line_leaves_it_without_a_decode():
    line, stop = flights.Line(slots=1), StopSignal()
    with line.slot():
        got = []

        def wait():
            try:
                with line.slot(stop):
                    got.append("decoded")
            except ValueError as err:
                got.append(str(err))

        t = threading.Thread(target=wait)
        t.start()
        stop.set()
        t.join(5)
    assert got and got[0].startswith("Stopped while waiting")


# ---------------------------------------------------------------- riders

@pytest.mark.slow
def test_riders_of_one_flight_get_the_same_run_and_a_rider_who_stops_leaves_the_others_going(monkeypatch):
    flights.CACHE.clear()
    monkeypatch.setattr(flights, "LINE", flights.Line(slots=1))
    settings = RunSettings(gamma=2, max_new_tokens=24, seed=21)
    before = dict(flights.stats)
    stop_c = StopSignal()
    with flights.LINE.slot():   # another decode holds the only slot: the flight waits, and riders join it
        first, second, third = (runs.decode_stream(PROMPT, BUNDLED, settings, s)
                                for s in (StopSignal(), StopSignal(), stop_c))
        waiting = [next(first), next(second), next(third)]
        assert all(isinstance(m, runs.Waiting) and m.ahead == 1 for m in waiting), waiting
        assert flights.stats["decodes"] - before["decodes"] == 1 and flights.stats["joined"] - before["joined"] == 2
        stop_c.set()   # one rider stops: it leaves with a message; the flight goes on for the two others
        left = list(third)
    assert isinstance(left[-1], runs.RunFailed) and "Stopped while waiting" in str(left[-1].error)
    end_a, end_b = list(first)[-1], list(second)[-1]
    assert isinstance(end_a, runs.RunDone) and end_a.generation.stats.new_tokens == 24
    assert end_a.generation is end_b.generation   # one decode, the same run for both
    # the finished run is kept: the next request gets it from the cache, at once
    again = list(runs.decode_stream(PROMPT, BUNDLED, settings, StopSignal()))
    assert len(again) == 1 and again[0].cached and again[0].generation is end_a.generation
    # ... and a stopped one is not: the last rider's Stop ends the decode, and the next request decodes
    flights.CACHE.clear()
    stop = StopSignal()
    with flights.LINE.slot():
        alone = runs.decode_stream(PROMPT, BUNDLED, settings, stop)
        assert isinstance(next(alone), runs.Waiting)
        stop.set()
        assert isinstance(list(alone)[-1], runs.RunFailed)
    assert flights.CACHE.get(flights.key_of(PROMPT, BUNDLED, settings)) is None


def test_a_crowd_gets_its_updates_less_often_in_proportion():
    """Up to CROWD riders, EVERY; past them the interval grows with the crowd, so the server sends
    about CROWD / EVERY updates a second however many follow; `crowd` counts every flight's riders."""
    assert flights.pace(0.3, 1) == flights.pace(0.3, flights.CROWD) == 0.3
    assert flights.pace(0.3, 30) == pytest.approx(0.3 * 30 / flights.CROWD)
    assert 30 / flights.pace(0.3, 30) == pytest.approx(flights.CROWD / 0.3)   # the server's rate stays put
    before = flights.crowd()
    a, b = flights.Flight(("a",), StopSignal()), flights.Flight(("b",), StopSignal())
    with flights._FLIGHTS_LOCK:
        flights._FLIGHTS.update({a.key: a, b.key: b})
    try:
        for f, n in ((a, 3), (b, 2)):
            for _ in range(n):
                f.board()
        assert flights.crowd() - before == 5
        a.leave()
        assert flights.crowd() - before == 4
    finally:
        with flights._FLIGHTS_LOCK:
            del flights._FLIGHTS[a.key], flights._FLIGHTS[b.key]


# ---------------------------------------------------------------- a class against a real server

@pytest.fixture(scope="module")
def server():
    """The app, configured as `app.py` serves it, on a free loopback port in this process."""
    from conftest import free_port
    from specdec.app.page.layout import build_app
    from specdec.app.server.serving import configure, launch_options

    demo = configure(build_app(), housekeeping_thread=False)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, ssr_mode=False,
                quiet=True, **launch_options())
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def _class(url: str, requests: list[RunRequest]) -> list[str]:
    """Each request from a client of its own, all at once: the status lines they get."""
    clients = [app_client(url) for _ in requests]
    names = api_outputs(MAIN_OUTPUTS)

    def send(i: int) -> str:
        out = clients[i].predict(*requests[i].values(), api_name="/generate")
        return str(dict(zip(names, out, strict=True))["status"])

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, range(len(requests))))


@pytest.mark.slow
def test_thirty_identical_requests_cost_one_decode_and_thirty_distinct_are_all_served(server):
    flights.CACHE.clear()
    same = RunRequest(max_new_tokens=6, seed=4242)
    before = flights.stats["decodes"]
    statuses = _class(server, [same] * 30)
    assert flights.stats["decodes"] - before == 1, flights.stats   # the class shared one decode
    assert all(s.startswith("Done: 6 tokens") for s in statuses), statuses
    # the same run for everyone, whether they rode the flight (decoded now) or came after it (the cache)
    assert len({re.split(" From the cache| Decoded now", s)[0] for s in statuses}) == 1
    # negative control: thirty different seeds are thirty decodes, every one served, none refused
    before = flights.stats["decodes"]
    statuses = _class(server, [RunRequest(max_new_tokens=6, seed=5000 + k) for k in range(30)])
    assert flights.stats["decodes"] - before == 30, flights.stats
    assert all(s.startswith("Done: 6 tokens") for s in statuses), statuses


@pytest.mark.slow
def test_generate_takes_its_parameters_by_the_controls_names(server):
    client = app_client(server)
    params = [p["parameter_name"] for p in
              client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/generate"]["parameters"]]
    assert params == RunRequest.names()
    out = client.predict(prompt="HAMLET:", max_new_tokens=5, seed=9, api_name="/generate")
    assert str(out[0]).startswith("Done: 5 tokens")


@pytest.mark.slow
def test_the_benchmarks_lean_visitor_is_served_as_a_page_is(server):
    """`specdec bench-app --browser` measures a class with lean clients of Gradio's queue protocol
    (`app_browser.visit`): one is served a decoded run, and told of a bad request."""
    from specdec.bench.app_browser import Endpoint, visit

    endpoint = Endpoint(server)
    before = flights.stats["decodes"]
    assert visit(endpoint, RunRequest(max_new_tokens=5, seed=6001).values()) > 0
    assert flights.stats["decodes"] - before == 1
    with pytest.raises(RuntimeError, match="prompt is empty"):
        visit(endpoint, RunRequest(prompt=" ", max_new_tokens=5).values())


# ---------------------------------------------------------------- decoded now, or from the cache

def test_a_run_says_decoded_now_or_from_the_cache_and_decodes_afresh_on_request():
    """The status line says where the run came from, as plainly either way: "Decoded now" the first
    time, "From the cache" the second; with "decode afresh" ticked the models run again, beside the
    cached run, and give the same tokens (the same settings and seed), with this decode's own time."""
    from specdec.app.page import handlers

    flights.CACHE.clear()
    request = RunRequest(prompt=PROMPT, max_new_tokens=8, seed=77)

    def finished(req: RunRequest) -> dict:
        return list(handlers.run_generation(*req.values()))[-1]

    first = finished(request)
    assert "Decoded now: the models ran for this request" in first["status"] and "cache" not in first["status"]
    again = finished(request)
    assert "From the cache" in again["status"] and "Decoded now" not in again["status"]
    assert again["run_state"] is first["run_state"]
    before = flights.stats["decodes"]
    fresh = finished(request.with_(fresh=True))
    assert flights.stats["decodes"] - before == 1   # the models ran again
    gen, cached = fresh["run_state"], first["run_state"]
    assert gen is not cached and gen.token_ids == cached.token_ids and len(gen.token_ids) == 8
    status = fresh["status"]
    assert "Decoded now, afresh" in status and "the same 8 tokens, token for token" in status, status
    assert f"decoded earlier in {cached.stats.wall_seconds:.2f} s; this decode took {gen.stats.wall_seconds:.2f} s" \
        in status, status
    # negative control: tokens that differ are said to differ, from the first that does
    from dataclasses import replace

    from specdec.app.shows import views
    other = replace(cached, token_ids=cached.token_ids[:3] + [cached.token_ids[3] + 1] + cached.token_ids[4:])
    said = views.afresh_line(gen, other)
    assert "NOT the same tokens: they differ from token 4 on" in said and "token for token" not in said
