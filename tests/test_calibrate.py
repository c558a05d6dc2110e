"""The costs measured here (`explain.calibrate.loop_costs`): a round's whole loop at each γ, as a
compared run's own costs are, so that γ c + v is the time a round took; and robust to another process
on the cores, which only adds time to the rounds it preempts."""

from __future__ import annotations

import statistics

import pytest

from specdec.explain.calibrate import loop_costs

# A quiet machine's timings (ms): the target alone's ms a token in two passes, full rounds at γ 2 and
# γ 4 (the real pair's bfloat16 engine on two threads ran about these), and the runs' ms a draft.
STEPS = [41.4, 41.6]
ROUNDS = {2: [53.1, 53.6, 52.9, 53.4, 54.0, 53.2, 53.8, 53.5, 52.8, 53.3, 53.7],
          4: [60.2, 60.9, 61.4, 60.5, 60.8, 61.1, 60.3]}
DRAFTS = [3.2, 3.3, 3.1, 3.2]
ROUNDING = 1e-9   # ms: a median of the inputs, less a product of two of them (float64)


def test_a_round_at_gamma_costs_gamma_draft_steps_and_one_verify_as_measured():
    step, draft, verify = loop_costs(STEPS, ROUNDS, DRAFTS)
    assert step == statistics.median(STEPS) and verify[1] == step   # width 1: one step
    assert draft == statistics.median(DRAFTS)
    for g, ms in ROUNDS.items():
        assert g * draft + verify[g + 1] == pytest.approx(statistics.median(ms), abs=ROUNDING)
    assert set(verify) == {1, 3, 5}   # only the widths measured: an unmeasured γ is not guessed


def preempted(rounds: dict[int, list[float]]) -> dict[int, list[float]]:
    """The same rounds with a third of them (not the same places at each γ) preempted by another
    process for 20 to 60 ms."""
    return {g: [t + (20 + 10 * (i % 5) if (i + g) % 3 == 0 else 0) for i, t in enumerate(ts)]
            for g, ts in rounds.items()}


def test_a_third_of_the_rounds_preempted_moves_a_cost_less_than_the_quiet_spread():
    quiet, loaded = loop_costs(STEPS, ROUNDS, DRAFTS)[2], loop_costs(STEPS, preempted(ROUNDS), DRAFTS)[2]
    for g, ms in ROUNDS.items():
        assert abs(loaded[g + 1] - quiet[g + 1]) <= max(ms) - min(ms)


def test_negative_control_means_of_the_same_rounds_move_with_the_preemption():
    for g, ms in ROUNDS.items():
        assert statistics.mean(preempted(ROUNDS)[g]) - statistics.mean(ms) > max(ms) - min(ms)
