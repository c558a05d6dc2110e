"""Rounds into the trace: sparse rows with exact tail masses, recorded in batches.

Recording is the trace's cost in the decoding loop. Its work is a few numpy passes over the p and
q rows (the top ids of each row, the tail split by the sign of p - q, beta and the skip bias) and
the objects of the trace; numpy's cost per call, not per row, dominates for a round's few rows.
So a run that nobody streams keeps its rounds' rows as they come (`Pending`, a copy to the host)
and records them in batches, every row of many rounds in one pass; a streamed run records each
round as it ends (the page shows it at once). A batch is also cut when its rows would hold more
than `BATCH_BYTES` (a large vocabulary), so memory stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import trace as tr
from .outcomes import Ending, status_at
from .sampling import Rule
from .trace import Position, Round

BATCH_BYTES = 32 << 20   # rows kept on the host before a batch is recorded


@dataclass
class Pending:
    """One round's decisions and rows on the host, waiting to be recorded."""

    index: int
    start: int
    drafts: list[int]
    p: np.ndarray          # [g + 1, V] float32
    q: np.ndarray          # [g, V]
    u: list[float]
    p_draft: list[float]
    q_draft: list[float]
    ratio: list[float]
    end_dist: np.ndarray   # [V]
    n_accepted: int
    end_token: int
    emitted: list[int]
    seconds: tuple[float, float]

    @classmethod
    def of(cls, index: int, start: int, step, emitted: list[int]) -> Pending:
        """From a decoder `Step` (its tensors on any device)."""
        v = step.verdict
        return cls(index, start, list(step.drafts), step.p.float().cpu().numpy(), step.q.float().cpu().numpy(),
                   step.u.tolist(), v.p_draft.tolist(), v.q_draft.tolist(), v.ratio.tolist(),
                   v.end_dist.float().cpu().numpy().reshape(-1), step.n_accepted, step.end_token, list(emitted),
                   step.seconds)

    @property
    def nbytes(self) -> int:
        return self.p.nbytes + self.q.nbytes + self.end_dist.nbytes


def record(pending: list[Pending], rule: Rule) -> list[Round]:
    """The Rounds of `pending`, every row of every round in one batch."""
    if not pending:
        return []
    positions = _positions(pending)
    ends = _ends(pending, rule)
    return [Round(index=r.index, start=r.start, gamma=len(r.drafts), positions=pos, n_accepted=r.n_accepted,
                  ending=Ending.of(len(r.drafts), r.n_accepted < len(r.drafts), rule), end_token=r.end_token,
                  end_dist=end[0], end_p=end[1], end_q=end[2], residual_mass=end[3], emitted=r.emitted,
                  draft_seconds=r.seconds[0], verify_seconds=r.seconds[1])
            for r, pos, end in zip(pending, positions, ends)]


def _positions(pending: list[Pending]) -> list[list[Position]]:
    """The drafted positions of every round: all rows at once, then cut back into rounds."""
    drafted = [r for r in pending if r.drafts]
    if not drafted:
        return [[] for _ in pending]
    p = np.concatenate([r.p[:len(r.drafts)] for r in drafted])
    q = np.concatenate([r.q for r in drafted])
    overlap = np.minimum(p, q)                                        # min(p, q), exact in float32
    betas = overlap.sum(1, dtype=np.float64)
    # Bias of the skip rule here, in closed form on the full rows: TV(min(p,q) + (1-beta) p, p).
    skip_tv = (0.5 * np.abs(overlap - betas[:, None] * p).sum(1, dtype=np.float64)).tolist()
    p_mass, q_mass = p.sum(1, dtype=np.float64).tolist(), q.sum(1, dtype=np.float64).tolist()
    kept, mask = tr.keep_top(p, q, np.concatenate([r.drafts for r in drafted]))
    p_tail, q_tail = tr.tail_split([p, q], p, q, mask)
    betas = betas.tolist()
    out, row = {}, 0
    for r in drafted:
        out[r.index] = [Position(draft_token=tok, p_draft=r.p_draft[i], q_draft=r.q_draft[i], ratio=r.ratio[i],
                                 u=r.u[i], status=status_at(i, r.n_accepted), beta=betas[row + i],
                                 p=tr.dist(ids, pv, p_mass[row + i], p_tail[row + i]),
                                 q=tr.dist(ids, qv, q_mass[row + i], q_tail[row + i]), skip_tv=skip_tv[row + i])
                        for i, (tok, (ids, pv, qv)) in enumerate(zip(r.drafts, kept[row:row + len(r.drafts)]))]
        row += len(r.drafts)
    return [out.get(r.index, []) for r in pending]


def _ends(pending: list[Pending], rule: Rule) -> list[tuple]:
    """Each round's end position: (what the last token was drawn from, p there, q there when a
    draft was rejected, the residual's mass when the residual was used)."""
    vocab = pending[0].p.shape[1]
    drawn = np.stack([r.end_dist for r in pending])
    p_end = np.stack([r.p[r.n_accepted] for r in pending])
    # q at the end position exists only where a draft was rejected there.
    q_end = np.stack([r.q[r.n_accepted] if r.n_accepted < len(r.drafts) else np.zeros(vocab, np.float32)
                      for r in pending])
    # Kept ids: the top of the drawn distribution and of p, and the drawn token.
    kept, mask = tr.keep_top(drawn, p_end, np.array([r.end_token for r in pending]))
    d_tail, p_tail, q_tail = tr.tail_split([drawn, p_end, q_end], p_end, q_end, mask)
    totals = drawn.sum(1, dtype=np.float64).tolist()
    p_mass, q_mass = p_end.sum(1, dtype=np.float64).tolist(), q_end.sum(1, dtype=np.float64).tolist()
    residual = np.maximum(p_end.astype(np.float64) - q_end, 0).sum(1).tolist()
    out = []
    for k, (r, (ids, dv, pv)) in enumerate(zip(pending, kept)):
        rejected = r.n_accepted < len(r.drafts)
        mass = residual[k] if Ending.of(len(r.drafts), rejected, rule) is Ending.RESIDUAL else None
        if rejected:   # the tail split by the sign of p - q, as at a drafted position
            out.append((tr.dist(ids, dv, totals[k], d_tail[k]), tr.dist(ids, pv, p_mass[k], p_tail[k]),
                        tr.dist(ids, q_end[k, ids].tolist(), q_mass[k], q_tail[k]), mass))
        else:
            out.append((tr.dist(ids, dv, totals[k]), tr.dist(ids, pv, p_mass[k]), None, mass))
    return out
