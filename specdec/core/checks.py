"""The one number checker: a value from a form, a link, a command line or a typed setting, as a
number in a range, or a ValueError that names the value and says what to give instead.

Every entry (the app's inputs, the CLI, the bench's options, `RunSettings`, the lab, an imported
trace) checks numbers here, so a whole number, a seed and a range are defined, and worded, once:

    gamma must be a whole number from 1 to 16, got 2.5
    seed is empty: give a whole number from 0 to 4,294,967,295
"""

from __future__ import annotations

import argparse
import math
from numbers import Integral, Real

MAX_SEED = 2**32 - 1   # every run draws from torch's CPU generator, which keeps a seed's low 32 bits only

__all__ = ["MAX_SEED", "is_whole", "number", "whole_number", "seed", "span", "layer_list"]


def is_whole(x) -> bool:
    """An integer value and not a bool (True is an int in Python); numpy integers count."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def _show(x) -> str:
    if is_whole(x) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:g}"


def span(lo=None, hi=None) -> str:
    """' from 1 to 16', ' of at least 1', ' of at most 5' or '' (numbers shown as a person writes them)."""
    if lo is not None and hi is not None:
        return f" from {_show(lo)} to {_show(hi)}"
    if lo is not None:
        return f" of at least {_show(lo)}"
    if hi is not None:
        return f" of at most {_show(hi)}"
    return ""


def number(value, name: str, lo=None, hi=None, *, whole: bool = False, strict: bool = False) -> int | float:
    """`value` as a finite number in [lo, hi] (an int when `whole`), or ValueError naming `name`.

    Text is read as a number ("4", "0.5"); None and blank text are "empty". strict: the value must
    already be a number of the right kind (a typed setting, never text or a float for a whole number).
    """
    kind = "a whole number" if whole else "a number"
    wanted = f"{kind}{span(lo, hi)}"
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} is empty: give {wanted}")
    bad = ValueError(f"{name} must be {wanted}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (Real, str)) or (strict and isinstance(value, str)):
        raise bad
    if is_whole(value):
        x = int(value)
    elif strict and whole:
        raise bad
    else:
        x = _parse(value, bad)
        if whole and isinstance(x, float):
            if not x.is_integer():
                raise bad
            x = int(x)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise bad
    return x


def _parse(value, bad: ValueError) -> float | int:
    if isinstance(value, str):
        try:
            return int(value.strip())       # exact for big whole numbers (a seed in a link)
        except ValueError:
            pass
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if not math.isfinite(x):
        raise bad
    return x


def whole_number(value, name: str, lo: int | None = None, hi: int | None = None, *, strict: bool = False) -> int:
    """`value` as a whole number in [lo, hi], or ValueError naming `name` (see `number`)."""
    return number(value, name, lo, hi, whole=True, strict=strict)


def seed(value, name: str = "seed", *, strict: bool = False) -> int:
    """A seed: a whole number from 0 to MAX_SEED."""
    return whole_number(value, name, 0, MAX_SEED, strict=strict)


def layer_list(text: str) -> tuple[int, ...]:
    """"4,8,12" -> (4, 8, 12): the target layers a features drafter fuses."""
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"layers are whole numbers separated by commas, like 4,8,12; got {text!r}") from None
    if not layers or min(layers) < 1:
        raise argparse.ArgumentTypeError(f"layers count from 1; got {text!r}")
    return layers
