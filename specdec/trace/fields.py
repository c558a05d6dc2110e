"""Checking untrusted JSON values field by field: each check returns the value when it is what a
trace holds there, and otherwise raises `Bad` naming the value's place in the file and what was
expected, e.g. `rounds[3].positions[1].p.probs[4] is -0.2: a probability must be a finite number
from 0 to 1`. `specdec.trace.validate` walks a trace with these.
"""

from __future__ import annotations

import json
import math

from ..core.checks import is_whole

PROB_TOL = 1e-5      # a stored probability may exceed [0, 1] by float32 rounding, not more
MAX_TEXT = 100_000   # characters of a free-text field (label, title, note, token text)


class Bad(ValueError):
    pass


def kind_of(x) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true/false value"
    if isinstance(x, (int, float)):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def shown(x) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, str):
        return repr(x if len(x) <= 40 else x[:40] + "…")
    if isinstance(x, (list, dict)):
        return f"a JSON {kind_of(x)}"
    return json.dumps(x) if x is None or isinstance(x, bool) else repr(x)


def fail(where: str, problem: str):
    raise Bad(f"{where} {problem}")


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def whole(x, where: str, lo: int, hi: int, what: str = "a whole number") -> int:
    if not is_whole(x):
        fail(where, f"is {shown(x)}: expected {what} from {lo} to {hi}")
    if not lo <= x <= hi:
        fail(where, f"is {x}: expected {what} from {lo} to {hi}")
    return x


def finite(x, where: str, lo: float = 0.0, hi: float = math.inf, what: str = "a finite number") -> float:
    if not is_number(x) or not math.isfinite(x):
        fail(where, f"is {shown(x)}: expected {what}" + (f" from {lo:g}" if lo > -math.inf else "")
              + (f" to {hi:g}" if hi < math.inf else ""))
    if not lo <= x <= hi:
        fail(where, f"is {x!r}: expected {what}" + (f" from {lo:g}" if lo > -math.inf else "")
              + (f" to {hi:g}" if hi < math.inf else ""))
    return float(x)


def probability(x, where: str) -> float:
    if not is_number(x) or not math.isfinite(x) or not -PROB_TOL <= x <= 1 + PROB_TOL:
        fail(where, f"is {shown(x)}: a probability must be a finite number from 0 to 1")
    return float(x)


def text_field(x, where: str, max_len: int = MAX_TEXT, what: str = "text") -> str:
    if not isinstance(x, str):
        fail(where, f"is {shown(x)}: expected {what}")
    if len(x) > max_len:
        fail(where, f"is {len(x):,} characters long: at most {max_len:,} here")
    return x


def list_field(x, where: str, max_len: int, limit_name: str = "") -> list:
    if not isinstance(x, list):
        fail(where, f"is {shown(x)}: expected a list")
    if len(x) > max_len:
        fail(where, f"has {len(x):,} entries: at most {max_len:,} here" + (f" ({limit_name})" if limit_name else ""))
    return x


def object_field(x, where: str, required: tuple[str, ...], optional: tuple[str, ...] = (), extra_scalars: bool = True
         ) -> dict:
    """A JSON object with these keys. Unknown keys are allowed only as plain values (numbers, text,
    true/false, null): a newer specdec may add a field, but nothing deep hides in one."""
    if not isinstance(x, dict):
        fail(where, f"is {shown(x)}: expected an object")
    for key in required:
        if key not in x:
            fail(where, f"has no {key!r}")
    known = set(required) | set(optional)
    for key, value in x.items():
        if key not in known:
            if not extra_scalars or isinstance(value, (list, dict)):
                fail(f"{where}.{key}", "is not a field of a specdec trace")
            if isinstance(value, str) and len(value) > MAX_TEXT:
                fail(f"{where}.{key}", f"is {len(value):,} characters long: at most {MAX_TEXT:,} here")
    return x


def equal(x, expected: int, where: str, what: str) -> None:
    if not is_whole(x) or x != expected:
        fail(where, f"is {shown(x)}, but it must be {expected}: {what}")


def token_id(x, where: str, vocab: int) -> int:
    if not is_whole(x) or not 0 <= x < vocab:
        fail(where, f"is {shown(x)}: a token id must be a whole number from 0 to {vocab - 1} "
                     f"(the vocabulary has {vocab} tokens)")
    return x


def token_ids(x, where: str, vocab: int, max_len: int, limit_name: str = "") -> list[int]:
    for i, t in enumerate(list_field(x, where, max_len, limit_name)):
        token_id(t, f"{where}[{i}]", vocab)
    return x
