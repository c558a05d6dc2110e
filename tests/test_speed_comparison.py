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
    for shown in (views.done_status(streamed, ar), charts.metrics_markdown(streamed, ar)):   # not timed again
        assert "not faster" not in shown


def test_the_comparison_s_length_is_estimated_from_the_run_and_the_target_step(pair_of_runs):
    """Each repeat runs this run again (about as long as it just took) and the target alone (its
    tokens times one target step), after a warm-up of a few tokens of each; the status says this
    before the comparison starts, and how many repeats are done, and about how long is left, while
    it runs."""
    from specdec.explain.measure import comparison_seconds

    run, _ = pair_of_runs
    s = run.stats
    one = s.wall_seconds + s.new_tokens * 0.030
    assert comparison_seconds(s, 30.0, 3, warmup_tokens=8) == pytest.approx(one * (3 + 8 / s.new_tokens))
    # Without a measured step, a verify of this run stands in for it (one forward, a few tokens wide).
    verify_ms = 1000 * s.verify_seconds / s.target_forwards
    assert comparison_seconds(s, None, 3) == pytest.approx(comparison_seconds(s, verify_ms, 3))
    before = views.comparison_status(run, 30.0, 3)
    whole = f"about {max(1, round(comparison_seconds(s, 30.0, 3)))} s"
    assert whole in before and "3 interleaved repeats" in before, before
    assert "30.0 ms, a target step measured here" in before, before
    during = views.comparison_status(run, 30.0, 3, done=2)
    assert "repeat 2 of 3 done" in during and f"about {max(1, round(one))} s left" in during, during


def test_timed_repeats_says_each_repeat_as_it_ends(bundled):
    from specdec.explain.measure import timed_repeats

    done = []
    timed_repeats(bundled, PROMPT, SETTINGS.with_(max_new_tokens=4), repeats=3, on_repeat=done.append)
    assert done == [1, 2, 3]


def test_the_page_s_comparison_streams_its_repeats_then_its_result(bundled):
    """The handler shows the comparison's progress: the server's comparison yields a message after
    each repeat, then the repeats themselves."""
    from specdec.app.server import runs
    from specdec.explain.measure import Repeats

    messages = list(runs.timed_comparison(PROMPT, "bundled", SETTINGS.with_(max_new_tokens=4), runs.request_stop()))
    assert [m.done for m in messages[:-1]] == list(range(1, runs.COMPARE_REPEATS + 1))
    assert isinstance(messages[-1], Repeats)


def test_the_decode_tab_says_how_long_the_comparison_takes_then_counts_its_repeats(bundled):
    """What the page shows once "compare with autoregressive" starts: the estimate before the first
    repeat, then one status a repeat, then the repeats for the final view."""
    from specdec.app.page.comparison import timed_against_target
    from specdec.app.server import runs

    settings = SETTINGS.with_(max_new_tokens=4)
    run = speculative_generate(bundled, PROMPT, settings)
    steps = timed_against_target(run, PROMPT, "bundled", settings, runs.request_stop())
    updates = []
    with pytest.raises(StopIteration) as ended:
        while True:
            updates.append(next(steps))
    statuses = [u["status"] for u in updates]
    assert "about" in statuses[0] and " s, each repeat this run again" in statuses[0], statuses
    assert [f"repeat {k} of {runs.COMPARE_REPEATS} done" in s for k, s in enumerate(statuses[1:], 1)] == [True] * 3
    assert ended.value.value.spec.token_ids == run.token_ids
