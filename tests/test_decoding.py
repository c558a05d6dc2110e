"""The decoder end to end on real (tiny, random) transformers models and on the bundled pair."""

import itertools
import math

import pytest
import torch
from scipy.stats import chi2_contingency, chisquare

import bounds
from specdec import (
    Generation,
    Rule,
    RunSettings,
    SamplingConfig,
    autoregressive_generate,
    load_trace,
    speculative_generate,
)
from specdec.core import checks
from specdec.core.checks import MAX_SEED
from specdec.core.sampling import logits_to_probs
from specdec.drafting.drafters import KVCache, NgramDrafter, make_drafter
from specdec.models.pair import ModelPair
from specdec.trace.outcomes import Status
from tiny import StopAfter, tiny_model, tiny_pair

ACCEPTED, REJECTED, UNUSED = Status.ACCEPTED, Status.REJECTED, Status.UNUSED

SIGNIFICANCE = 0.001
PROMPT = [1, 2, 3]


def without_timings(gen: Generation) -> dict:
    d = gen.to_dict()
    for r in d["rounds"]:
        r["draft_seconds"] = r["verify_seconds"] = 0
    for k in ("draft_seconds", "verify_seconds", "wall_seconds"):
        d["stats"][k] = 0
    return d


# ---------------------------------------------------------------- whole pipeline distribution

def exact_joint(pair, prompt, sampling) -> torch.Tensor:
    """P(t1, t2) from the target alone, computed without any cache: the ground truth."""
    v = pair.vocab_size
    with torch.no_grad():
        p1 = logits_to_probs(pair.target(torch.tensor([prompt])).logits[0, -1], sampling)
        rows = [logits_to_probs(pair.target(torch.tensor([prompt + [t]])).logits[0, -1], sampling) for t in range(v)]
    return p1[:, None] * torch.stack(rows)


def first_two(gen: Generation) -> int:
    return gen.token_ids[0] * 8 + gen.token_ids[1]


def gof_p_value(samples: list[int], joint: torch.Tensor) -> float:
    """Chi-square goodness of fit against the exact joint; cells with expected count < 5 pooled."""
    n = len(samples)
    expected = (joint.flatten().double() * n).numpy()
    observed = torch.bincount(torch.tensor(samples), minlength=joint.numel()).double().numpy()
    big = expected >= 5
    obs = list(observed[big]) + [observed[~big].sum()]
    exp = list(expected[big]) + [expected[~big].sum()]
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = [e * sum(obs) / sum(exp) for e in exp]
    return float(chisquare(obs, exp).pvalue)


@pytest.fixture(scope="module")
def joint_setup():
    pair = tiny_pair(vocab=8, seed=0)
    sampling = SamplingConfig(temperature=1.0)
    return pair, sampling, exact_joint(pair, PROMPT, sampling)


# Sized to its power (`python scripts/control_power.py`: the skip control's chi-square at 2,000
# runs was 551 on 58 degrees of freedom, a noncentrality of ~493, so ~246 at 1,000): at 1,000 runs
# the control fails with probability 1 - 2e-16, and any bias a third the size of skipping the
# adjustment (noncentrality >= 85) is caught with probability 0.99 at SIGNIFICANCE.
RUNS = 1000
# The laws are sampled untraced (`trace=False`: the same decode, its rounds not stored; 11-14 ms a
# run against 22 traced on these tiny models, measured), so that the suite affords its 1,000-run
# samples. The first TRACED_SEEDS seeds are decoded traced too and must give the same tokens: the
# law is the traced decoder's, the one the app shows.
TRACED_SEEDS = 50


def sampled(pair, settings: RunSettings, runs: int = RUNS, check=None) -> list[Generation]:
    """`runs` runs of `settings` at seeds 0, 1, ..., untraced; the first TRACED_SEEDS checked against
    traced runs (same tokens), and `check(traced_run)` on each of those where given."""
    gens = [speculative_generate(pair, PROMPT, settings.with_(seed=s), trace=False) for s in range(runs)]
    for s in range(TRACED_SEEDS):
        traced = speculative_generate(pair, PROMPT, settings.with_(seed=s))
        assert traced.token_ids == gens[s].token_ids, (s, traced.token_ids, gens[s].token_ids)
        if check is not None:
            check(traced)
    return gens


@pytest.mark.slow
def test_pipeline_joint_of_first_two_tokens_matches_target(joint_setup):
    pair, sampling, joint = joint_setup
    # max_new_tokens=3 with gamma=2: both of the first two tokens come out of the draft/verify
    # step of round one (accepted drafts or the residual), not from plain target steps.
    spec = [first_two(g) for g in sampled(pair, RunSettings(gamma=2, max_new_tokens=3, sampling=sampling))]
    ar = [first_two(autoregressive_generate(pair, PROMPT, RunSettings(max_new_tokens=2, sampling=sampling,
                                                                      seed=10**6 + s)))
          for s in range(RUNS)]
    assert gof_p_value(spec, joint) > SIGNIFICANCE
    assert gof_p_value(ar, joint) > SIGNIFICANCE
    # And the two samplers against each other (two-sample test on the 64 cells, empty ones dropped).
    table = torch.stack([torch.bincount(torch.tensor(x), minlength=64) for x in (spec, ar)])
    table = table[:, table.sum(0) > 0].numpy()
    assert chi2_contingency(table).pvalue > SIGNIFICANCE


@pytest.mark.slow
def test_pipeline_negative_control_skip_adjustment_is_detected(joint_setup):
    pair, sampling, joint = joint_setup
    skip = RunSettings(gamma=2, max_new_tokens=3, sampling=sampling, rule=Rule.SKIP_ADJUSTMENT)
    skip = [first_two(g) for g in sampled(pair, skip)]
    assert gof_p_value(skip, joint) < SIGNIFICANCE


# ---------------------------------------------------------------- greedy equals the target's own

@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_equals_target_generate_tiny(drafter, gamma):
    pair = tiny_pair(vocab=16, seed=1)
    ref = pair.target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=30, min_new_tokens=30)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=gamma, max_new_tokens=30,
                                                         sampling=SamplingConfig(temperature=0), drafter=drafter))
    assert gen.token_ids == ref[0, len(PROMPT):].tolist()


@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_equals_target_generate_bundled(bundled, drafter, gamma):
    prompt = "KING HENRY.\nNow, lords, the day is ours; the French are fled,"
    ids = bundled.tokenizer(prompt, return_tensors="pt")["input_ids"]
    ref = bundled.target.generate(ids, do_sample=False, max_new_tokens=48)
    gen = speculative_generate(bundled, prompt, RunSettings(gamma=gamma, max_new_tokens=48,
                                                            sampling=SamplingConfig(temperature=0), drafter=drafter))
    assert gen.token_ids == ref[0, ids.shape[1]:].tolist()
    assert gen.stats.tested > 0


def test_padded_draft_vocabulary_is_aligned_and_stays_exact():
    target = tiny_model(vocab=8, layers=2, seed=4)
    draft = tiny_model(vocab=11, layers=1, seed=5)     # a draft with 3 padding rows more
    pair = ModelPair(None, target, draft, "t", "d")
    assert pair.vocab_size == 8                         # the ids both models can embed
    ref = target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=20, min_new_tokens=20)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=20,
                                                         sampling=SamplingConfig(temperature=0)))
    assert gen.token_ids == ref[0, 3:].tolist()
    sampled = speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=40, seed=0))
    assert all(pos.draft_token < 8 for r in sampled.rounds for pos in r.positions)
    tol = bounds.rounding(8)   # a float32 softmax over the 8-token vocabulary
    assert all(abs(sum(pos.q.probs) + pos.q.rest - 1) < tol for r in sampled.rounds for pos in r.positions)


# ---------------------------------------------------------------- KV cache rollback

def test_kv_cache_crop_matches_uncached_logits():
    model = tiny_model(vocab=16, layers=2, seed=2)
    cache = KVCache(model)
    g = torch.Generator().manual_seed(0)
    context = [1, 2, 3, 4]
    with torch.no_grad():
        for _ in range(8):   # rounds: 4 drafts, keep a random prefix (a rejection), add one token
            drafts = torch.randint(0, 16, (4,), generator=g).tolist()
            cached = cache.forward(context, drafts)
            fresh = model(torch.tensor([context + drafts])).logits[0, -5:]
            # float32, two orders of the same sums: per layer, attention over the context and
            # matmuls over the width and the MLP's inner size; scaled by the logits' size
            work = model.config.num_hidden_layers * (len(context) + len(drafts) + 3 * model.config.hidden_size)
            assert torch.allclose(cached, fresh, atol=bounds.rounding(work, scale=float(fresh.abs().max())), rtol=0)
            keep = int(torch.randint(0, 4, (1,), generator=g))
            context = context + drafts[:keep] + [int(torch.randint(0, 16, (1,), generator=g))]
        assert len(cache.ids) > len(context) - 1


def test_decoder_p_rows_equal_uncached_target_after_rejections():
    pair = tiny_pair(vocab=8, seed=3)     # vocab 8 < top-N: the trace stores p exactly
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=40, seed=7))
    assert sum(r.n_accepted < r.gamma for r in gen.rounds) >= 3, "the run needs rejections"
    tokens = PROMPT + gen.token_ids
    with torch.no_grad():
        for r in gen.rounds:
            ctx = tokens[:len(PROMPT) + r.start] + [pos.draft_token for pos in r.positions]
            probs = torch.softmax(pair.target(torch.tensor([ctx])).logits[0].float(), -1)
            for i, pos in enumerate(r.positions):
                row = probs[len(PROMPT) + r.start - 1 + i]
                # the same forward, cached and not: probabilities differ by float32 rounding
                # through the layers and the softmax over the row (see the KV-cache test above)
                work = pair.target.config.num_hidden_layers * (len(ctx) + 3 * pair.target.config.hidden_size) + 8
                assert torch.allclose(torch.tensor(pos.p.probs), row[pos.p.ids], atol=bounds.rounding(work), rtol=0)


# ---------------------------------------------------------------- trace, stats and edges

def test_same_seed_same_trace_and_json_round_trip():
    pair = tiny_pair()
    a = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=30, seed=5))
    b = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=30, seed=5))
    c = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=30, seed=6))
    assert without_timings(a) == without_timings(b)
    assert without_timings(a) != without_timings(c)
    assert load_trace(a.to_json()) == a
    with pytest.raises(ValueError):
        load_trace('{"schema": "specdec.trace", "version": 99}')
    with pytest.raises(ValueError):
        load_trace("not json")


def test_every_seed_the_checks_allow_draws_its_own_stream():
    # A run's generator is torch's CPU one (a Mersenne twister), which keeps a seed's low 32 bits: one
    # past MAX_SEED would repeat seed 0's run, so the checks stop there.
    draw = lambda s: torch.rand(8, generator=torch.Generator(device="cpu").manual_seed(s))   # noqa: E731
    assert not torch.equal(draw(MAX_SEED), draw(0))
    assert torch.equal(draw(MAX_SEED + 1), draw(0))
    assert checks.seed(MAX_SEED) == MAX_SEED
    with pytest.raises(ValueError, match="from 0 to 4,294,967,295"):
        checks.seed(MAX_SEED + 1)


def test_no_global_rng_is_touched():
    pair = tiny_pair()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    speculative_generate(pair, PROMPT, RunSettings(gamma=3, max_new_tokens=10, seed=0))
    assert torch.equal(before, torch.get_rng_state())


def test_statistics_follow_from_the_rounds():
    pair = tiny_pair()
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=50, seed=1))
    s = gen.stats
    statuses = [pos.status for r in gen.rounds for pos in r.positions]
    assert s.accepted == statuses.count(ACCEPTED)
    assert s.tested == statuses.count(ACCEPTED) + statuses.count(REJECTED)
    assert s.drafted == len(statuses) and statuses.count(UNUSED) == s.drafted - s.tested
    assert s.acceptance_rate == pytest.approx(s.accepted / s.tested)
    assert s.target_forwards == len(gen.rounds)
    assert s.tokens_per_target_forward == pytest.approx(50 / len(gen.rounds))
    assert sum(len(r.emitted) for r in gen.rounds) == 50 == len(gen.token_ids)
    for r in gen.rounds:   # each round's statuses: accepted*, then at most one rejected, then unused
        st = [pos.status for pos in r.positions]
        assert st == [ACCEPTED] * r.n_accepted + ([REJECTED] + [UNUSED] * (r.gamma - r.n_accepted - 1)
                                                  if r.n_accepted < r.gamma else [])
        assert r.ending == ("residual" if r.n_accepted < r.gamma else "bonus" if r.gamma else "plain")
        assert abs(sum(r.end_dist.probs) + r.end_dist.rest - 1) < bounds.rounding(8)   # float32, vocab 8


@pytest.mark.parametrize("max_new", [1, 2, 5])
def test_stops_exactly_at_max_new_tokens_with_gamma_larger_than_left(max_new):
    gen = speculative_generate(tiny_pair(), PROMPT, RunSettings(gamma=8, max_new_tokens=max_new, seed=0))
    assert len(gen.token_ids) == max_new
    assert all(r.gamma <= max_new - 1 for r in gen.rounds)


def test_stops_at_eos_among_accepted_drafts():
    base = speculative_generate(tiny_pair(same=True), PROMPT, RunSettings(gamma=4, max_new_tokens=30, seed=2))
    # The draft is the target itself, so every draft is accepted (p == q): pick as EOS a token
    # that first appears as an accepted draft in the middle of a round.
    for r in base.rounds:
        for i, pos in enumerate(r.positions[:-1]):
            if pos.draft_token not in base.token_ids[:r.start + i]:
                eos, first = pos.draft_token, r.start + i
                break
        else:
            continue
        break
    pair = tiny_pair(same=True, eos=eos)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=30, seed=2))
    assert gen.token_ids == base.token_ids[:first + 1] and gen.token_ids[-1] == eos
    assert gen.stats.stopped == "eos"
    last = gen.rounds[-1]
    assert last.emitted[-1] == eos and last.positions[len(last.emitted) - 1].status == ACCEPTED
    assert gen.stats.acceptance_rate == 1.0


def test_prompt_at_the_context_limit_is_refused_clearly():
    pair = tiny_pair(context=32)
    with pytest.raises(ValueError, match="context holds 32 tokens"):
        speculative_generate(pair, list(range(1, 8)) * 4, RunSettings(gamma=4, max_new_tokens=8))
    gen = speculative_generate(pair, [1] * 24, RunSettings(gamma=4, max_new_tokens=8))   # exactly fits
    assert len(gen.token_ids) == 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(gamma=0), "gamma"), (dict(gamma=1000), "gamma"), (dict(max_new_tokens=0), "max new tokens"),
    (dict(drafter="oracle"), "unknown drafter"), (dict(sampling=SamplingConfig(temperature=-1)), "temperature"),
])
def test_bad_requests_get_clear_messages(kwargs, match):
    with pytest.raises(ValueError, match=match):
        speculative_generate(tiny_pair(), PROMPT, RunSettings(**kwargs))
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(tiny_pair(), [])


def test_ngram_drafter_proposes_latest_continuation():
    d = NgramDrafter(vocab_size=10, max_ngram=3)
    assert d.lookup([5, 6, 7, 1, 5, 6, 7, 2, 5, 6, 7], 3) == [2, 5, 6]   # latest match of (5, 6, 7)
    assert d.lookup([1, 2, 3], 3) == []
    drafts, q = d.propose([4, 4, 9, 4, 4], 2, SamplingConfig(), torch.Generator())
    assert drafts == [9, 4] and q.sum(-1).tolist() == [1.0, 1.0] and q[0, 9] == 1 and q[1, 4] == 1
    assert d.propose([4, 4, 4], 2, SamplingConfig(), torch.Generator())[0] == [4]   # only what followed


def test_ngram_drafter_puts_q_on_the_pairs_device():
    # On a GPU its q meets the target's p on the device (a q on the CPU breaks the round's
    # summary). "meta" stands in for a device here: q must be made there, not moved afterwards.
    pair = tiny_pair()
    pair.device = "meta"
    drafts, q = make_drafter("ngram", pair).propose([4, 4, 9, 4, 4], 2, SamplingConfig(), torch.Generator())
    assert drafts == [9, 4] and q.device.type == "meta" and q.shape == (2, pair.vocab_size)


def test_callback_sees_every_round():
    seen = []
    gen = speculative_generate(tiny_pair(), PROMPT, RunSettings(gamma=3, max_new_tokens=20, seed=0),
                               on_round=lambda r, g: seen.append((r.index, len(g.token_ids))))
    assert [i for i, _ in seen] == list(range(len(gen.rounds)))
    assert seen[-1][1] == 20 and all(a[1] < b[1] for a, b in itertools.pairwise(seen))


@pytest.mark.parametrize("every", [0.0, 0.002, math.inf])
def test_streaming_every_so_often_shows_the_first_round_then_later_ones_and_returns_the_same_run(bundled, every):
    """With `stream_every`, the callback sees the first round at once, then the latest round of
    each batch, in order, each time with the run so far (its rounds, text and every id's text);
    the run returned is the one an unstreamed decode returns. 0 streams every round; inf only the
    first; between them, however fast the machine, the same rules hold."""
    settings = RunSettings(gamma=4, max_new_tokens=120, seed=4)
    alone = speculative_generate(bundled, "To be, or not to be", settings)
    seen = []

    def on_round(r, g):
        ids = set(g.token_ids) | {t for rnd in g.rounds for pos in rnd.positions for t in (pos.draft_token, *pos.p.ids)}
        seen.append((r.index, len(g.rounds), g.text, ids <= g.token_text.keys(), len(g.token_ids)))

    gen = speculative_generate(bundled, "To be, or not to be", settings, on_round=on_round, stream_every=every)
    assert without_timings(gen) == without_timings(alone)
    indices = [i for i, *_ in seen]
    assert indices[0] == 0 and all(a < b for a, b in itertools.pairwise(indices))
    assert all(n == i + 1 for i, n, *_ in seen)                   # the run so far ends at the round shown
    assert all(gen.text.startswith(text) for _, _, text, _, _ in seen) and all(known for *_, known, _ in seen)
    assert all(alone.rounds[i].end_token == alone.token_ids[n - 1] for i, *_, n in seen if n)
    if every == 0.0:
        assert indices == list(range(len(gen.rounds)))
    if every == math.inf:
        assert indices == [0]


def test_keep_top_matches_a_plain_reference():
    """The batched id selection equals the obvious per-row version: top-n of each row plus the
    extra token, ordered by a then b (ties by id); a token is in a row's top only with mass there."""
    from specdec.trace.spine import keep_top

    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        rows, vocab, n = 3, 30, 5
        a = torch.rand(rows, vocab, generator=g) * (torch.rand(rows, vocab, generator=g) < 0.3)
        b = torch.rand(rows, vocab, generator=g) * (torch.rand(rows, vocab, generator=g) < 0.3)
        if trial % 5 == 0:   # one-hot rows, as at temperature 0
            a = torch.zeros(rows, vocab).scatter_(1, torch.randint(0, vocab, (rows, 1), generator=g), 1.0)
        extra = torch.randint(0, vocab, (rows,), generator=g)
        kept, mask = keep_top(a.numpy(), b.numpy(), extra.numpy(), n=n)
        for r, (ids, av, bv) in enumerate(kept):
            assert mask[r, ids].all()
            top_a = {i for i in torch.topk(a[r], n).indices.tolist() if a[r, i] > 0}
            top_b = {i for i in torch.topk(b[r], n).indices.tolist() if b[r, i] > 0}
            want = top_a | top_b | {int(extra[r])}
            want = sorted(want, key=lambda i: (-float(a[r, i]), -float(b[r, i]), i))
            assert ids == want
            assert av == a[r, ids].tolist() and bv == b[r, ids].tolist()


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.0, 0, 1.0), (1.3, 0, 1.0),
                                                        (1.0, 50, 1.0), (1.0, 0, 0.9), (1.3, 40, 0.95)])
def test_stored_tail_keeps_beta_and_residual_exact(bundled, temperature, top_k, top_p):
    """The tail is stored as two parts split by the sign of p - q, so beta = sum(min(p, q)) and
    the residual mass sum(max(0, p - q)) on the stored view equal their values on the full rows
    (pos.beta and r.residual_mass are computed on the full rows at decode time)."""
    from specdec.trace.spine import beta_of, residual_mass_of

    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    tol = bounds.rounding(bundled.target.config.vocab_size)   # float32 sums over the full rows
    checked = 0
    for seed in range(3):
        gen = speculative_generate(bundled, "ROMEO.\nBut soft,", RunSettings(gamma=4, max_new_tokens=48, seed=seed,
                                                                             sampling=sampling))
        gen = load_trace(gen.to_json())   # what an export and an import keep
        for r in gen.rounds:
            for pos in r.positions:
                assert pos.p.split is not None and pos.q.split is not None
                assert abs(beta_of(pos.p, pos.q) - pos.beta) < tol
                p_total = math.fsum(pos.p.probs) + pos.p.rest   # the full row's float64 total
                assert abs(residual_mass_of(pos.p, pos.q) - (p_total - pos.beta)) < tol
                checked += 1
            if r.residual_mass is not None:
                assert abs(residual_mass_of(r.end_p, r.end_q) - r.residual_mass) < tol
    assert checked > 50
    # the negative control: one lumped tail (as schema 1 stored it) does not keep beta exact
    lumped = [abs(math.fsum(min(a, b) for a, b in zip(pos.p.probs + [pos.p.rest], pos.q.probs + [pos.q.rest]))
                  - pos.beta) for r in gen.rounds for pos in r.positions]
    assert max(lumped) > 1e-3


def test_stored_skip_bias_equals_the_closed_form_on_full_rows():
    """Each drafted position stores TV(what the skip rule emits there, p), computed on the full
    rows at decode time; it equals the closed form on rows recomputed without a cache (vocab 8:
    the trace keeps every token). The exact rule's own bias there is 0 (closed form)."""
    from specdec.core.sampling import Rule, output_distribution

    pair = tiny_pair(vocab=8, seed=3)
    gen = speculative_generate(pair, PROMPT, RunSettings(gamma=4, max_new_tokens=40, seed=7))
    tokens = PROMPT + gen.token_ids
    biased = 0
    with torch.no_grad():
        for r in gen.rounds:
            ctx = tokens[:len(PROMPT) + r.start] + [pos.draft_token for pos in r.positions]
            p_rows = torch.softmax(pair.target(torch.tensor([ctx])).logits[0].float(), -1)
            q_rows = torch.softmax(pair.draft(torch.tensor([ctx])).logits[0].float(), -1)
            for i, pos in enumerate(r.positions):
                at = len(PROMPT) + r.start - 1 + i
                p, q = p_rows[at].double(), q_rows[at].double()
                skip = 0.5 * (output_distribution(p, q, rule=Rule.SKIP_ADJUSTMENT) - p).abs().sum()
                exact = 0.5 * (output_distribution(p, q, rule=Rule.EXACT) - p).abs().sum()
                tol = bounds.rounding(len(p))   # output_distribution runs in float32 over the row
                assert abs(pos.skip_tv - float(skip)) < tol
                assert float(exact) < tol
                biased += pos.skip_tv > 1e-3
    assert biased > 5
    assert gen.stats.skip_tv_mean > 0


# ---------------------------------------------------------------- stopping and streaming

def test_a_stop_acts_between_forwards_inside_a_round_and_returns_the_partial_run():
    pair = tiny_pair()
    settings = RunSettings(gamma=8, max_new_tokens=40, seed=0)
    full = speculative_generate(pair, PROMPT, settings)
    stop = StopAfter(3)                              # three draft forwards, then stop: mid-round
    gen = speculative_generate(pair, PROMPT, settings, stop=stop)
    assert gen.rounds == [] and gen.token_ids == [] and gen.stats.stopped == "stopped"
    assert gen.stats.draft_forwards == 3 and gen.stats.target_forwards == 0
    # Stopped later, after whole rounds: what it emitted is the full run's beginning, exactly.
    first = len(full.rounds[0].positions) + 1 + len(full.rounds[1].positions) + 1
    gen = speculative_generate(pair, PROMPT, settings, stop=StopAfter(first + 1))
    assert len(gen.rounds) == 2 and gen.token_ids == full.token_ids[:len(gen.token_ids)]
    assert gen.stats.stopped == "stopped" and load_trace(gen.to_json()).stats.stopped == "stopped"


def test_a_deadline_stops_the_run_as_a_time_limit():
    from specdec.decoding.loop import StopSignal

    gen = speculative_generate(tiny_pair(), PROMPT, RunSettings(max_new_tokens=40), stop=StopSignal(seconds=0))
    assert gen.token_ids == [] and gen.stats.stopped == "time limit"
    stop = StopSignal()
    stop.set()
    assert autoregressive_generate(tiny_pair(), PROMPT, RunSettings(max_new_tokens=9), stop=stop).stats.stopped \
        == "stopped"


def test_the_target_alone_stops_between_its_forwards_too():
    pair = tiny_pair()
    full = autoregressive_generate(pair, PROMPT, RunSettings(max_new_tokens=30, seed=4))
    gen = autoregressive_generate(pair, PROMPT, RunSettings(max_new_tokens=30, seed=4), stop=StopAfter(7))
    assert gen.token_ids == full.token_ids[:7] and gen.stats.stopped == "stopped"
    assert gen.stats.target_forwards == 7 and gen.text == pair.decode(gen.token_ids)


def test_streaming_brings_stats_and_text_up_to_date_one_round_at_a_time(bundled, monkeypatch):
    """Each round's callback sees the stats and text of the run so far; the whole output is never
    decoded again per round (the decoded ids stay linear in the run's length)."""
    decoded = []
    real = type(bundled).decode
    monkeypatch.setattr(type(bundled), "decode", lambda self, ids: (decoded.append(len(ids)), real(self, ids))[1])
    seen = []
    gen = speculative_generate(bundled, "To be, or not to be", RunSettings(gamma=4, max_new_tokens=200, seed=0),
                               on_round=lambda r, g: seen.append((g.text, g.stats.rounds, g.stats.accepted,
                                                                  len(g.token_ids))))
    assert [rounds for _, rounds, _, _ in seen] == list(range(1, len(gen.rounds) + 1))
    assert seen[-1][2] == gen.stats.accepted and seen[-1][3] == len(gen.token_ids) == 200
    texts = [text for text, _, _, _ in seen]
    assert all(a == b[:len(a)] for a, b in itertools.pairwise(texts)) and gen.text.startswith(texts[-1])
    assert sum(decoded) <= 6 * len(gen.token_ids), sum(decoded)   # a rebuild per round would be ~ n^2 / 6
