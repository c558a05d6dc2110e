"""Every sentence the page says of a run is true of it, and every number agrees: each
check builds the sentence or the number with the function the page calls, on a real
decoding (the real pair or the bundled one, fixed seeds)."""

from __future__ import annotations

import pytest

from bounds import rounding
from specdec import RunSettings, SamplingConfig
from specdec.app.shows.charts import sig3
from specdec.app.shows.step_charts import unreachable_note
from specdec.decoding.loop import autoregressive_generate, speculative_generate
from specdec.drafting import features as fx
from specdec.explain.looks import table_number
from specdec.trace.outcomes import Status

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
        assert f"p puts {want:.4f} of its mass outside it" in note, note
        # Where p's token lies inside the vocabulary, the rest of p where q is 0 is said, with why;
        # where it lies outside, that mass is all of p's, already said: not said twice.
        said = "one-hot on the drafted token" in note and "In all p puts 1.0000 where q is 0" in note
        assert said == (want == 0.0), note
    assert any(pos.p_outside_vocab == 0.0 for pos in rejected)   # the case the page got wrong


@pytest.fixture(scope="module")
def real_sampled(real_pair):
    return _features_run(real_pair, SamplingConfig(temperature=1.0))


def test_outside_the_vocabulary_is_part_of_where_q_is_0(real_pair, real_sampled):
    # Sampled over the whole vocabulary: q is 0 outside its subset (and nowhere inside, bar
    # underflow), so the two sums hold the same ids, added in another order.
    gen = real_sampled
    tested = [pos for r in gen.rounds for pos in r.positions if pos.status is not Status.UNUSED]
    bound = rounding(real_pair.vocab_size, "float64")
    for pos in tested:
        assert 0.0 <= pos.p_outside_vocab <= pos.p_where_q_is_0 + bound
    assert any(pos.p_outside_vocab > 0 for pos in tested)


def test_skip_mode_never_says_the_output_stays_exactly_p(real_pair, real_sampled):
    from specdec.app.shows.step_charts import bias_note
    from specdec.core.sampling import Rule

    gen = _features_run(real_pair, SamplingConfig(temperature=1.0), rule=Rule.SKIP_ADJUSTMENT)
    tested = [pos for r in gen.rounds for pos in r.positions if pos.status is not Status.UNUSED]
    biased = [pos for pos in tested if pos.skip_tv > 0]
    assert biased
    for pos in biased:
        note = unreachable_note(gen, pos)
        assert "biased" in bias_note(gen, pos) and note, pos
        assert "exactly p" not in note and "biased" in note, note
    exact = real_sampled   # the negative control: the exact rule says it
    first = next(pos for r in exact.rounds for pos in r.positions)
    assert "which is why the output stays exactly p" in unreachable_note(exact, first)


def test_rounds_that_drafted_fewer_than_gamma_are_named_by_their_cause(bundled):
    # The n-gram drafter finds nothing to copy in a short prompt: its first rounds draft fewer than
    # γ, and the page said all of them were "the end of the run".
    from specdec.app.shows.charts import short_rounds

    gen = speculative_generate(bundled, "ROMEO:", RunSettings(gamma=4, max_new_tokens=30, seed=0, drafter="ngram",
                                                              sampling=SamplingConfig(temperature=0.0)))
    first = gen.rounds[0]
    assert first.gamma < 4 and first.start + 4 + 1 < 30           # short, far from the end
    by_drafter = sum(1 for r in gen.rounds if r.gamma < min(4, 30 - r.start - 1))
    at_end = sum(1 for r in gen.rounds if r.gamma < 4) - by_drafter
    words = short_rounds(gen)
    assert f"{by_drafter} because the drafter proposed fewer" in words and by_drafter > 0, words
    assert f"{at_end} at the end of the run" in words and at_end > 0, words
    model = speculative_generate(bundled, "ROMEO:", RunSettings(gamma=4, max_new_tokens=30, seed=0))
    assert "drafter proposed fewer" not in short_rounds(model)   # the draft model always drafts γ


@pytest.fixture(scope="module")
def compared(bundled):
    """A greedy run and the target alone, timed as the Decode tab's comparison times them."""
    from specdec.app.server.runs import COMPARE_REPEATS
    from specdec.explain.measure import timed_repeats

    settings = RunSettings(gamma=4, max_new_tokens=32, seed=0, sampling=SamplingConfig(temperature=0.0))
    return timed_repeats(bundled, "To be, or not to be", settings, repeats=COMPARE_REPEATS)


def test_a_rounds_cost_is_said_in_one_unit_and_each_v_is_named(compared):
    # "each round costs one target forward" (How it works) beside "each round cost 1.83 target
    # forwards" (metrics), and v = 1.71 beside "verifying 1.61" in one panel.
    from pathlib import Path

    from specdec.app.shows import charts
    from specdec.explain.speed import explain, run_point

    spec, ar = compared.spec.stats, compared.ar.stats
    point = run_point(spec, 4, ar)
    sentence = explain(spec, ar, 4).sentence
    assert "target forwards (drafting" not in sentence and "one-token target steps" in sentence
    assert f"verifying v = {point.forwards_only.verify(4):.2f}" in sentence
    assert f"with the loop's other work, v = {point.whole_loop.verify(4):.2f}" in sentence
    panel = "\n".join(charts._comparison_rows(compared.spec, compared.ar, compared.spec, compared.speedups))
    assert f"(its whole loop: target step {point.whole_loop.target_step_ms:.2f} ms" in panel
    how = (Path(charts.__file__).parents[1] / "page" / "static" / "how_it_works.md").read_text(encoding="utf-8")
    assert "costs one target forward" not in how and "one target forward pass" in how


def test_runs_of_different_lengths_are_compared_per_token(compared):
    # The status line printed 64 tokens' time beside the target alone's 34 tokens' time.
    import dataclasses

    from specdec.app.shows import charts, views
    from specdec.explain.speed import tokens_in

    ar = dataclasses.replace(compared.ar, stats=dataclasses.replace(compared.ar.stats, new_tokens=17))
    spec = compared.spec.stats
    status = views.done_status(compared.spec, ar, compared.spec)
    ms_ar = 1000 * ar.stats.wall_seconds / 17
    assert f"Autoregressive: 17 tokens in {ar.stats.wall_seconds:.2f} s, {ms_ar:.1f} ms a token" in status, status
    assert f"{1000 * spec.wall_seconds / spec.new_tokens:.1f} ms a token" in status
    assert "speedup in tokens per second" in status
    panel = "\n".join(charts._comparison_rows(compared.spec, ar, compared.spec))
    assert tokens_in(ar.stats) in panel and tokens_in(spec) in panel
    assert charts.run_summary(ar).startswith(f"the target alone: {tokens_in(ar.stats)}")


def test_each_pairs_features_drafter_is_named_with_its_own_cards_alpha():
    # On SmolLM2 the explorer offered "features drafter (its card: α 0.80 at T = 1)": the bundled
    # pair's drafter's number; SmolLM2's own card says 0.43.
    import json

    from specdec.app.page import speed_tab

    real = json.loads(speed_tab.REAL_FEATURES_MEASURES.read_text(encoding="utf-8"))["measures"]
    alpha = next(r["alpha"] for r in real["acceptance"] if r["temperature"] == 1.0)
    profiles, _ = speed_tab.all_profiles(None)
    # The features drafters' card profiles (a bench's profile of a pair names no card's α).
    drafters = [p.name for p in profiles if "features drafter (its card" in p.name]
    assert f"this CPU, SmolLM2-135M-Instruct's features drafter (its card: α {alpha:.2f} at T = 1)" in drafters
    assert len(drafters) == 2
    assert any(name.startswith("this CPU, the bundled pair's features drafter") for name in drafters)
    row = next(r for r in real["acceptance"] if r["temperature"] == 1.0)
    assert speed_tab.real_features_card_profile().c == row["draft_ms_per_draft"] / row["target_step_ms"]


def test_one_number_is_printed_one_way_in_charts_tables_and_notes(real_sampled):
    # p 6.29e-08 in a chart and 0 in its table; "p sums to 1.0000019" beside "p summed to 1.000003".
    import re

    from specdec.app.page import lab_tab
    from specdec.app.shows.step_charts import acceptance_rows, pq_rows

    gen = real_sampled
    tiny = [(r, i, x) for r, rd in enumerate(gen.rounds) for i, pos in enumerate(rd.positions)
            for x in (*pos.p.probs, *pos.q.probs) if 0 < x < 5e-7]
    assert tiny, "no probability below 5e-7 among the stored ids: pick another prompt"
    r, i, _ = tiny[0]
    pos = gen.rounds[r].positions[i]
    table = {row[1]: row[2:4] for row in pq_rows(gen, r, i) if row[1] is not None}
    for token, p, q in zip(pos.p.ids, pos.p.probs, pos.q.probs):
        for stored, shown in zip((p, q), table[token]):
            assert (shown == 0) == (stored == 0), (token, stored, shown)      # 6.29e-08 is never shown as 0
            shown_as_in_chart = sig3(shown) == sig3(stored)   # below six decimals: the chart's digits
            assert abs(shown - stored) <= 5e-7 if stored >= 5e-7 else shown_as_in_chart, (token, stored, shown)
    rows = dict((row[0], row[1]) for row in acceptance_rows(gen, r, i))
    draft = pos.draft_token
    # one value in both tables
    assert rows["p(x)"] == (table[draft][0] if draft in table else table_number(pos.p_draft))
    assert abs(rows["p(x)"] - pos.p_draft) <= 5e-7 or sig3(rows["p(x)"]) == sig3(pos.p_draft)
    # A sum off 1: the note when the rows are taken, and the lab's own note when it runs them.
    for r, rd in enumerate(gen.rounds):
        for i, _ in enumerate(rd.positions):
            taken = lab_tab.take_from_run(gen, (r, i))
            said = re.findall(r"\b([pq]) sums to ([0-9.e-]+)", taken["status"])
            if not said:
                continue
            ran = lab_tab.run_lab(taken["table"], 2000, 0)["status"]
            for name, total in said:
                assert f"{name} summed to {total}, not 1" in ran, (taken["status"], ran)
            return
    pytest.fail("no position's p or q sums off 1 by more than the lab's tolerance")


def test_the_end_of_sequence_token_is_written_one_way(real_pair, real_greedy):
    # ⟨eos⟩ in a chart, "(eos)" in the status line, <|im_end|> in the text.
    from specdec.app.shows import charts, views
    from specdec.explain.looks import EOS, token_label
    from specdec.explain.terminal import render_tokens, stats_lines

    gen = real_greedy
    assert gen.stats.stopped == "eos" and gen.token(gen.eos_token_id) == "<|im_end|>", gen.text
    last = len(gen.rounds) - 1
    shown = [charts.text_html(gen), views.done_status(gen, None), render_tokens(gen, False),
             "\n".join(stats_lines(gen)), views.round_caption(gen, last), token_label(gen, gen.eos_token_id),
             " ".join(str(cell) for row in charts.timeline_rows(gen) for cell in row)]
    for words in shown:
        assert "im_end" not in words and "(eos)" not in words and "at eos" not in words, words
    assert all(EOS in words for words in shown)
    alone = autoregressive_generate(real_pair, QUESTION, gen.settings)   # the side by side's target alone
    assert alone.token_ids[-1] == alone.eos_token_id
    html = charts.text_html(alone)
    assert "im_end" not in html and html.count(EOS) == 1


def test_the_ngram_drafter_never_proposes_a_chat_templates_special_tokens(real_pair):
    # It copied <|im_start|> and <|im_end|> from the prompt's chat template into its drafts.
    from specdec.drafting.drafters import NgramDrafter, special_ids

    special = special_ids(real_pair)
    assert {1, 2} <= special                               # <|im_start|>, <|im_end|>
    _, ids = real_pair.encode(QUESTION)
    plain, careful = NgramDrafter(real_pair.vocab_size), NgramDrafter(real_pair.vocab_size, special=special)
    # Every prefix of the templated prompt, as a context a round could draft from.
    copied = [n for n in range(2, len(ids) + 1) if set(plain.lookup(ids[:n], 8)) & special]
    assert copied, "the plain lookup copied no special token from this template: the control shows nothing"
    for n in range(2, len(ids) + 1):
        assert not set(careful.lookup(ids[:n], 8)) & special
    gen = speculative_generate(real_pair, QUESTION, RunSettings(gamma=6, max_new_tokens=24, seed=0, drafter="ngram",
                                                                sampling=SamplingConfig(temperature=0.0)))
    assert not {pos.draft_token for r in gen.rounds for pos in r.positions} & special


def test_a_win_is_called_only_outside_the_repeats_spread(compared):
    # "It won" was said of a 1.01× run whose repeats ranged 0.87–1.22×.
    import dataclasses

    from specdec.app.shows import charts
    from specdec.explain.speed import explain, speedup

    spec = compared.spec.stats
    ar = dataclasses.replace(compared.ar.stats, wall_seconds=1.01 * spec.wall_seconds * compared.ar.stats.new_tokens
                             / spec.new_tokens)
    assert abs(speedup(spec, ar) - 1.01) < 1e-9
    story = explain(spec, ar, 4, (0.87, 1.22, 1.01))
    assert "It won" not in story.sentence and "It lost" not in story.sentence
    assert "Its repeats ranged 0.87–1.22×, on both sides of 1×" in story.sentence
    assert "Its repeats ranged" not in explain(spec, ar, 4, (1.05, 1.22)).sentence   # all above 1: no such words
    assert "Its repeats ranged" not in explain(spec, ar, 4).sentence                  # one pair of runs: no spread
    ar_gen = dataclasses.replace(compared.ar, stats=ar)
    panel = "\n".join(charts._comparison_rows(compared.spec, ar_gen, compared.spec, (0.87, 1.22, 1.01)))
    assert "It won" not in panel and "on both sides of 1×" in panel


def test_a_gap_from_short_rounds_is_put_on_the_tokens_not_on_timing_noise():
    # An n-gram example measured 1.26× where its costs and α predicted 1.62×, and the page blamed
    # run-to-run timing noise; the rounds had drafted fewer than γ. The whole loop's costs are the
    # run's own, so measured / predicted is the tokens a round gave over α's, exactly.
    import dataclasses

    from specdec.explain.speed import expected_tokens_per_round, explain
    from specdec.trace.spine import Stats

    alpha, rounds, gamma = 0.45, 46, 4
    gave = 0.78 * expected_tokens_per_round(alpha, gamma)
    spec = Stats(new_tokens=round(gave * rounds), rounds=rounds, drafted=70, tested=60, accepted=27,
                 acceptance_rate=alpha, wall_seconds=3.0, draft_seconds=0.05, verify_seconds=2.6,
                 target_forwards=rounds)
    ar = Stats(new_tokens=64, rounds=64, wall_seconds=3.84, verify_seconds=3.6, target_forwards=64)
    story = explain(spec, ar, gamma)
    tokens = expected_tokens_per_round(alpha, gamma)
    exactly = pytest.approx((spec.new_tokens / rounds) / tokens, rel=1e-12)   # a few float64 roundings
    assert story.measured / story.predicted == exactly
    assert 1 <= story.measured < 0.9 * story.predicted   # neither a win as predicted nor a loss
    assert "timing noise" not in story.sentence
    assert f"The gap is all in the tokens a round gave, {spec.new_tokens / rounds:.2f} where α predicts {tokens:.2f}" \
        in story.sentence
    assert f"Its rounds drafted {70 / rounds:.2f} tokens each, not γ = 4" in story.sentence
    full = explain(dataclasses.replace(spec, drafted=gamma * rounds), ar, gamma)   # control: every round drafted γ
    assert "The gap is all in the tokens" in full.sentence and "Its rounds drafted" not in full.sentence
