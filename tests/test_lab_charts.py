"""Lab charts are pure functions: a LabResult in, a Plotly figure out; checked on figure data."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

import bounds
from specdec.app.shows import lab_charts
from specdec.core.sampling import Rule
from specdec.explain import lab
from specdec.explain.looks import PALETTE


@pytest.fixture(scope="module")
def result():
    tokens, p, q = lab.preset("over-confident")
    return lab.run(tokens, p, q, 20_000, seed=0)


def _by_role(fig, role):
    return [t for t in fig.data if (t.meta or {}).get("role") == role]


def test_decomposition_stacks_to_p_for_exact_only(result):
    fig = lab_charts.decomposition_figure(result)
    assert isinstance(fig, go.Figure) and fig.layout.barmode == "stack"
    acc, rej = _by_role(fig, "accepted"), _by_role(fig, "rejected")
    assert [t.meta["rule"] for t in acc] == [r.value for r in lab.RULES]     # one per rule
    assert [t.meta["rule"] for t in rej] == [r.value for r in lab.RULES]
    for a, r in zip(acc, rej):
        total = np.asarray(a.y) + np.asarray(r.y)
        gap = np.abs(total - result.p).max()
        if a.meta["rule"] == Rule.EXACT.value:
            assert gap < bounds.rounding(lab.MAX_TOKENS)   # float32 closed form over the row
        else:
            assert gap > 0.05          # the shortcuts visibly miss p on this preset
    assert len(_by_role(fig, "p")) == len(lab.RULES)      # p drawn in every panel
    assert list(acc[0].x) == result.tokens


def test_histogram_one_trace_per_rule_with_intervals(result):
    fig = lab_charts.histogram_figure(result)
    obs = _by_role(fig, "observed")
    assert [t.meta["rule"] for t in obs] == [r.value for r in lab.RULES]
    for t in obs:
        r = result.results[Rule(t.meta["rule"])]
        assert np.allclose(t.y, r.counts / result.n)
        assert np.all(np.asarray(t.error_y.array) >= 0) and np.all(np.asarray(t.error_y.arrayminus) >= 0)
    assert np.allclose(_by_role(fig, "p")[0].y, result.p)
    colours = {t.marker.color for t in obs}
    assert colours <= set(PALETTE.values()) and len(colours) == len(obs)


def test_convergence_log_log_with_bias_lines(result):
    fig = lab_charts.convergence_figure(result)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    obs = _by_role(fig, "observed")
    assert [t.meta["rule"] for t in obs] == [r.value for r in lab.RULES]
    bias = {t.meta["rule"]: t for t in _by_role(fig, "bias")}
    assert Rule.EXACT.value not in bias                          # bias 0: nothing to draw on a log axis
    assert abs(bias[Rule.SKIP_ADJUSTMENT.value].y[0] - result.results[Rule.SKIP_ADJUSTMENT].bias) < 1e-12
    assert all(t.line.dash == "dash" for t in bias.values())
    assert len({t.marker.symbol for t in obs}) == len(obs)      # distinct markers per rule
    noise = _by_role(fig, "noise")[0]                           # drawn from the result, not recomputed
    assert list(noise.x) == result.curve_n and np.array_equal(noise.y, result.noise_floor)


def test_acceptance_predicted_and_observed(result):
    fig = lab_charts.acceptance_figure(result)
    pred, obs = _by_role(fig, "predicted")[0], _by_role(fig, "observed")[0]
    assert len(pred.x) == len(obs.x) == len(lab.RULES)
    assert abs(pred.y[0] - result.beta) < bounds.rounding(lab.MAX_TOKENS)   # exact: beta = sum(min(p, q)), float32
    assert np.allclose(obs.y, [result.results[r].acceptance_observed for r in lab.RULES])
    # the error bars are the result's own 95% intervals
    assert np.allclose(np.asarray(obs.y) + np.asarray(obs.error_y.array),
                       [result.results[r].acceptance_high for r in lab.RULES])
    assert np.allclose(np.asarray(obs.y) - np.asarray(obs.error_y.arrayminus),
                       [result.results[r].acceptance_low for r in lab.RULES])


def test_tables_back_every_chart(result):
    for table in (lab.summary_table, lab.decomposition_table, lab.histogram_table, lab.convergence_table,
                  lab.acceptance_table):
        headers, rows = table(result)
        assert rows and all(len(r) == len(headers) for r in rows)
