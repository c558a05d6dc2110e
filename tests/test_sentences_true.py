"""Every sentence the page says of a run is true of it, and every number agrees (issue 53, section
3): each check builds the sentence or the number with the function the page calls, on a real
decoding (the real pair or the bundled one, fixed seeds)."""

from __future__ import annotations

import pytest

from bounds import rounding
from specdec import RunSettings, SamplingConfig
from specdec import features as fx
from specdec.app.shows.charts import sig3
from specdec.app.shows.step_charts import unreachable_note
from specdec.decoding import speculative_generate
from specdec.outcomes import Status

QUESTION = "What is the capital of France?"


def _features_run(pair, sampling, rule=None):
    settings = RunSettings(gamma=4, max_new_tokens=24, seed=0, drafter="features", sampling=sampling)
    return speculative_generate(pair, QUESTION, settings if rule is None else settings.with_(rule=rule))


@pytest.fixture(scope="module")
def real_greedy(real_pair):
    return _features_run(real_pair, SamplingConfig(temperature=0.0))


def test_at_temperature_0_outside_the_drafters_vocabulary_is_ps_mass_outside_it(real_pair, real_greedy):
    # At T = 0 q is one-hot on the draft, so p's mass where q is 0 is 1 at every rejection: the page
    # called that "outside the drafter's vocabulary: 1.0 of p" for a token inside it.
    inside = set(fx.net_for(real_pair).vocab.tolist())
    rejected = [pos for r in real_greedy.rounds for pos in r.positions if pos.status is Status.REJECTED]
    assert rejected, "the greedy run rejected no draft: pick another prompt"
    for pos in rejected:
        token = pos.p.ids[max(range(len(pos.p.ids)), key=lambda i: pos.p.probs[i])]   # p is one-hot on it
        want = 0.0 if token in inside else 1.0
        assert pos.p_where_q_is_0 == 1.0 and pos.p_outside_vocab == want, (token, pos)
        note = unreachable_note(real_greedy, pos)
        assert f"p puts {sig3(want)} of its mass outside it" in note, note
        assert "one-hot on the drafted token" in note and "In all p puts 1 where q is 0" in note, note
    assert any(pos.p_outside_vocab == 0.0 for pos in rejected)   # the case the page got wrong


def test_outside_the_vocabulary_is_part_of_where_q_is_0(real_pair):
    # Sampled over the whole vocabulary: q is 0 outside its subset (and nowhere inside, bar
    # underflow), so the two sums hold the same ids, added in another order.
    gen = _features_run(real_pair, SamplingConfig(temperature=1.0))
    tested = [pos for r in gen.rounds for pos in r.positions if pos.status is not Status.UNUSED]
    bound = rounding(real_pair.vocab_size, "float64")
    for pos in tested:
        assert 0.0 <= pos.p_outside_vocab <= pos.p_where_q_is_0 + bound
    assert any(pos.p_outside_vocab > 0 for pos in tested)
