"""The math: closed form and Monte Carlo, each with negative controls that must fail."""

import math

import pytest
import torch
from scipy.stats import chisquare

import bounds
from specdec.core.sampling import (
    Rule,
    SamplingConfig,
    acceptance_probability,
    logits_to_probs,
    output_distribution,
    residual,
    verify,
)

SIGNIFICANCE = 0.001


def random_pairs(n: int = 1200, vocab: int = 12, seed: int = 0):
    """Random (p, q) pairs covering the corners: disjoint supports, p == q, one-hot p or q,
    probabilities near 1e-30, and the exact zeros that top-k / top-p leave."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(n):
        p = torch.rand(vocab, generator=g) ** 3
        q = torch.rand(vocab, generator=g) ** 3
        kind = i % 8
        if kind == 1:                       # disjoint supports
            p[vocab // 2:] = 0
            q[:vocab // 2] = 0
        elif kind == 2:                     # p == q
            q = p.clone()
        elif kind == 3:                     # one-hot q (n-gram drafter)
            q = torch.zeros(vocab)
            q[int(torch.randint(vocab, (1,), generator=g))] = 1
        elif kind == 4:                     # one-hot p (greedy target)
            p = torch.zeros(vocab)
            p[int(torch.randint(vocab, (1,), generator=g))] = 1
        elif kind == 5:                     # tiny probabilities
            p[:3] = 1e-30
            q[3:6] = 1e-30
        elif kind == 6:                     # top-k / top-p style zeros
            logits = torch.randn(vocab, generator=g) * 3
            p = logits_to_probs(logits, SamplingConfig(top_k=4))
            q = logits_to_probs(logits + torch.randn(vocab, generator=g), SamplingConfig(top_p=0.7))
        pairs.append((p / p.sum(), q / q.sum()))
    return pairs


def test_residual_is_normalised_clamped_and_never_nan():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.3, 0.4, 0.1])
    r = residual(p, q)
    assert torch.allclose(r, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    same = residual(p, p)                       # positive part sums to 0: returns p, no NaN
    assert torch.equal(same, p)
    batch = residual(torch.stack([p, p]), torch.stack([q, p]))
    assert torch.allclose(batch[0], r) and torch.equal(batch[1], p)
    assert residual(p.half(), q.half()).dtype == torch.float32


def test_closed_form_equals_p_for_1000_pairs_and_skip_is_biased_where_theory_says():
    pairs = random_pairs()
    assert len(pairs) >= 1000
    biased = 0
    for p, q in pairs:
        out = output_distribution(p, q)
        assert not torch.isnan(out).any()
        tol = bounds.rounding(len(p), p.dtype)   # float32 sums over the row
        assert torch.allclose(out, p, atol=tol, rtol=0), (p, q, out)
        skip = output_distribution(p, q, skip_adjustment=True)
        assert not torch.isnan(skip).any()
        # Theory: skip - p = (1 - beta) p - max(0, p - q). Check the size of the bias exactly,
        # and that it is really there whenever theory says it is large.
        beta = acceptance_probability(p, q)
        predicted = (1 - beta) * p - (p - q).clamp_min(0)
        assert torch.allclose(skip - p, predicted, atol=tol, rtol=0)
        if predicted.abs().max() > 1e-3:
            biased += 1
            assert (skip - p).abs().max() > 5e-4
    assert biased > 500   # the control has teeth: most random pairs are biased under skipping


def test_greedy_probs_are_one_hot_of_argmax():
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0]])
    probs = logits_to_probs(logits, SamplingConfig(temperature=0))
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]   # first index on ties, like generate()


def test_warpers_match_transformers_meaning():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    k2 = logits_to_probs(logits, SamplingConfig(top_k=2))
    assert (k2[2:] == 0).all() and math.isclose(float(k2.sum()), 1.0, abs_tol=bounds.rounding(len(logits)))
    t2 = logits_to_probs(logits, SamplingConfig(temperature=2.0))
    assert torch.allclose(t2, torch.softmax(logits / 2, -1))
    p = torch.softmax(logits, -1)            # [0.636, 0.234, 0.086, ...]
    tp = logits_to_probs(logits, SamplingConfig(top_p=0.8))
    assert (tp > 0).tolist() == [True, True, False, False, False]
    assert math.isclose(float(tp[0]), float(p[0] / p[:2].sum()), abs_tol=bounds.rounding(len(logits)))


def _warper_top_p(flat, top_p):
    from transformers.generation.logits_process import TopPLogitsWarper
    return TopPLogitsWarper(top_p)(None, flat)


def test_top_p_over_the_logits_left_cuts_what_the_warper_cuts(monkeypatch):
    """`top_p_cut` sorts only the logits top-k (or a drafter's vocabulary subset) left: the same
    logits bit for bit as transformers' warper sorting the whole row, on the real model's vocabulary
    size, one row and a verify's five."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from specdec.core.sampling import top_p_cut

    gen, cases = torch.Generator().manual_seed(0), []
    for vocab in (2048, 49152):
        for rows in (1, 5):
            for k in (1, 7, 50, vocab // 16):
                for top_p in (0.05, 0.5, 0.9, 0.999):
                    logits = torch.randn(rows, vocab, generator=gen) * float(torch.rand(1, generator=gen) * 8 + 0.5)
                    cases.append((TopKLogitsWarper(k)(None, logits), top_p, logits))
            subset = torch.randn(rows, vocab, generator=gen) * 3   # a drafter's q: -inf outside its ids
            subset[:, vocab // 32:] = -math.inf
            cases += [(subset, 0.9, subset)]
    expected = [_warper_top_p(flat, top_p) for flat, top_p, _ in cases]
    with monkeypatch.context() as m:   # the compact sort runs in every case: the warper is not called
        m.setattr(TopPLogitsWarper, "__call__", lambda *a: pytest.fail("the whole row was sorted"))
        got = [top_p_cut(flat, top_p) for flat, top_p, _ in cases]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    # Control: top-p on the probabilities before top-k (the whole row's) cuts other tokens.
    wrong = [flat.masked_fill(_warper_top_p(raw, top_p) == -math.inf, -math.inf) for flat, top_p, raw in cases]
    assert sum(not torch.equal(a, b) for a, b in zip(wrong, expected)) > len(cases) // 4
    # A row mostly finite is left to the warper (it sorts faster than gathering there).
    full = torch.randn(2, 2048, generator=gen)
    assert torch.equal(top_p_cut(full, 0.9), _warper_top_p(full, 0.9))
    # Off the CPU the warper runs, with no read of the device: on "meta", which holds no values, any
    # read raises (the compact path's count of finite logits would).
    assert top_p_cut(torch.zeros(2, 4096, device="meta"), 0.9).device.type == "meta"


def test_top_p_cut_with_ties_keeps_as_many_tokens_and_as_much_mass_as_the_warper():
    """bfloat16 logits tie often; which of the tied logits at the cut goes is the sort's choice (as
    in the warper), but the number kept and their mass are the same, and the set is the smallest
    with mass ≥ top-p."""
    from transformers.generation.logits_process import TopKLogitsWarper

    from specdec.core.sampling import top_p_cut

    gen, tied_rows = torch.Generator().manual_seed(1), 0
    for trial in range(200):
        logits = (torch.randn(3, 4096, generator=gen) * 2).bfloat16().float().round(decimals=1)
        flat, top_p = TopKLogitsWarper(60)(None, logits), 0.3 + trial / 400
        got, ref = top_p_cut(flat, top_p), _warper_top_p(flat, top_p)
        kept = got > -math.inf
        assert kept.sum(-1).tolist() == (ref > -math.inf).sum(-1).tolist()
        probs = torch.softmax(flat, -1)
        mass = (probs * kept).sum(-1)
        smallest = probs.masked_fill(~kept, 2.0).min(-1).values
        tol = bounds.rounding(60)
        assert (mass >= top_p - tol).all() and (mass - smallest < top_p + tol).all()
        tied_rows += int(smallest.eq(probs.masked_fill(kept, -1.0).max(-1).values).sum())
    assert tied_rows > 0   # the case this test is for occurred: a logit tied across the cut


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(temperature=float("nan")), dict(top_k=-3),
                                 dict(top_p=0), dict(top_p=1.5), dict(temperature=1e-6)])
def test_bad_sampling_settings_are_refused(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad).validate()


# ---------------------------------------------------------------- Monte Carlo on the real verify

TOY_P = torch.tensor([0.50, 0.30, 0.15, 0.05])   # target
TOY_Q = torch.tensor([0.10, 0.20, 0.30, 0.40])   # draft, under-confident where p is high
N = 40_000


def emitted_first_tokens(rule: Rule, n: int = N, seed: int = 1, gamma: int = 2) -> torch.Tensor:
    """Run the decoder's verify n times (batched) with drafts ~ q and return the first token
    each trial emits: the first draft if accepted, else the token the round ended with."""
    g = torch.Generator().manual_seed(seed)
    v = TOY_P.numel()
    # Later positions use other distributions, so the test also checks that only row 0 matters.
    p = torch.stack([TOY_P, TOY_P.flip(0), torch.full((v,), 1 / v)])[: gamma + 1]
    q = torch.stack([TOY_Q, TOY_Q.roll(1)])[:gamma]
    drafts = torch.stack([torch.multinomial(q[i], n, replacement=True, generator=g) for i in range(gamma)], -1)
    u = torch.rand(n, gamma, generator=g)
    verdict = verify(p.expand(n, -1, -1), q.expand(n, -1, -1), drafts, u, generator=g, rule=rule)
    return torch.where(verdict.n_accepted > 0, drafts[:, 0], verdict.end_token)


def chi_square_p_value(tokens: torch.Tensor, p: torch.Tensor) -> float:
    observed = torch.bincount(tokens, minlength=p.numel()).double()
    expected = p.double() / p.double().sum() * tokens.numel()
    return float(chisquare(observed.numpy(), expected.numpy()).pvalue)


def test_monte_carlo_verify_follows_p():
    assert chi_square_p_value(emitted_first_tokens(Rule.EXACT), TOY_P) > SIGNIFICANCE


@pytest.mark.parametrize("rule", [Rule.SKIP_ADJUSTMENT, Rule.ACCEPT_ALL])
def test_monte_carlo_negative_controls_are_rejected(rule):
    assert chi_square_p_value(emitted_first_tokens(rule), TOY_P) < SIGNIFICANCE


def test_monte_carlo_one_hot_draft_like_ngram_is_exact():
    g = torch.Generator().manual_seed(3)
    q = torch.tensor([0.0, 1.0, 0.0, 0.0])
    n = 20_000
    p_rows = torch.stack([TOY_P, TOY_P]).expand(n, -1, -1)
    drafts = torch.ones(n, 1, dtype=torch.long)
    verdict = verify(p_rows, q.expand(n, 1, -1), drafts, torch.rand(n, 1, generator=g), generator=g)
    tokens = torch.where(verdict.n_accepted > 0, drafts[:, 0], verdict.end_token)
    assert chi_square_p_value(tokens, TOY_P) > SIGNIFICANCE
    # Control: skipping the adjustment over-produces the drafted token, and the test sees it.
    verdict = verify(p_rows, q.expand(n, 1, -1), drafts, torch.rand(n, 1, generator=g), generator=g,
                     rule=Rule.SKIP_ADJUSTMENT)
    tokens = torch.where(verdict.n_accepted > 0, drafts[:, 0], verdict.end_token)
    assert chi_square_p_value(tokens, TOY_P) < SIGNIFICANCE


def test_verify_counts_and_bonus():
    p = torch.tensor([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]])
    q = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    # Both drafts pass (u below the ratios): bonus from p row 2, which is one-hot on token 0.
    v = verify(p, q, torch.tensor([1, 1]), torch.tensor([0.1, 0.9]))
    assert int(v.n_accepted) == 2 and not bool(v.rejected) and int(v.end_token) == 0
    # Second draft (token 0) has p = 0: rejected; the residual is one-hot on token 1.
    v = verify(p, q, torch.tensor([1, 0]), torch.tensor([0.1, 0.0]))
    assert int(v.n_accepted) == 1 and bool(v.rejected) and int(v.end_token) == 1
    assert v.ratio.tolist() == [1.0, 0.0]
    # No drafts at all: one plain target step from p row 0.
    v = verify(p[:1], q[:0], torch.zeros(0, dtype=torch.long), torch.zeros(0))
    assert int(v.n_accepted) == 0 and not bool(v.rejected)


def test_sample_follows_probs_and_never_draws_zero_probability_tokens():
    from specdec.core.sampling import sample

    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.0, 0.2, 0.0, 0.5, 1e-30, 0.3, 0.0])
    tokens = sample(p.expand(100_000, -1), g)
    counts = torch.bincount(tokens, minlength=p.numel())
    assert counts[[0, 2, 6]].sum() == 0
    support = torch.tensor([1, 3, 5])
    observed = counts[support].double()
    expected = (p[support].double() / p[support].sum() * observed.sum()).numpy()
    assert chisquare(observed.numpy(), expected).pvalue > SIGNIFICANCE
    assert int(sample(torch.tensor([0.0, 0.0, 1.0]), g)) == 2   # one-hot: always that token
    # u * total can round up to the total itself (u = 1 forces it): the draw stays on a token with mass,
    # also when the last positive entry adds nothing to the float64 total (1e-30 after 1.0)
    for row in ([0.2, 0.5, 0.3, 0.0, 0.0], [0.5, 0.5, 1e-30, 0.0]):
        drawn = int(sample(torch.tensor(row), uniforms=torch.ones(1, dtype=torch.float64)))
        assert drawn < len(row) and row[drawn] > 0, row
    # Control: a sampler that ignores p (uniform over the support) fails the same test.
    wrong = torch.bincount(support[torch.randint(0, 3, (100_000,), generator=g)], minlength=7)[support].double()
    expected = (p[support].double() / p[support].sum() * wrong.sum()).numpy()
    assert chisquare(wrong.numpy(), expected).pvalue < SIGNIFICANCE


def test_sampling_numbers_read_from_the_device_give_the_warpers_probabilities_bit_for_bit():
    from specdec.core.sampling import DeviceSampling

    gen, numbers = torch.Generator().manual_seed(0), DeviceSampling("cpu")
    for trial in range(60):
        vocab = (8, 50, 2048)[trial % 3]
        logits = torch.randn(5, vocab, generator=gen) * (1 + trial % 6)
        t, k, p = 0.05 + trial / 30, int(torch.randint(1, vocab + 3, (1,), generator=gen)), 0.05 + trial / 63
        for config in (SamplingConfig(t), SamplingConfig(t, top_k=k), SamplingConfig(t, top_p=p),
                       SamplingConfig(t, top_k=k, top_p=p), SamplingConfig(0)):
            numbers.set(config)
            assert torch.equal(numbers.probs(logits, DeviceSampling.shape(config)), logits_to_probs(logits, config))
