"""The app's API through gradio_client, by api_name: generate, import_trace, show_step, bad inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import bounds
from specdec import load_trace, speculative_generate
from specdec.app.server.api import EXAMPLES, MAIN_OUTPUTS, RunRequest, api_outputs
from specdec.bench.app_client import app_client
from specdec.models.pair import BUNDLED, PRESETS, context_of

gradio_client = pytest.importorskip("gradio_client")
from gradio_client.exceptions import AppError  # noqa: E402

GOOD = RunRequest(max_new_tokens=12, seed=3)   # /generate takes a RunRequest's values, in order


@pytest.fixture(scope="module")
def client(app_url):
    return app_client(app_url)


def named(result) -> dict:
    """The API returns the outputs in `MAIN_OUTPUTS` order (states left out): read them by name."""
    return dict(zip(api_outputs(MAIN_OUTPUTS), result, strict=True))


def generate(client, **changes):
    return named(client.predict(*GOOD.with_(**changes).values(), api_name="/generate"))


def _path(value) -> str:
    return value if isinstance(value, str) else value["path"] if isinstance(value, dict) else value.path


def export(client) -> str:
    """Export the session's current run (a run writes no file until asked): the trace's path."""
    return _path(client.predict(api_name="/export_trace"))


@pytest.fixture(scope="module")
def run_result(client):
    result = generate(client)
    result["export_file"] = export(client)
    return result


def test_endpoints_are_named(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/generate", "/import_trace", "/show_step"} <= names


def test_generate_returns_a_complete_trace(run_result):
    status, text = run_result["status"], run_result["text"]
    assert status.startswith("Done: 12 tokens")
    assert 'class="tok tok-' in text
    trace = load_trace(Path(_path(run_result["export_file"])).read_text(encoding="utf-8"))
    assert trace.stats.new_tokens == 12
    assert trace.settings.gamma == 4 and trace.settings.seed == 3
    assert trace.prompt == GOOD.prompt
    # the step viewer's tables (the text view of every chart) come with it
    pq_table, acc_table, end_table = run_result["pq_table"], run_result["acc_table"], run_result["end_table"]
    assert pq_table["headers"][:4] == ["token", "id", "p (target)", "q (draft)"]
    assert [row[0] for row in pq_table["data"][-2:]] == ["rest where p ≥ q", "rest where p < q"]   # the tail
    # rows shown to 6 decimals; the stored row adds up to 1 to float32 rounding over the bundled
    # pair's vocabulary of 2,048
    tol = bounds.display(6, len(pq_table["data"])) + bounds.rounding(2048)
    assert abs(sum(row[2] for row in pq_table["data"]) - 1) < tol
    assert [row[0] for row in acc_table["data"]][:3] == ["drafted token", "p(x)", "q(x)"]
    assert any(row[-1] == "◀ drawn" for row in end_table["data"]) or end_table["data"]
    timeline_table = run_result["timeline_table"]
    assert [row[0] for row in timeline_table["data"]] == list(range(1, len(trace.rounds) + 1))


def test_same_seed_same_run(client, run_result):
    again = generate(client)
    assert again["export_file"] is None   # nothing written until an export is asked for
    a = load_trace(Path(_path(run_result["export_file"])).read_text(encoding="utf-8"))
    b = load_trace(Path(export(client)).read_text(encoding="utf-8"))
    assert a.token_ids == b.token_ids
    assert [r.ending for r in a.rounds] == [r.ending for r in b.rounds]


def test_import_trace_replays_the_run(client, run_result):
    exported = _path(run_result["export_file"])
    out = named(client.predict(gradio_client.handle_file(exported), api_name="/import_trace"))
    assert out["status"].startswith("Imported a trace: 12 tokens")
    assert out["text"] == run_result["text"]   # the same marked-up text
    assert json.loads(out["timeline"]["plot"]) == json.loads(run_result["timeline"]["plot"])   # the same timeline


# One generated token in the page's text: (its fate, its round, its tooltip, what it shows).
TOKEN = re.compile(r'<span class="tok tok-\w+" data-kind="(\w+)" data-round="(\d+)" title="([^"]*)"[^>]*>(.*?)<sup')


def tokens(text_html: str) -> list[tuple]:
    return TOKEN.findall(text_html)


def test_generate_streams_the_run_so_far_and_ends_with_every_round(client, bundled):
    """The stream is coalesced by time (a few updates a second, `flights.EVERY`: rounds faster than
    that are merged), so it promises order, not one update per round: each update is the run so far,
    a prefix of the next, and the last one is the whole run, every round of the library's own run of
    the same settings and seed, none lost."""
    request = GOOD.with_(max_new_tokens=24, seed=2424)   # a seed no other test uses: decoded, not from the cache
    job = client.submit(*request.values(), api_name="/generate")
    job.result()
    outputs = [named(o) for o in job.outputs()]
    prompt, _preset, settings = request.checked()
    gen = speculative_generate(bundled, prompt, settings)
    n_rounds = len(gen.rounds)
    assert n_rounds >= 2 and gen.stats.new_tokens == 24
    assert outputs[-1]["status"].startswith(f"Done: 24 tokens in {n_rounds} rounds"), outputs[-1]["status"]
    streamed = [o for o in outputs[:-1] if isinstance(o["status"], str) and o["status"].startswith("Round ")]
    assert 1 <= len(streamed) <= n_rounds   # the first round goes at once; later ones may be merged
    numbers = [int(o["status"].split()[1]) for o in streamed]
    assert numbers == sorted(set(numbers)) and numbers[-1] <= n_rounds   # in order, never back
    # Each update's text is the run so far (its "Round k" has k rounds of tokens), a prefix of the next.
    texts = [tokens(o["text"]) for o in streamed] + [tokens(outputs[-1]["text"])]
    assert [len({r for _, r, _, _ in t}) for t in texts[:-1]] == numbers
    assert all(t and t == after[:len(t)] for t, after in zip(texts, texts[1:]))
    # The last update is the whole run: every round, every token, as the library decodes it.
    final = texts[-1]
    assert sorted({int(r) for _, r, _, _ in final}) == list(range(n_rounds))
    emitted = [k for k, _, _, _ in final if k != "rejected"]   # a rejected draft is shown, not emitted
    assert len(emitted) == gen.stats.new_tokens
    ends = [t for t in json.loads(outputs[-1]["timeline"]["plot"])["data"]
            if t["meta"] in ("residual", "biased_p", "bonus", "greedy", "plain")]
    assert sorted(x for t in ends for x in t["x"]) == list(range(1, n_rounds + 1))   # one end token per round
    trace = load_trace(Path(export(client)).read_text(encoding="utf-8"))
    assert trace.token_ids == gen.token_ids
    assert [r.ending for r in trace.rounds] == [r.ending for r in gen.rounds]


def test_compare_with_autoregressive(client):
    out = generate(client, max_new_tokens=6, compare_ar=True)
    assert "Autoregressive" in out["status"] and "speedup" in out["status"]
    assert "measured speedup" in out["metrics"]


CONTEXT = context_of(BUNDLED)


# Out-of-range slider values are refused by Gradio itself ("greater than maximum"), the rest by the app.
@pytest.mark.parametrize("changes, messages", [
    (dict(prompt="   "), ["prompt is empty"]),
    (dict(gamma=99), ["must be a whole number from 1 to 16", "greater than maximum value 16"]),
    (dict(gamma=2.5), ["must be a whole number"]),
    (dict(temperature=-1), ["temperature", "less than minimum"]),
    (dict(top_p=0), ["top-p", "less than minimum"]),
    (dict(max_new_tokens=100_000), ["max new tokens", "greater than maximum"]),
    (dict(prompt="To be " * CONTEXT), ["context", "characters long"]),
    (dict(preset="gpt2"), ["needs the Hugging Face Hub, which this server cannot reach"]),
])
def test_bad_input_gives_an_error_and_the_server_stays_up(client, changes, messages):
    with pytest.raises(AppError) as err:
        generate(client, **changes)
    assert any(m in str(err.value) for m in messages), str(err.value)


def test_bad_import_gives_an_error(client, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AppError) as err:
        client.predict(gradio_client.handle_file(str(bad)), api_name="/import_trace")
    assert "Not a valid specdec trace" in str(err.value)
    # still serving
    assert generate(client, max_new_tokens=3)["status"].startswith("Done: 3 tokens")


def test_spaces_gpu_wraps_the_decoder(monkeypatch):
    """On a Hugging Face Space (`import spaces` works) the decoding call borrows the GPU."""
    import importlib
    import sys
    import types

    import specdec.app.server.runs as runs

    wrapped = []
    fake = types.ModuleType("spaces")
    fake.GPU = lambda fn: (wrapped.append(fn.__name__), fn)[1]
    monkeypatch.setitem(sys.modules, "spaces", fake)
    try:
        importlib.reload(runs)
        assert sorted(wrapped) == ["decode_stream", "rerun", "timed_comparison"]   # every decoding the app does
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        importlib.reload(runs)
    assert runs.gpu(len) is len   # elsewhere a no-op


@pytest.mark.parametrize("example", [
    pytest.param(e, marks=[pytest.mark.slow] if PRESETS[e.preset].source is not None else [])   # the real model
    for e in EXAMPLES], ids=range(len(EXAMPLES)))
def test_every_example_runs(example, request, monkeypatch):
    """The example prompts run as listed (in-process: the Run handler generator itself); the real
    model's examples (slow) from the session's cache of it (`real_cache`)."""
    from specdec.app.page import handlers

    if PRESETS[example.preset].source is not None:
        monkeypatch.setenv("SPECDEC_CACHE", str(request.getfixturevalue("real_cache")))

    outputs = list(handlers.run_generation(*example.with_(max_new_tokens=6).values()))
    assert outputs[-1]["status"].startswith("Done: 6 tokens")
    gen = outputs[-1]["run_state"]
    assert gen.settings.drafter == example.drafter and gen.prompt == example.prompt
    assert gen.settings.sampling.temperature == example.temperature and gen.settings.gamma == example.gamma


# ---------------------------------------------------------------- one call after another

READER_LATE_S = 2.0   # far beyond the job thread's 50 ms poll plus a submit's round trip


def _reader_reads_the_close_late(monkeypatch):
    """Delay the client's reader thread as a busy machine can: it reads the server's close of the
    event stream READER_LATE_S late, after the call's result is back. Only the reader's parse of
    that one message is slowed; the server is the real one."""
    import time
    import types

    import gradio_client.client as gc_client

    def loads(text, *args, **kwargs):
        message = json.loads(text, *args, **kwargs)
        if isinstance(message, dict) and message.get("msg") == "close_stream":
            time.sleep(READER_LATE_S)
        return message

    monkeypatch.setattr(gc_client, "json", types.SimpleNamespace(loads=loads, dumps=json.dumps))


def test_a_call_right_after_another_is_not_cancelled_when_the_reader_is_late(app_url, monkeypatch):
    """app_client waits for the previous call's stream to close (specdec/bench/app_client.py says
    why). Negative control: gradio_client's own Client, with the same late reader, has its second
    call cancelled."""
    import concurrent.futures

    _reader_reads_the_close_late(monkeypatch)
    ours = app_client(app_url)
    first, second = generate(ours, max_new_tokens=4), generate(ours, max_new_tokens=4)
    assert first["status"].startswith("Done: 4 tokens") and second["status"].startswith("Done: 4 tokens")
    assert second["text"] == first["text"]   # the same request (seed 3), the same run
    stock = gradio_client.Client(app_url, verbose=False, ssl_verify=False)
    generate(stock, max_new_tokens=4)
    with pytest.raises(concurrent.futures.CancelledError):
        generate(stock, max_new_tokens=4)
