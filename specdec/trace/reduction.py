"""A round's p and q rows reduced to what the trace keeps, in torch, on the rows' own device.

The trace keeps, per row, a few ids (the top of two distributions and one extra token) with their
values, and full-row sums: the tail split by the sign of p - q, the row's total, beta and the skip
bias (drafted positions) or the residual's mass (the end position). `round_summary` computes all
of them where the rows are, with no host read and shapes fixed by (gamma, vocabulary), so the
engine runs it inside a captured verify step and copies only this summary (O(gamma x TOP_N), not
O(gamma x V)) in the round's one copy. The eager decoder calls the same function on its CPU rows,
so both paths record a Round from the same numbers by construction.

Tie rule for "top n": by value, then the lower id (what a stable descending sort gives), on every
device. `top_ids` gets it from `torch.topk` on a key without ties, not from a sort: a stable sort of
a row is O(V log V), over ten times a topk on the key at these vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# Columns per row: ids and valid flags (C each), values (C per distribution), then per
# distribution (tail where p >= q, tail where p < q, total), then the row's extra sums.
DRAFTED = 2, 4    # distributions (p, q); extra sums (beta, skip_tv, p's mass where q is 0, p's mass
                  # outside the drafter's vocabulary: NO_SUBSET when its q reads every id)
NO_SUBSET = -1.0
END = 3, 1        # distributions (drawn, p, q); extra sum (residual mass)


def candidates(vocab: int, n: int) -> int:
    """Candidate ids per row: the top n of two distributions and one extra token."""
    return 2 * min(n, vocab) + 1


def top_ids(x: torch.Tensor, k: int) -> torch.Tensor:
    """[R, k] ids of each row's k largest values of x ([R, V], values >= 0), by the tie rule.

    The key is x * (1 - id * 2^-s) in float64, with s = 25 + ceil(log2 V) (at most 51): distinct
    float32 values differ by a factor of at least 1 + 2^-24, and the key moves each by less than
    2^-25, so their order stands; equal values are separated by at least 2^-51 relative, two
    float64 roundings' worth, so the lower id comes first. Zeros get -(id + 1) * 2^-900 instead:
    below every positive key (the smallest float32 is 2^-149) and ordered by id, and far below half
    an ulp of any positive key, so adding it to all entries leaves those unchanged. Shapes depend
    on (R, V, k) only, so a captured graph can run it.
    """
    v = x.shape[1]
    s = 25 + max(1, (v - 1).bit_length())
    if s > 51:
        raise ValueError(f"top_ids: a vocabulary of {v} exceeds 2^26 ids")
    return torch.topk(tie_free_key(x, s), k, dim=1).indices


def tie_free_key(x: torch.Tensor, s: int) -> torch.Tensor:
    """x * (1 - id * 2^-s) - (id + 1) * 2^-900, in float64 (see `top_ids` for why s matters)."""
    ids = torch.arange(x.shape[1], device=x.device, dtype=torch.float64)
    return x.double().mul_(ids.mul(-(2.0 ** -s)).add_(1)).add_(ids.add(1).mul_(-(2.0 ** -900)))


def _summarize(rows: list[torch.Tensor], p: torch.Tensor, q: torch.Tensor, extra: torch.Tensor,
               n: int) -> torch.Tensor:
    """[R, W] float64 for rows [R, V]: candidates from rows[0] and rows[1], ordered by the tie rule."""
    k = min(n, p.shape[1])
    tops = [top_ids(x, k) for x in rows[:2]]
    extra = extra.reshape(-1, 1).long()
    cand = torch.cat([*tops, extra], 1)
    # A token is a candidate only with mass there; the extra token always is.
    valid = torch.cat([rows[0].gather(1, tops[0]) > 0, rows[1].gather(1, tops[1]) > 0,
                       torch.ones_like(extra, dtype=torch.bool)], 1)
    kept = torch.zeros_like(p, dtype=torch.bool).scatter_(1, torch.where(valid, cand, extra), True)
    ge, lt = (p >= q) & ~kept, (p < q) & ~kept
    cols = [cand.double(), valid.double(), *(x.gather(1, cand).double() for x in rows)]
    for x in rows:   # a 0/1 mask times float32 is exact; the sums are float64
        cols += [(x * ge).sum(1, keepdim=True, dtype=torch.float64),
                 (x * lt).sum(1, keepdim=True, dtype=torch.float64), x.sum(1, keepdim=True, dtype=torch.float64)]
    return torch.cat(cols, 1)


def round_summary(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, end_dist: torch.Tensor,
                  n_accepted: torch.Tensor, end_token: torch.Tensor, n: int,
                  outside: torch.Tensor | None = None) -> torch.Tensor:
    """The flat float64 summary of one round: g drafted rows then the end row.

    p: [g + 1, V] float32; q: [g, V]; drafts: [g]; end_dist: [V] (what the last token was drawn
    from); n_accepted, end_token: 0-d device tensors (no host read: usable inside a graph);
    outside: [V], 1 at the ids outside a drafter's vocabulary subset, 0 inside (None: q reads all).
    """
    g = q.shape[0]
    parts = []
    if g:
        pd = p[:g]
        overlap = torch.minimum(pd, q)                                   # exact in float32
        beta = overlap.sum(1, keepdim=True, dtype=torch.float64)
        # Bias of the skip rule here, in closed form: TV(min(p,q) + (1-beta) p, p).
        skip_tv = 0.5 * (overlap.double() - beta * pd.double()).abs().sum(1, keepdim=True)
        # p where q is 0: no draft can be those tokens, only the residual gives them (outside a
        # drafter's vocabulary subset, or cut by top-k / top-p).
        unreachable = (pd * (q == 0)).sum(1, keepdim=True, dtype=torch.float64)
        # p outside the drafter's vocabulary alone: where q is 0 also holds what sampling cut (at
        # temperature 0 every id but the draft), which is not the vocabulary's doing.
        if outside is None:
            beyond = torch.full_like(beta, NO_SUBSET)
        else:
            beyond = (pd * outside.to(pd.dtype)).sum(1, keepdim=True, dtype=torch.float64)
        parts.append(torch.cat([_summarize([pd, q], pd, q, drafts, n), beta, skip_tv, unreachable, beyond],
                               1).reshape(-1))
    at = n_accepted.reshape(1).long()
    p_end = p.index_select(0, at)
    if g:   # q at the end position exists only where a draft was rejected there
        q_end = q.index_select(0, at.clamp(max=g - 1)) * (at < g).to(q.dtype).reshape(1, 1)
    else:
        q_end = torch.zeros_like(p_end)
    residual = (p_end.double() - q_end.double()).clamp(min=0).sum(1, keepdim=True)
    drawn = end_dist.reshape(1, -1).to(p.dtype)
    parts.append(torch.cat([_summarize([drawn, p_end, q_end], p_end, q_end, end_token, n), residual], 1).reshape(-1))
    return torch.cat(parts)


def round_summary_here(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, end_dist: torch.Tensor,
                       n_accepted: torch.Tensor, end_token: torch.Tensor, n: int,
                       outside: torch.Tensor | None = None) -> torch.Tensor:
    """`round_summary` for the eager decoder, the same numbers bit for bit, faster where every row
    holds at most one nonzero (greedy: p, q and the end row one-hot; an empty q row).

    Then it runs on the columns that can matter (`_columns`): a summed term is nonzero only at a
    row's nonzero, so each sum adds at most two nonzero terms and does not depend on the order or
    the zeros around them; the top ids are a row's nonzero, then zeros by the lowest id, all among
    the kept columns; and the candidate ids are mapped back. On a CPU at a real vocabulary (49,152
    ids) a greedy round's summary took ~4.5 ms of a ~60 ms round. It reads the host (a count of
    nonzeros), so it is never used inside a captured graph; on a GPU it is `round_summary`."""
    args = (p, q, drafts, end_dist, n_accepted, end_token, n)
    vocab = p.shape[1]
    rows = [x for x in (p, q, end_dist.reshape(1, -1)) if x.shape[0]]
    if p.device.type != "cpu" or vocab < SPARSE_FROM or not all(map(_one_nonzero_each, rows)):
        return round_summary(*args, outside)
    hot = torch.from_numpy(np.concatenate([x.contiguous().numpy().argmax(1) for x in rows]))
    cols = _columns(hot, drafts, end_token, min(n, vocab), vocab)
    at = torch.searchsorted(cols, torch.stack([*drafts.reshape(-1), end_token.reshape(())]))
    flat = round_summary(p[:, cols], q[:, cols], at[:-1], end_dist[cols], n_accepted, at[-1], n,
                         None if outside is None else outside[cols])
    return _ids_back(flat, cols, q.shape[0], len(cols), n)


SPARSE_FROM = 4096   # below this vocabulary the whole rows are cheap enough


def _one_nonzero_each(x: torch.Tensor) -> bool:
    """Whether each row of a float32 CPU tensor holds exactly one nonzero, and it is positive. Read
    as int32, a float is nonzero bits unless it is +0.0 (-0.0 and NaN count too: never a false yes);
    numpy counts those and finds a row's largest many times faster than torch here."""
    if x.dtype != torch.float32:
        return False
    a = x.contiguous().numpy()
    return bool((a.max(1) > 0).all()) and np.count_nonzero(a.view(np.int32)) == a.shape[0]


def _columns(hot: torch.Tensor, drafts: torch.Tensor, end_token: torch.Tensor, k: int, vocab: int) -> torch.Tensor:
    """Sorted ids: every row's nonzero (`hot`), the drafts and the end token, and the lowest ids,
    enough that each row's top k (its nonzero, then zeros by id) lies among them."""
    low = torch.arange(min(vocab, k + hot.numel() + drafts.numel() + 1))
    return torch.unique(torch.cat([hot, drafts.reshape(-1), end_token.reshape(1), low]))


def _ids_back(flat: torch.Tensor, cols: torch.Tensor, g: int, width: int, n: int) -> torch.Tensor:
    """`flat` (a summary over `width` kept columns) with its candidate ids as the vocabulary's."""
    c = candidates(width, n)
    cut = g * _width(c, *DRAFTED)
    ids = cols.double()
    out = []
    for part, rows in ((flat[:cut], g), (flat[cut:], 1)):
        if rows:
            m = part.reshape(rows, -1).clone()
            m[:, :c] = ids[m[:, :c].long()]
            out.append(m.reshape(-1))
    return torch.cat(out)


def summary_size(g: int, vocab: int, n: int) -> int:
    """Numbers in a round's summary: independent of the vocabulary once it exceeds n."""
    c = candidates(vocab, n)
    return g * _width(c, *DRAFTED) + _width(c, *END)


def _width(c: int, d: int, e: int) -> int:
    """Columns of one summarized row: c candidates, d distributions, e extra sums."""
    return (2 + d) * c + 3 * d + e


@dataclass
class Rows:
    """Summarized rows on the host (numpy): candidate ids, valid flags, the values of each
    distribution at them, each distribution's tail parts and total, and the extra sums."""

    cand: np.ndarray                     # [R, C] int64
    valid: np.ndarray                    # [R, C] bool
    values: list[np.ndarray]             # per distribution, [R, C] float64 (float32 values)
    tails: list[list[tuple[float, float]]]   # per distribution, per row: (p >= q part, p < q part)
    totals: list[list[float]]            # per distribution, per row
    sums: list[list[float]]              # per extra sum, per row

    @classmethod
    def parse(cls, flat: np.ndarray, rows: int, c: int, d: int, e: int) -> Rows:
        m = flat.reshape(rows, -1)
        at = (2 + d) * c
        tail = m[:, at:at + 3 * d]
        return cls(m[:, :c].astype(np.int64), m[:, c:2 * c] > 0,
                   [m[:, (2 + i) * c:(3 + i) * c] for i in range(d)],
                   [list(zip(tail[:, 3 * i].tolist(), tail[:, 3 * i + 1].tolist())) for i in range(d)],
                   [tail[:, 3 * i + 2].tolist() for i in range(d)],
                   [m[:, at + 3 * d + j].tolist() for j in range(e)])


def parse(flat: np.ndarray, g: int, vocab: int, n: int) -> tuple[Rows | None, Rows]:
    """A round's summary back into its drafted rows (None when g is 0) and its end row."""
    c = candidates(vocab, n)
    cut = g * _width(c, *DRAFTED)
    drafted = Rows.parse(flat[:cut], g, c, *DRAFTED) if g else None
    return drafted, Rows.parse(flat[cut:], 1, c, *END)
