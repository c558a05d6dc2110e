"""One formula for every numeric tolerance in the tests: the rounding a computation can make,
from its dtype and its amount of work. Never a bare 1e-6.

A sum (or a chain of operations) of n terms in floating point with unit roundoff u = eps / 2 is
off by at most (n - 1) u times the sum of the terms' magnitudes (Higham, Accuracy and Stability
of Numerical Algorithms, 2nd ed., section 4.2): that worst case is far too loose to catch a
mistake on long rows. If the rounding errors are independent and of mean zero, the error is at
most lambda sqrt(n) u with probability at least 1 - 2n exp(-lambda^2 / 2) (Higham & Mary,
"A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41, 2019).

`rounding(n)` takes lambda = 8, that is 4 eps sqrt(n) times the scale: a correct float32
computation over a 2,048-term row exceeds it with probability below 2 * 2048 * exp(-32), about
5e-11. A wrong formula (a dropped term, a biased rule, float16 instead of float32) misses by far
more, and each test that uses a bound pairs it with a negative control that must fail it.

`display(decimals, n)`: n numbers each rounded to `decimals` places for display add up to within
n half-units of the last place of their exact total, plus the float64 rounding of the sum.
"""

from __future__ import annotations

import math

import numpy as np

LAMBDA = 8.0   # in units of u = eps / 2: 4 eps sqrt(n)


def eps(dtype="float32") -> float:
    """Machine epsilon of a numpy or torch dtype (or its name): 2^-23 for float32, 2^-52 for float64."""
    name = str(dtype).replace("torch.", "")
    return float(np.finfo(np.dtype(name)).eps)


def rounding(n: int, dtype="float32", scale: float = 1.0) -> float:
    """Bound on the rounding error of a computation over n terms in `dtype` whose magnitudes add
    up to `scale`: LAMBDA * (eps / 2) * sqrt(n) * scale = 4 eps sqrt(n) scale."""
    return LAMBDA * eps(dtype) / 2 * math.sqrt(max(int(n), 1)) * scale


def display(decimals: int, n: int) -> float:
    """Bound on how far the sum of n values, each rounded to `decimals` places, is from the sum of
    the values: n * 0.5 * 10^-decimals, plus the float64 rounding of the sum itself."""
    return n * 0.5 * 10.0 ** -decimals + rounding(n, "float64")
