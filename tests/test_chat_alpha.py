"""`specdec chat-alpha`'s comparison of two drafters on the same prompts: the difference of their pooled
α, with an interval that resamples prompts (specdec/cli/chat_alpha.py). Pure arithmetic on made-up counts."""

from __future__ import annotations

import pytest

from specdec.cli.chat_alpha import difference_interval

# Eight prompts of very different difficulty, (accepted, tested) each, as chat-alpha gathers them.
FIRST = [(20, 100), (90, 100), (45, 100), (70, 100), (10, 100), (60, 100), (30, 100), (80, 100)]


def test_the_same_counts_differ_by_nothing_with_no_spread():
    assert difference_interval(FIRST, FIRST) == (0.0, 0.0, 0.0)


def test_the_difference_is_the_pooled_alphas_and_its_interval_holds_it_and_repeats():
    second = [(a + (5 if k % 2 else -2), t) for k, (a, t) in enumerate(FIRST)]
    d, lo, hi = difference_interval(FIRST, second)
    pooled = lambda rows: sum(a for a, _ in rows) / sum(t for _, t in rows)   # noqa: E731
    assert d == pytest.approx(pooled(second) - pooled(FIRST), abs=1e-12)   # float64 sums of a few hundred
    assert lo <= d <= hi
    assert difference_interval(FIRST, second) == (d, lo, hi)   # seeded


def test_pairing_takes_each_prompts_difficulty_out_and_a_mixed_change_stays_inside_the_noise():
    # Better by 3 drafts in 100 on every prompt, though the prompts range from 0.10 to 0.90: the
    # interval excludes 0. Unpaired, the prompts' spread (±0.3) would swamp a 0.03 change.
    steady = [(a + 3, t) for a, t in FIRST]
    d, lo, hi = difference_interval(FIRST, steady)
    assert d == pytest.approx(0.03) and 0 < lo <= hi < 0.06
    # The same mean change made of large moves both ways: the interval holds 0 (the control).
    mixed = [(a + (15 if k % 2 else -9), t) for k, (a, t) in enumerate(FIRST)]
    d, lo, hi = difference_interval(FIRST, mixed)
    assert d == pytest.approx(0.03) and lo < 0 < hi


def test_two_drafters_on_different_prompts_are_refused():
    with pytest.raises(ValueError, match="same prompts"):
        difference_interval(FIRST, FIRST[:-1])
    with pytest.raises(ValueError, match="same prompts"):
        difference_interval([], [])


def test_each_prompts_sampled_runs_draw_their_own_stream_and_repeat():
    # α's interval resamples prompts, so no two prompts may share a seed's random numbers; the same
    # prompt and seed must give the same run (and the records on file: pinned crc32 values).
    from specdec.core.checks import MAX_SEED
    from specdec.training.chat.features_chat_card import SEEDS, run_seed

    prompts = [[1, 2, 3], [1, 2, 4], [3, 2, 1], [12, 3], [1, 23]]
    seeds = {run_seed(s, ids) for s in SEEDS for ids in prompts}
    assert len(seeds) == len(SEEDS) * len(prompts)
    assert all(0 <= s <= MAX_SEED for s in seeds)
    assert run_seed(0, [1, 2, 3]) == 1195762705 and run_seed(1, [1, 2, 3]) == 3778211749
