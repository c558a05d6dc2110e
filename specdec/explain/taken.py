"""A run's drafted position as the exactness lab takes it: its rows (`lab.from_position`), each
value as the lab's table holds it, and the skip rule's TV a lab run of that table gives.

That TV can be smaller than the trace's `skip_tv` for the same position, never larger: the trace's
is Σ |min(p, q) − β p| / 2 over the model's full rows; the lab's rows lump the rest of the
vocabulary into two, and inside each the sign of min(p, q) − β p changes, so summing first
cancels part of it. β, the residual and the exact rule add up within a row and agree.
"""

from __future__ import annotations

import numpy as np

from ..core.sampling import Rule
from .lab import bias, from_position, validate
from .looks import table_number


def taken_rows(gen, round_index: int, position_index: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, p, q) of a run's position as the lab's table holds them."""
    tokens, p, q = from_position(gen, round_index, position_index)
    return tokens, *(np.array([table_number(float(x)) for x in row]) for row in (p, q))


def lab_skip_tv(gen, round_index: int, position_index: int) -> float | None:
    """The skip rule's closed-form TV a lab run of the taken position gives (its rows normalised as
    the lab normalises them); None where the lab would refuse the rows."""
    try:
        tokens, p, q = taken_rows(gen, round_index, position_index)
        _, p, q, _ = validate(tokens, p, q)
    except ValueError:
        return None
    return bias(p, q, Rule.SKIP_ADJUSTMENT)
