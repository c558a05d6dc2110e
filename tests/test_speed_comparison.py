"""The Decode tab's comparison with the target alone, as a learner meets it: the run timed again,
unstreamed, said as it came out (faster or not than the streamed run); how long the comparison will
take said before it starts, and its repeats counted while it runs. Pure functions on a real run of
the bundled pair, with its wall times set by hand where the case needs them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specdec import RunSettings, SamplingConfig, autoregressive_generate, speculative_generate
from specdec.app.shows import charts, views

PROMPT = "To be, or not to be"
SETTINGS = RunSettings(gamma=4, max_new_tokens=16, seed=0, sampling=SamplingConfig(temperature=1.0))


@pytest.fixture(scope="module")
def pair_of_runs(bundled):
    return speculative_generate(bundled, PROMPT, SETTINGS), autoregressive_generate(bundled, PROMPT, SETTINGS)


def timed_in(gen, seconds: float):
    return replace(gen, stats=replace(gen.stats, wall_seconds=seconds))


def test_a_re_timing_slower_than_the_streamed_run_is_said_so_and_not_blamed_on_streaming(pair_of_runs):
    """The page re-times a run unstreamed because streaming costs time, then showed a re-timing that
    was slower than the streamed run without a word: where it is not faster, the status line and
    the metrics say so next to the numbers, with reasons that can be true (a busier machine, noise),
    and no longer claim the streamed run was slowed by drawing the page."""
    run, ar = pair_of_runs
    streamed, slower = timed_in(run, 1.0), timed_in(run, 1.3)
    status = views.done_status(streamed, ar, slower)
    metrics = charts.metrics_markdown(streamed, ar, timed=slower, speedups=(0.9, 1.1, 1.0))
    for shown in (status, metrics):
        assert "not faster than while streaming" in shown and "busier" in shown and "noise" in shown, shown
    assert "shares the CPU with drawing the page" not in metrics
    faster = timed_in(run, 0.7)
    for shown in (views.done_status(streamed, ar, faster), charts.metrics_markdown(streamed, ar, timed=faster)):
        assert "not faster" not in shown
    assert "shares the CPU with drawing the page" in charts.metrics_markdown(streamed, ar, timed=faster)
