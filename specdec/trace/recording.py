"""Rounds into the trace: sparse rows with exact tail masses, recorded in batches.

What the trace keeps of a round's p and q rows (the top ids of each row with their values, the
tail split by the sign of p - q, beta and the skip bias, the residual's mass) is computed by
`reduction.round_summary`: on the device inside the engine's verify step, or here on the eager
decoder's rows (`round_summary_here`: the same numbers, faster on greedy rows); either way a round
waits as `Pending`, a summary of O(g x TOP_N) numbers on the
host. A run that nobody streams records them in batches; a streamed run records each round as it
ends (the page shows it at once). A batch is also cut at `BATCH_BYTES`, so memory stays bounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.sampling import Rule
from . import spine as tr
from .outcomes import Ending, status_at
from .reduction import Rows, parse, round_summary_here
from .spine import TOP_N, Position, Round, order_kept

BATCH_BYTES = 32 << 20   # summaries kept on the host before a batch is recorded


@dataclass
class Pending:
    """One round's decisions and its summarized rows (`reduction`) on the host, waiting to be recorded."""

    index: int
    start: int
    drafts: list[int]
    summary: np.ndarray    # reduction.round_summary: float64, O(g x TOP_N)
    vocab: int
    u: list[float]
    n_accepted: int
    end_token: int
    emitted: list[int]
    seconds: tuple[float, float]

    @classmethod
    def of(cls, index: int, start: int, step, emitted: list[int], outside: torch.Tensor | None = None) -> Pending:
        """From a decoder `Step`: its summary when the engine made one on the device, else the
        same reduction of its rows here (`outside`: the drafter's vocabulary mask, `round_summary`)."""
        summary = step.summary
        if summary is None:
            v = step.verdict
            dev = step.p.device
            ints = (torch.tensor(x, dtype=torch.long, device=dev)
                    for x in (step.drafts, step.n_accepted, step.end_token))
            summary = round_summary_here(step.p.float(), step.q.float(), next(ints), v.end_dist.float(), *ints, TOP_N,
                                         outside)
        return cls(index, start, list(step.drafts), summary.cpu().numpy(), step.vocab, step.u.tolist(),
                   step.n_accepted, step.end_token, list(emitted), step.seconds)

    @property
    def nbytes(self) -> int:
        return self.summary.nbytes


def record(pending: list[Pending], rule: Rule) -> list[Round]:
    """The Rounds of `pending`, every row of every round in one batch."""
    if not pending:
        return []
    parsed = [parse(r.summary, len(r.drafts), r.vocab, TOP_N) for r in pending]
    positions = _positions(pending, [d for d, _ in parsed])
    ends = _ends(pending, [e for _, e in parsed], rule)
    return [Round(index=r.index, start=r.start, gamma=len(r.drafts), positions=pos, n_accepted=r.n_accepted,
                  ending=Ending.of(len(r.drafts), r.n_accepted < len(r.drafts), rule), end_token=r.end_token,
                  end_dist=end[0], end_p=end[1], end_q=end[2], residual_mass=end[3], emitted=r.emitted,
                  draft_seconds=r.seconds[0], verify_seconds=r.seconds[1])
            for r, pos, end in zip(pending, positions, ends)]


def _positions(pending: list[Pending], rows: list[Rows | None]) -> list[list[Position]]:
    """The drafted positions of every round."""
    out = {}
    for r, d in zip(pending, rows):
        if d is None:
            continue
        kept = order_kept(d.cand, d.valid, d.values)
        (beta, skip_tv, unreachable, beyond), (p_tail, q_tail), (p_mass, q_mass) = d.sums, d.tails, d.totals
        # The draft token is each row's last candidate: its p and q are there.
        p_draft, q_draft = d.values[0][:, -1].tolist(), d.values[1][:, -1].tolist()
        out[r.index] = [Position(draft_token=tok, p_draft=p_draft[i], q_draft=q_draft[i],
                                 ratio=_ratio(p_draft[i], q_draft[i]), u=r.u[i], status=status_at(i, r.n_accepted),
                                 beta=beta[i], p=tr.dist(ids, pv, p_mass[i], p_tail[i]),
                                 q=tr.dist(ids, qv, q_mass[i], q_tail[i]), skip_tv=skip_tv[i],
                                 p_where_q_is_0=min(1.0, unreachable[i]),
                                 p_outside_vocab=None if beyond[i] < 0 else min(1.0, beyond[i]))
                        for i, (tok, (ids, pv, qv)) in enumerate(zip(r.drafts, kept))]
    return [out.get(r.index, []) for r in pending]


def _ratio(p: float, q: float) -> float:
    """p(x) / q(x) as the verdict computes it in float32 (inf where q is 0)."""
    return float(np.float32(p) / np.float32(q)) if q > 0 else math.inf


def _ends(pending: list[Pending], rows: list[Rows], rule: Rule) -> list[tuple]:
    """Each round's end position: (what the last token was drawn from, p there, q there when a
    draft was rejected, the residual's mass when the residual was used)."""
    out = []
    for r, e in zip(pending, rows):
        # Kept ids: the top of the drawn distribution and of p, and the drawn token.
        (ids, dv, pv, qv), = order_kept(e.cand, e.valid, e.values)
        (d_tail, p_tail, q_tail), (total, p_mass, q_mass) = [t[0] for t in e.tails], [t[0] for t in e.totals]
        rejected = r.n_accepted < len(r.drafts)
        mass = e.sums[0][0] if Ending.of(len(r.drafts), rejected, rule) is Ending.RESIDUAL else None
        if rejected:   # the tail split by the sign of p - q, as at a drafted position
            out.append((tr.dist(ids, dv, total, d_tail), tr.dist(ids, pv, p_mass, p_tail),
                        tr.dist(ids, qv, q_mass, q_tail), mass))
        else:
            out.append((tr.dist(ids, dv, total), tr.dist(ids, pv, p_mass), None, mass))
    return out


def mark_outside(rounds: list[Round], inside: frozenset[int]) -> None:
    """Note at every drafted position which of its stored ids lie outside a drafter's vocabulary
    subset (`inside`: the ids its q reads): p's mass there is a sum (`p_outside_vocab`), which
    does not say which of the tokens shown are out of the drafter's reach."""
    for rnd in rounds:
        for pos in rnd.positions:
            pos.outside_ids = [i for i in pos.p.ids if i not in inside]

