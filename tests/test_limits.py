"""Every limit has an environment variable and a sane default; every bad input gets a message a
person can act on: the limits module, the number checks the app adds to Gradio's inputs, the
lab's inputs (UI and CLI), the time limit, and what a visitor is told about a failed run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from specdec import RunSettings, speculative_generate
from specdec.app.server import limits, serving
from specdec.app.shows import messages
from specdec.cli.main import main
from specdec.explain import lab
from specdec.trace.spine import Generation

gr = pytest.importorskip("gradio")


# ---------------------------------------------------------------- limits

def _limits_in_a_fresh_process(**env) -> subprocess.CompletedProcess:
    code = "import json, specdec.app.server.limits as l; print(json.dumps(l.describe()))"
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


def test_every_limit_has_a_documented_variable_and_a_default():
    names = limits.describe()
    assert len(names) >= 15
    for name in names:
        assert name in limits.__doc__, f"{name} is not documented in specdec/limits.py"
    assert limits.MAX_NEW_TOKENS == 1024 and limits.MAX_GAMMA == 16 and limits.MAX_PAIRS == 2


def test_the_library_keeps_no_copy_of_a_limit():
    """Limits are enforced where requests enter, read when a request comes: no library module
    holds a copy that a changed limit would leave stale."""
    import specdec.core.settings
    import specdec.explain.lab
    import specdec.models.pair
    import specdec.trace.validate

    for module in (specdec.core.settings, specdec.models.pair, specdec.explain.lab, specdec.trace.validate):
        assert not hasattr(module, "limits") and not hasattr(module, "MAX_GAMMA"), module.__name__


@pytest.mark.slow
def test_a_variable_sets_its_limit():
    out = _limits_in_a_fresh_process(SPECDEC_MAX_GAMMA="8", SPECDEC_MAX_UPLOAD_MB="2.5", SPECDEC_MAX_PAIRS="3")
    assert out.returncode == 0, out.stderr
    got = __import__("json").loads(out.stdout)
    assert got["SPECDEC_MAX_GAMMA"] == 8 and got["SPECDEC_MAX_UPLOAD_MB"] == 2.5 and got["SPECDEC_MAX_PAIRS"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("value, words", [("lots", "is not a number"), ("0", "from 1"), ("2.5", "whole number")])
def test_a_bad_variable_stops_the_start_with_its_name(value, words):
    out = _limits_in_a_fresh_process(SPECDEC_MAX_GAMMA=value)
    assert out.returncode != 0
    assert "SPECDEC_MAX_GAMMA" in out.stderr and words in out.stderr, out.stderr[-500:]


def test_the_max_new_tokens_slider_maximum_leaves_room_for_the_prompt():
    assert limits.max_new_tokens_for(256) == 255   # a 256-token context: 256 new tokens always failed
    assert limits.max_new_tokens_for(None) == limits.MAX_NEW_TOKENS
    assert limits.max_new_tokens_for(100_000) == limits.MAX_NEW_TOKENS
    assert limits.max_new_tokens_for(1) == 1


def test_the_max_new_tokens_slider_leaves_what_the_prompt_leaves_and_a_run_of_it_decodes(bundled):
    """For the bundled pair the slider's maximum is the context less the prompt's tokens: a run of
    that many new tokens decodes, one more is refused by the decoder. A value that fits stays."""
    from specdec.app.page import handlers
    from specdec.models.pair import BUNDLED, context_of

    context = bundled.context_length
    verse = "ROMEO:\nBut, soft! what light through yonder window breaks? "
    verses = context // len(bundled.encode(verse)[1])
    prompt = verse * verses   # fills all but a few of the positions
    used = len(bundled.encode(prompt)[1])
    assert 0 < context - used < 64   # the test's point: the prompt leaves fewer than the default 64

    update = handlers.max_new_for(BUNDLED, prompt, 64)
    most = update["maximum"]
    assert most == context - used and update["value"] == most   # 64 did not fit: moved to the maximum
    assert update["info"] == (f"The bundled pair's context is {context} tokens: this prompt takes {used}, "
                              f"leaving {most}.")
    gen = speculative_generate(bundled, prompt, RunSettings(max_new_tokens=most, seed=0))
    assert gen.prompt_ids == bundled.encode(prompt)[1] and gen.stats.new_tokens <= most
    with pytest.raises(ValueError, match=f"lower max new tokens to {most} or less"):
        speculative_generate(bundled, prompt, RunSettings(max_new_tokens=most + 1))

    short = handlers.max_new_for(BUNDLED, "To be, or not to be", 64)
    assert short["maximum"] == context - len(bundled.encode("To be, or not to be")[1])
    assert "value" not in short   # 64 fits: the slider stays where the visitor put it
    full = handlers.max_new_for(BUNDLED, verse * 2 * verses, 64)   # twice the context
    assert full["maximum"] == full["value"] == 1 and full["info"].endswith("leaving none: shorten it.")
    # hub pairs (their tokenizer not here without a download) keep the context's own limit
    hub = handlers.max_new_for("gpt2", prompt, 64)
    assert hub["maximum"] == limits.max_new_tokens_for(context_of("gpt2")) and "Up to" in hub["info"]


def test_a_link_asking_for_more_than_its_prompt_leaves_runs_with_what_is_left(bundled):
    """A shared link (?prompt=...&n=...) whose n exceeds the room its prompt leaves is lowered to
    the slider's maximum and runs, and the status says so: it was refused at Run before. A link
    that fits is left as it is."""
    from specdec.app.page import handlers
    from specdec.app.server.api import parse_link
    from specdec.app.server.runs import request_stop

    context = bundled.context_length
    prompt = "To be, or not to be"
    room = context - len(bundled.encode(prompt)[1])
    fields, _ = parse_link({"prompt": prompt, "n": str(context), "seed": "3"})
    fitted, said = handlers.fit_link(fields)
    assert fitted["max_new_tokens"] == room and fitted["seed"] == 3
    assert said == (f"(The link asked for {context} new tokens; its prompt takes {context - room} of the pair's "
                    f"{context} tokens, so it ran with {room}.)")
    ok, _ = parse_link({"prompt": prompt, "n": "16"})
    assert handlers.fit_link(ok) == (ok, "")

    class Request:   # what Gradio hands open_link on page load
        query_params = {"prompt": prompt, "n": str(room + 5), "seed": "3", "t": "0"}

    updates = list(handlers.open_link(Request(), [request_stop()]))
    assert updates[0]["max_new_tokens"] == room   # the form shows what will run
    done = [u for u in updates if isinstance(u.get("run_state"), Generation)][-1]
    assert done["run_state"].settings.max_new_tokens == room and str(done["status"]).startswith("Done")
    assert updates[-1]["status"].endswith(f"so it ran with {room}.)")


def test_prompts_over_the_token_limit_are_refused_where_requests_enter(bundled, monkeypatch):
    """The server's prompt limit is checked by the app and the CLI; the library's pair encodes any
    prompt (the models' context bounds a run) and refuses only ids outside the vocabulary."""
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", 5)
    text, ids = bundled.encode("To be, or not to be, that is the question")
    assert len(ids) > 5
    with pytest.raises(ValueError, match=r"at most 5 tokens \(SPECDEC_MAX_PROMPT_TOKENS\)"):
        limits.check_prompt_tokens(len(ids))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        bundled.encode([1, 2, 10**9])


def test_one_prompt_limit_in_tokens_serves_the_page_its_api_and_the_cli(bundled, monkeypatch, capsys):
    """The page (and its API) capped a prompt at 4,000 characters, the CLI at 1,024 tokens: now one
    limit, in tokens, each refusal in words that fit where it came from (the CLI has no server)."""
    from specdec.app.server.api import RunRequest

    prompt = "To be. " * 600   # 4,200 characters: over the page's old cap of 4,000
    n = len(bundled.encode(prompt)[1])
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", n)   # exactly at the limit: taken everywhere
    assert RunRequest(prompt=prompt).checked()[0] == prompt
    limits.check_prompt_tokens(n)
    limits.check_prompt_tokens(n, limits.CLI)
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", n - 1)
    with pytest.raises(ValueError, match=rf"^the prompt is {n} tokens; this server takes prompts of at most {n - 1} "
                                         r"tokens \(SPECDEC_MAX_PROMPT_TOKENS\): shorten it$"):
        limits.check_prompt_tokens(n)
    assert main(["generate", "--prompt", prompt, "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert f"the prompt is {n} tokens; a prompt may be at most {n - 1} tokens (the limit, SPECDEC_MAX_PROMPT_TOKENS)" \
        in err and "server" not in err, err
    # Too long to be worth tokenizing: refused before, in the same limit's words.
    huge = "x" * (limits.MAX_PROMPT_TOKENS * limits.PROMPT_CHARS_PER_TOKEN + 1)
    with pytest.raises(ValueError, match=rf"characters, far more than {n - 1} tokens hold; this server takes prompts "
                                         rf"of at most {n - 1} tokens \(SPECDEC_MAX_PROMPT_TOKENS\)"):
        RunRequest(prompt=huge).checked()
    assert main(["generate", "--prompt", huge]) == 2
    assert "(the limit, SPECDEC_MAX_PROMPT_TOKENS)" in capsys.readouterr().err


def test_a_run_over_the_servers_limits_is_refused_naming_the_variable(monkeypatch, capsys):
    from specdec.core.settings import RunSettings

    monkeypatch.setattr(limits, "MAX_GAMMA", 3)   # read when the request comes: never a stale copy
    RunSettings(gamma=8).validate()                # the library takes it
    with pytest.raises(ValueError, match=r"gamma \(drafts per round\) must be a whole number from 1 to 3, got 8 "
                                         r"\(this server's SPECDEC_MAX_GAMMA\)"):
        limits.check_run(RunSettings(gamma=8))
    assert main(["generate", "--prompt", "x", "--gamma", "8"]) == 2   # the CLI keeps the same limits
    err = capsys.readouterr().err   # in its own words: no server is involved
    assert "from 1 to 3, got 8 (the limit, SPECDEC_MAX_GAMMA, is 3)" in err and "server" not in err, err
    # The CLI's user set nothing: "the limit ... is", never "set by".
    assert main(["generate", "--prompt", "x", "--gamma", "2", "--max-new-tokens", "5000"]) == 2
    err = capsys.readouterr().err
    assert f"got 5,000 (the limit, SPECDEC_MAX_NEW_TOKENS, is {limits.MAX_NEW_TOKENS:,})" in err and "set by" not in err


# ---------------------------------------------------------------- number inputs through Gradio

@pytest.mark.parametrize("payload, words", [   # one wording for every number (specdec.core.checks)
    ("abc", "γ must be a whole number from 1 to 16, got 'abc'"),
    (None, "γ is empty: give a whole number from 1 to 16"),
    ("", "γ is empty"),
    (float("nan"), "γ must be a whole number from 1 to 16, got nan"),
    (float("inf"), "γ must be a whole number from 1 to 16, got inf"),
    (99, "γ must be a whole number from 1 to 16, got 99"),
    (0, "γ must be a whole number from 1 to 16, got 0"),
    (2.5, "γ must be a whole number from 1 to 16, got 2.5"),   # a slider of whole steps: refused, not rounded
    ([4], "γ must be a whole number from 1 to 16, got [4]"),
])
def test_a_checked_slider_names_itself_in_every_refusal(payload, words):
    slider = serving.CheckedSlider(1, 16, value=4, step=1, label="γ")
    with pytest.raises(gr.Error) as err:
        slider.preprocess(payload)
    assert words in str(err.value)


def test_a_checked_slider_passes_good_values_on_as_gradio_does():
    slider = serving.CheckedSlider(0, 2, value=1.0, step=0.05, label="temperature")
    assert slider.preprocess(0.7) == 0.7 and slider.preprocess(1) == 1
    assert slider.get_block_name() == "slider"   # the page draws a plain slider


def test_a_whole_number_field_refuses_a_fraction_instead_of_rounding_it():
    samples = serving.CheckedNumber(100, precision=0, minimum=1, maximum=1_000_000, label="samples")
    with pytest.raises(gr.Error, match="samples must be a whole number from 1 to 1,000,000, got 2.5"):
        samples.preprocess(2.5)
    with pytest.raises(gr.Error, match="from 1 to 1,000,000, got 1000000000"):
        samples.preprocess(10**9)
    assert samples.preprocess(3) == 3 and samples.preprocess(3.0) == 3
    assert samples.preprocess(None) is None   # the handler names what is missing
    assert gr.Number(precision=0).preprocess(2.5) == 2   # what Gradio alone does


def test_harden_inputs_converts_an_apps_sliders_and_numbers_and_survives_updates():
    with gr.Blocks() as demo:
        a = gr.Slider(1, 5, label="a")
        b = gr.Number(0, precision=0, label="b")
        gr.Textbox()
    assert serving.harden_inputs(demo) == 2
    assert isinstance(a, serving.CheckedSlider) and isinstance(b, serving.CheckedNumber)
    # Gradio re-creates an updated component from its class: the check comes along
    again = a.__class__(**{**a.constructor_args, "render": False})
    with pytest.raises(gr.Error, match="a must be a number from 1 to 5, got 'x'"):
        again.preprocess("x")


def test_no_stub_file_is_written_next_to_serving():
    from pathlib import Path

    assert not (Path(serving.__file__).with_suffix(".pyi")).exists()


# ---------------------------------------------------------------- the time limit and failed runs

def _capture_stops(monkeypatch) -> list:
    from specdec.app.server import runs

    stops = []
    real = runs.request_stop
    monkeypatch.setattr(runs, "request_stop", lambda: stops.append(real()) or stops[-1])
    return stops


def test_a_run_past_its_time_limit_stops_between_forwards_and_says_why(monkeypatch):
    """The request's stop carries the deadline: the decoder stops at the next forward (not at the
    end of a round) and the visitor is told which limit stopped it."""
    from specdec.app.page import handlers
    from specdec.app.server.api import RunRequest

    stops = _capture_stops(monkeypatch)
    # A limit every machine passes during the prompt's forward (a GPU decodes 240 tokens in well
    # under a second), so the stop, not the machine's speed, decides where the run ends.
    monkeypatch.setattr(limits, "REQUEST_SECONDS", 0.001)
    updates = []
    with pytest.raises(gr.Error, match=r"time limit of 0.001 s \(SPECDEC_REQUEST_SECONDS\)") as err:
        updates.extend(handlers.run_generation(*RunRequest(max_new_tokens=240, gamma=1).values()))
    assert stops[0].reason == "time limit"
    # the status line, which said "Decoding…" (or "Loading…"), now says what the error says
    assert updates[0]["status"].endswith("…") and updates[-1] == {"status": handlers.failed_status(err.value.message)}


def test_a_run_refused_for_its_input_says_so_in_its_status_too():
    from specdec.app.page import handlers
    from specdec.app.server.api import RunRequest

    updates = []
    with pytest.raises(gr.Error, match="drafts per round") as err:
        updates.extend(handlers.run_generation(*RunRequest(gamma=0).values()))
    assert updates == [{"status": handlers.failed_status(err.value.message)}]


def test_leaving_a_run_stops_its_decoder(monkeypatch):
    """A visitor's Stop, a closed page or a cancelled request closes the stream: its stop is set,
    so the decoder thread ends at its next forward instead of decoding on for no one."""
    from specdec.app.page import handlers
    from specdec.app.server.api import RunRequest

    stops = _capture_stops(monkeypatch)
    stream = handlers.run_generation(*RunRequest(max_new_tokens=200, gamma=2).values())
    next(stream)   # "Decoding…"
    next(stream)   # the first round
    stream.close()
    assert stops[0].is_set() and stops[0].reason == "stopped"


def test_out_of_memory_is_told_plainly_and_frees_memory(monkeypatch):
    freed = []
    monkeypatch.setattr("specdec.models.pair.release_memory", lambda: freed.append(1))
    msg = messages.user_message(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB"))
    assert "ran out of memory" in msg and "ready for the next run" in msg and freed
    assert messages.user_message(MemoryError()).startswith("The server ran out of memory")


def test_other_failures_name_the_error_without_server_paths():
    msg = messages.user_message(RuntimeError("boom in /root/.cache/huggingface/hub/models--x/file.py"))
    assert "RuntimeError" in msg and "/root" not in msg and "ready for the next run" in msg
    assert messages.user_message(ValueError("gamma must be 1 to 16")) == "Gamma must be 1 to 16"


# ---------------------------------------------------------------- the lab's inputs

TABLE = ["a", "b"], [0.5, 0.5], [0.5, 0.5]


@pytest.mark.parametrize("samples, seed, words", [   # the library's own bounds; the tab and CLI add the limit
    ("abc", 0, "the number of samples must be a whole number of at least 1, got 'abc'"),
    (float("nan"), 0, "got nan"),
    (2.5, 0, "got 2.5"),
    (None, 0, "is empty"),
    (0, 0, "of at least 1"),
    (100, 2**32, "seed must be a whole number from 0 to 4,294,967,295"),
    (100, -1, "seed"),
])
def test_lab_numbers_are_refused_with_their_name(samples, seed, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        lab.run(*TABLE, samples, seed)


def test_the_lab_samples_limit_is_kept_by_the_tab_and_the_cli(capsys, monkeypatch):
    import pandas as pd

    from specdec.app.page import lab_tab

    monkeypatch.setattr(limits, "MAX_LAB_SAMPLES", 500)
    table = pd.DataFrame({"token": ["a", "b"], "p": [0.5, 0.5], "q": [0.5, 0.5]})
    with pytest.raises(gr.Error, match="Samples per rule must be a whole number from 1 to 500, got 1,000"):
        lab_tab.run_lab(table, 1000, 0)
    assert main(["lab", "--samples", "1000"]) == 2
    assert "SPECDEC_MAX_LAB_SAMPLES" in capsys.readouterr().err
    assert lab.run(*TABLE, 1000, 0).n == 1000   # the library itself has no such limit


def test_lab_weights_too_large_to_sum_are_normalised_not_called_massless():
    res = lab.run(["a", "b"], [1e308, 1e308], [1, 3], 1000, 0)
    assert res.p.tolist() == [0.5, 0.5] and "summed to inf" in res.notes[0]


def test_a_lab_table_with_no_rows_says_so():
    import pandas as pd

    from specdec.app.page import lab_tab

    with pytest.raises(gr.Error, match="The table has no rows"):
        lab_tab.run_lab(pd.DataFrame(columns=lab_tab.COLUMNS), 100, 0)
    with pytest.raises(gr.Error, match="no filled rows"):
        lab_tab.run_lab(pd.DataFrame({"token": ["", None], "p": [None, None], "q": [None, None]}), 100, 0)
    with pytest.raises(gr.Error, match="Samples per rule must be a whole number"):
        lab_tab.run_lab(lab_tab.load_preset("disjoint")["table"], 2.5, 0)


def test_the_lab_cli_says_what_is_wrong_in_one_line(capsys):
    assert main(["lab", "--samples", "100", "--seed", str(2**70)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec: error: the seed must be a whole number") and "Overflow" not in err
    assert main(["lab", "--p", "1e308,1e308", "--q", "1,1", "--samples", "100"]) == 0


def test_configure_sets_the_queue_the_decode_group_and_the_file_sweep(monkeypatch):
    monkeypatch.setattr(limits, "DECODE_CONCURRENCY", 3)
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button("a").click(lambda x: x, box, box, concurrency_id="decode", concurrency_limit=1)
        gr.Button("b").click(lambda x: x, box, box)
    serving.configure(demo, housekeeping_thread=False)
    decode = [f for f in demo.fns.values() if f.concurrency_id == "decode"]
    assert [f.concurrency_limit for f in decode] == [limits.QUEUE_SIZE]   # they wait in flights.LINE instead
    assert demo._queue.max_size == limits.QUEUE_SIZE
    # Gradio's queue looks for work every 1 ms when idle and for progress every 10 ms (4-6 % of a
    # core, measured); the app's every 50 ms and 100 ms until a request comes (`QueuePoll`).
    assert demo._queue.sleep_when_free == serving.QUIET_POLL_SECONDS == 0.05
    assert demo._queue.progress_update_sleep_when_free == serving.PROGRESS_POLL_SECONDS == 0.1
    assert demo.delete_cache == (int(limits.CLEAN_EVERY_SECONDS), int(limits.FILE_MAX_AGE_SECONDS))
    assert any(t[1] == "unload" for f in demo.fns.values() for t in f.targets)   # pages closing release state
    assert serving.launch_options() == dict(max_file_size=limits.MAX_UPLOAD_BYTES,
                                            state_session_capacity=limits.MAX_SESSIONS,
                                            max_threads=40 + limits.QUEUE_SIZE,
                                            run_history=False)   # no run's outputs kept in the browser


def test_the_queue_looks_for_work_briskly_only_while_requests_come():
    """From a request until BRISK_FOR_SECONDS pass without another (the `settle` each request
    schedules); quietly before and after."""
    with gr.Blocks() as demo:
        gr.Textbox()
    demo.queue()
    queue = demo._queue
    poll = serving.QueuePoll(queue)
    assert queue.sleep_when_free == serving.QUIET_POLL_SECONDS
    first = poll.woken()
    assert queue.sleep_when_free == serving.BRISK_POLL_SECONDS < serving.QUIET_POLL_SECONDS
    second = poll.woken()
    poll.settle(first)   # the second request came within the first's time: still brisk
    assert queue.sleep_when_free == serving.BRISK_POLL_SECONDS
    poll.settle(second)
    assert queue.sleep_when_free == serving.QUIET_POLL_SECONDS
