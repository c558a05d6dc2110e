"""The device reduction of a round's rows (`specdec.trace.reduction`) against a plain per-row reference."""

from __future__ import annotations

import math

import numpy as np
import torch

from specdec.trace.reduction import parse, round_summary, tie_free_key, top_ids
from specdec.trace.spine import order_kept


def _top(x: torch.Tensor, n: int, low_first: bool = True) -> list[int]:
    """The tie rule, written out: top n by value, then the lower id; only tokens with mass."""
    ids = sorted(range(len(x)), key=lambda i: (-float(x[i]), i if low_first else -i))[:n]
    return [i for i in ids if x[i] > 0]


def _tails(x, p, q, kept) -> tuple[float, float]:
    rest = [i for i in range(len(x)) if i not in kept]
    return (math.fsum(float(x[i]) for i in rest if p[i] >= q[i]), math.fsum(float(x[i]) for i in rest if p[i] < q[i]))


def _grid(gen: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Distributions on a coarse grid (many ties, about half the tokens at 0)."""
    x = (torch.randint(0, 6, (rows, vocab), generator=gen) * (torch.rand(rows, vocab, generator=gen) < 0.5)).float()
    return x / x.sum(1, keepdim=True).clamp_min(1)


def test_the_round_summary_equals_a_plain_per_row_reference_with_ties():
    """Rows with many ties (values on a coarse grid, some zero), g 0 to 3, every n_accepted: the
    kept ids (tie rule above), their values exactly, and every sum within its float64 bound."""
    gen = torch.Generator().manual_seed(0)
    vocab, n = 40, 5
    # Each float64 sum adds `vocab` non-negative float32 values: its error against an exact fsum
    # is at most (vocab - 1) * eps64 * the sum (each addition rounds once); the values are <= 1.
    bound = (vocab - 1) * np.finfo(np.float64).eps
    for trial in range(40):
        g = trial % 4
        p, q, drawn = _grid(gen, g + 1, vocab), _grid(gen, g, vocab), _grid(gen, 1, vocab)[0]
        drafts = torch.randint(0, vocab, (g,), generator=gen)
        n_acc, end = trial % (g + 1), int(torch.randint(0, vocab, (1,), generator=gen))
        flat = round_summary(p, q, drafts, drawn, torch.tensor(n_acc), torch.tensor(end), n).numpy()
        rows, end_row = parse(flat, g, vocab, n)
        for i in range(g):
            kept = sorted(set(_top(p[i], n)) | set(_top(q[i], n)) | {int(drafts[i])},
                          key=lambda t: (-float(p[i, t]), -float(q[i, t]), t))
            (ids, pv, qv), = order_kept(rows.cand[i:i + 1], rows.valid[i:i + 1], [v[i:i + 1] for v in rows.values])
            assert ids == kept and pv == p[i, kept].tolist() and qv == q[i, kept].tolist()
            want = [*_tails(p[i], p[i], q[i], kept), *_tails(q[i], p[i], q[i], kept),
                    math.fsum(torch.minimum(p[i], q[i]).tolist())]
            got = [*rows.tails[0][i], *rows.tails[1][i], rows.sums[0][i]]
            assert all(abs(a - b) <= bound for a, b in zip(got, want)), (trial, i, got, want)
        q_end = q[n_acc] if n_acc < g else torch.zeros(vocab)
        kept = sorted(set(_top(drawn, n)) | set(_top(p[n_acc], n)) | {end},
                      key=lambda t: (-float(drawn[t]), -float(p[n_acc, t]), t))
        (ids, dv, pv, qv), = order_kept(end_row.cand, end_row.valid, end_row.values)
        assert ids == kept and qv == q_end[kept].tolist()
        residual = math.fsum(max(0.0, a - b) for a, b in zip(p[n_acc].tolist(), q_end.tolist()))
        assert abs(end_row.sums[0][0] - residual) <= bound
        assert abs(end_row.tails[0][0][0] - _tails(drawn, p[n_acc], q_end, kept)[0]) <= bound


def test_the_reference_catches_a_wrong_tie_rule():
    """Negative control: the reference above would fail a summary that broke ties by the higher id."""
    x = torch.tensor([0.25, 0.25, 0.25, 0.25])
    assert _top(x, 2) == [0, 1] and _top(x, 2, low_first=False) == [3, 2]
    flat = round_summary(x[None], x[None][:0], torch.zeros(0, dtype=torch.long), x, torch.tensor(0),
                         torch.tensor(3), 2).numpy()
    _, end_row = parse(flat, 0, 4, 2)
    (ids, *_), = order_kept(end_row.cand, end_row.valid, end_row.values)
    assert ids == [0, 1, 3]   # the top 2 by the lower id, and the drawn token
    assert ids != sorted({*_top(x, 2, low_first=False), 3})


def test_top_ids_follow_the_tie_rule_at_float32_s_finest_differences():
    """top_ids (topk on a tie-free key) against a stable descending sort, on rows built to break a
    careless key: runs of equal values, zeros, neighbouring float32 values (one ulp apart) at the
    top, at the cut and in the subnormals, and vocabularies up to Qwen's 151,936 ids."""
    gen = torch.Generator().manual_seed(3)
    for vocab in (5, 2048, 49152, 151936):
        x = _grid(gen, 4, vocab)
        top = float(x[1].max())
        x[1, -40:] = top                                              # ties at the top, high ids
        x[1, :3] = torch.nextafter(torch.tensor(top), torch.tensor(0.0))   # one ulp below, low ids
        tiny = torch.tensor(2.0 ** -149)                              # float32's smallest subnormal
        x[2, :] = 0
        x[2, -3:] = tiny
        x[2, :2] = torch.nextafter(tiny, torch.tensor(1.0))
        x[3, :] = 0                                                   # a row of zeros: ids only
        for k in sorted({1, min(20, vocab), min(41, vocab)}):
            want = torch.sort(x, dim=1, descending=True, stable=True).indices[:, :k]
            assert torch.equal(top_ids(x, k), want), (vocab, k)


def test_top_ids_negative_control_a_key_with_too_coarse_an_id_term_breaks_the_tie_rule():
    """The key's id term must stay under float32's finest step: at s = 20 (where top_ids takes 36
    for 2,048 ids) it pushes high-id top values below low-id values one ulp under them, and the
    row of the test above would fail."""
    x = torch.zeros(1, 2048)
    x[0, -40:] = 0.5
    x[0, :3] = torch.nextafter(torch.tensor(0.5), torch.tensor(0.0))
    want = torch.sort(x, dim=1, descending=True, stable=True).indices[:, :20]
    assert torch.equal(torch.sort(tie_free_key(x, 36), dim=1, descending=True).indices[:, :20], want)
    assert not torch.equal(torch.sort(tie_free_key(x, 20), dim=1, descending=True).indices[:, :20], want)


def _one_hot_round(gen: torch.Generator, g: int, vocab: int, hot_low: bool) -> tuple:
    """A greedy round's rows: p, q and the end row one-hot (`hot_low`: the hot ids among the lowest
    few, where the zeros' top ids are), accepted drafts equal to p's, a rejection's end row p's."""
    def one_hot(k, high):
        return torch.nn.functional.one_hot(torch.randint(0, high, (k,), generator=gen), vocab).float()

    high = 3 if hot_low else vocab
    p, q = one_hot(g + 1, high), one_hot(g, high)
    n_accepted = int(torch.randint(0, g + 1, (1,), generator=gen))
    q[:n_accepted] = p[:n_accepted]
    end = p[n_accepted].clone()
    drafts = q.argmax(1) if g else torch.zeros(0, dtype=torch.long)
    return p, q, drafts, end, torch.tensor(n_accepted), end.argmax()


def test_the_eager_summary_of_greedy_rows_equals_the_full_one_bit_for_bit():
    """`round_summary_here` reduces one-hot rows on the few columns that can matter; its summary
    must be `round_summary`'s to the bit (ids, flags, values, every float64 sum), with and without a
    vocabulary subset, hot ids anywhere or among the lowest ids, g 0 to 5; rows that are not
    one-hot (dense, or two nonzeros in a row) take the full reduction."""
    from specdec.trace.reduction import SPARSE_FROM, _one_nonzero_each, round_summary_here

    gen = torch.Generator().manual_seed(3)
    vocab, n = SPARSE_FROM + 904, 20
    for trial in range(48):
        g = trial % 6
        rows = _one_hot_round(gen, g, vocab, hot_low=trial % 4 == 1)
        outside = None if trial % 3 == 0 else (torch.rand(vocab, generator=gen) < 0.5).float()
        full, here = round_summary(*rows, n, outside), round_summary_here(*rows, n, outside)
        assert torch.equal(full.view(torch.int64), here.view(torch.int64)), trial
    p, q, drafts, end, at, token = _one_hot_round(gen, 3, vocab, hot_low=False)
    q[1, 7] = 1e-30   # a second nonzero, too small to move a float32 sum: still not one-hot
    assert not _one_nonzero_each(q) and _one_nonzero_each(p)
    args = (p, q, drafts, end, at, token, n)
    assert torch.equal(round_summary_here(*args), round_summary(*args))
    dense = torch.softmax(torch.randn(4, vocab, generator=gen), 1)
    assert not _one_nonzero_each(dense)


def test_the_eager_summary_negative_control_columns_without_the_lowest_ids_give_other_top_ids():
    """The kept columns must hold the lowest ids (a one-hot row's other top ids are zeros, by id):
    without them the reduced summary's candidate ids differ from the full one's."""
    from specdec.trace import reduction

    gen = torch.Generator().manual_seed(4)
    rows = _one_hot_round(gen, 2, reduction.SPARSE_FROM + 904, hot_low=False)
    full = reduction.round_summary(*rows, 20)
    keep = reduction._columns
    try:
        reduction._columns = lambda hot, drafts, token, k, vocab: torch.unique(
            torch.cat([hot, drafts.reshape(-1), token.reshape(1), torch.arange(vocab - k - 8, vocab)]))
        here = reduction.round_summary_here(*rows, 20)
    finally:
        reduction._columns = keep
    assert not torch.equal(full, here)
