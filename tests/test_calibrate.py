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


def test_a_compared_runs_rounds_drop_the_profile_only_past_the_drift_in_target_steps(tmp_path):
    """The profile says a round at γ 2 costs 2 c + v target steps; a compared run whose round cost
    within `DRIFT` of that keeps it, one past it drops it (from the cache file too). Slower in ms alike
    on both sides (a browser on the same cores) is no drift: only the steps count."""
    import json

    from specdec.explain import calibrate
    from specdec.explain.speed import profile_from_dict

    row = {"name": "here: a test pair", "where": "this machine", "when": "now", "device": "cpu",
           "dtype": "bfloat16", "engine": "eager", "target_step_ms": 42.0, "draft_step_ms": 3.36,
           "verify_ms_by_width": {"1": 42.0, "3": 46.2}, "source": "a test", "machine": calibrate.machine_key()}
    store = tmp_path / calibrate.FILE
    store.write_text(json.dumps([row]))
    profile = profile_from_dict(row)
    expected = 2 * 3.36 / 42.0 + 46.2 / 42.0   # 1.26 steps
    inside, outside = expected * (1 + 0.9 * calibrate.DRIFT), expected * (1 + 1.1 * calibrate.DRIFT)
    assert not calibrate.drifted(profile, 3, outside, root=tmp_path)   # a width it never measured: no verdict
    assert not calibrate.drifted(profile, 2, inside, root=tmp_path) and json.loads(store.read_text()) == [row]
    assert not calibrate.drifted(profile, 2, expected / (1 + 0.9 * calibrate.DRIFT), root=tmp_path)
    assert calibrate.drifted(profile, 2, outside, root=tmp_path) and json.loads(store.read_text()) == []
