"""The costs measured here (`explain.calibrate.costs_by_width`): another process on the cores only adds
time to the forwards it preempts, so each width's ratio to a step comes from the least disturbed ones."""

from __future__ import annotations

import statistics

import pytest

from specdec.explain.calibrate import costs_by_width

# A quiet machine's forwards (ms), 7 a width, as the real pair's bfloat16 engine ran them on one thread.
QUIET = {1: [55.1, 55.4, 55.9, 56.2, 56.0, 55.6, 55.3], 2: [53.4, 53.9, 54.1, 53.6, 53.8, 54.4, 53.5],
         6: [61.2, 61.9, 61.5, 62.3, 61.7, 61.4, 61.8]}


def disturbed(times: dict[int, list[float]]) -> dict[int, list[float]]:
    """The same forwards, all but one a width preempted by another process for 20-60 ms: the one left
    whole is the quiet machine's fastest of that width (and where it falls in the run differs by width)."""
    out = {}
    for w, ts in times.items():
        keep = ts.index(min(ts))
        out[w] = [t if i == keep else t + 20 + 40 * ((i * 7 + w * 3) % 5) / 4 for i, t in enumerate(ts)]
    return out


def test_a_widths_ratio_to_a_step_survives_other_processes():
    quiet, loaded = costs_by_width(QUIET), costs_by_width(disturbed(QUIET))
    for w in QUIET:
        # the ratio of the fastest forwards: as quiet, to the rounding of the inputs (0.1 ms in 53 ms)
        assert loaded[w] / loaded[1] == pytest.approx(quiet[w] / quiet[1], rel=2 * 0.1 / 53)
    assert loaded[1] == statistics.median(disturbed(QUIET)[1])   # the level: the step a run meets now


def test_negative_control_the_medians_of_the_same_forwards_misorder_the_widths():
    medians = {w: statistics.median(ts) for w, ts in disturbed(QUIET).items()}
    quiet = {w: statistics.median(ts) for w, ts in QUIET.items()}
    assert any(abs(medians[w] / medians[1] - quiet[w] / quiet[1]) > 0.05 for w in QUIET)
