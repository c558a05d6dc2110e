"""What visitors' sessions hold, in bytes, kept under one budget (SPECDEC_SESSION_BYTES).

The session cap (SPECDEC_MAX_SESSIONS) counts visitors, not bytes: a few visitors with long runs
and imported traces could still hold more than a small Space has. Here a session is measured by
what it holds for its visitor, its `gr.State` values (their run or imported trace, the step
viewer's selection, the lab's state) and the values Gradio keeps for what their page shows; when
all sessions together hold more than the budget, the least recently used are released first
(`housekeeping.enforce_budget` does it, after every request that changes a session and in the
housekeeping thread), and each released visitor is told so at their next action (`tell`,
`take_message`). Files are not state: an export stays downloadable until its age.

`size_of` is a real sizer, not an estimate: it walks a value (containers, dataclasses, objects'
attributes, tensors and arrays by their bytes) and adds up `sys.getsizeof`, counting each object
once. A run's rounds never change once decoded, so each `Round`'s size is measured once and kept
(while the round lives): a streamed run, re-stored after every round, costs one new round a time.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections import OrderedDict

from ...trace.spine import Generation, Round
from . import limits

__all__ = ["size_of", "session_bytes", "holds_a_run", "Sizer", "SIZER", "over_budget", "tell", "take_message",
           "released_message", "MB"]

MB = 1_000_000
_NOT_WALKED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               weakref.ref, type(threading.Lock()), type(threading.RLock()))
_ROUNDS: dict[int, tuple[weakref.ref, int]] = {}   # id(round) -> (the round, its size): measured once


def _forget(key: int):
    return lambda _ref: _ROUNDS.pop(key, None)


def _round_size(r: Round) -> int:
    key = id(r)
    hit = _ROUNDS.get(key)
    if hit is not None and hit[0]() is r:
        return hit[1]
    size = _walk(r, set(), rounds=False)
    _ROUNDS[key] = (weakref.ref(r, _forget(key)), size)
    return size


def size_of(value) -> int:
    """Bytes `value` holds: every object reachable from it counted once (types, functions and
    modules are not followed: they are shared by the whole process). Numbers, strings and bytes
    are counted at each place they appear (a repeat costs a pointer: an over-count, never under),
    but for Python's shared ones (small ints, True, False, None)."""
    return _walk(value, set())


_CONTAINERS = frozenset({list, tuple, set, frozenset})
_ATOM_TYPES = frozenset({str, bytes, int, float, complex, bool, type(None)})
_FLOAT = sys.getsizeof(0.0)


def _slots(t: type) -> tuple[str, ...]:
    names = _SLOTS.get(t)
    if names is None:
        names = tuple(n for cls in t.__mro__ for n in getattr(cls, "__slots__", ())
                      if isinstance(n, str) and n not in ("__dict__", "__weakref__"))
        _SLOTS[t] = names
    return names


_SLOTS: dict[type, tuple[str, ...]] = {}


def _other(obj, t: type, stack: list) -> int:
    """An object that is not a container: its own bytes (a tensor's data too: an ndarray's is in
    its getsizeof already); its attributes go on the stack (not a library's array's)."""
    size = sys.getsizeof(obj, 64)
    module = t.__module__
    if module.startswith(("torch", "numpy")):
        nbytes = getattr(obj, "nbytes", None)
        return size + (nbytes if module.startswith("torch") and isinstance(nbytes, int) else 0)
    if isinstance(obj, _NOT_WALKED):
        return size
    attrs = getattr(obj, "__dict__", None)
    if type(attrs) is dict:   # its keys are the attribute names, shared by every instance
        size += sys.getsizeof(attrs)
        stack.extend(attrs.values())
    for name in _slots(t):
        if hasattr(obj, name):
            stack.append(getattr(obj, name))
    return size


def _atom(x, t: type) -> int:
    if t is int:
        return 0 if -5 <= x <= 256 else sys.getsizeof(x)
    return 0 if t is bool or x is None else sys.getsizeof(x)


def _walk(value, seen: set[int], rounds: bool = True, skip: set[int] | frozenset = frozenset()) -> int:
    """Bytes reachable from `value` that are not in `seen` (which it extends) nor in `skip`."""
    getsize, atoms, floats = sys.getsizeof, _ATOM_TYPES, _FLOAT
    total, stack = 0, [value]
    while stack:
        obj = stack.pop()
        t = type(obj)
        if t in atoms:
            total += _atom(obj, t)
            continue
        key = id(obj)
        if key in seen or key in skip:
            continue
        seen.add(key)
        if t in _CONTAINERS or t is dict:
            total += getsize(obj)
            for x in (obj.values() if t is dict else obj):
                tx = type(x)
                if tx is float:
                    total += floats
                elif tx in atoms:
                    total += _atom(x, tx)
                else:
                    stack.append(x)
            if t is dict:
                stack.extend(obj.keys())
        elif rounds and t is Round:
            total += _round_size(obj)
        else:
            total += _other(obj, t, stack)
    return total


# ---------------------------------------------------------------- sessions

def _parts(session):
    """(where, key, value, inner) for what a Gradio session holds for its visitor: its gr.State
    values, and the config it keeps for each component of their page (Gradio updates a config's
    shown value in place: `inner` is that value, so a changed one is measured again)."""
    for key, value in list(getattr(session, "state_data", {}).items()):
        yield "state", key, value, None
    for key, value in list(getattr(session, "config_values", {}).items()):
        props = value.get("props") if isinstance(value, dict) else None
        yield "config", key, value, props.get("value") if isinstance(props, dict) else None


class Sizer:
    """Bytes held by each session of a Gradio state holder. A value is measured when it is new:
    each measured value is kept here (so its id cannot be reused) with its size until the
    session holds another value in its place or is gone. The app's default values, shared by
    every session, are counted in none."""

    def __init__(self):
        self._sizes: dict[str, dict[tuple, tuple]] = {}   # session -> (where, key) -> (value, inner, size)
        self._shared: set[int] | None = None
        self._anchor = None                                 # what the shared ids belong to (kept alive)
        self.lock = threading.Lock()

    def _shared_ids(self, holder) -> set[int]:
        blocks = getattr(getattr(holder, "blocks", None), "default_config", None)
        if self._shared is None or self._anchor is not blocks:
            self._shared, self._anchor = set(), blocks
            for block in list(getattr(blocks, "blocks", {}).values()):
                _walk(getattr(block, "value", None), self._shared)
        return self._shared

    def held(self, holder) -> dict[str, int]:
        """{session hash: bytes} for every session the holder keeps now."""
        shared = self._shared_ids(holder)
        out = {}
        with self.lock:
            sessions = dict(holder.session_data)
            for gone in set(self._sizes) - set(sessions):
                del self._sizes[gone]
            for session_hash, session in sessions.items():
                known = self._sizes.setdefault(session_hash, {})
                fresh, total = {}, 0
                for where, key, value, inner in _parts(session):
                    hit = known.get((where, key))
                    if hit is not None and hit[0] is value and hit[1] is inner:
                        size = hit[2]
                    else:
                        size = _walk(value, set(), skip=shared)
                    fresh[(where, key)] = (value, inner, size)
                    total += size
                self._sizes[session_hash] = fresh
                out[session_hash] = total
        return out

    def forget(self, session_hash: str) -> None:
        with self.lock:
            self._sizes.pop(session_hash, None)


def holds_a_run(session) -> bool:
    """Whether a session holds a run, an imported trace or other state of its visitor's own (more
    than the few bytes of a fresh page's states)."""
    states = list(getattr(session, "state_data", {}).values())
    return any(isinstance(v, Generation) for v in states) or _walk(states, set()) > 4096


def session_bytes(session) -> int:
    """What one Gradio session holds for its visitor (every value measured afresh)."""
    return sum(_walk(value, set()) for _where, _key, value, _inner in _parts(session))


def over_budget(sizes: dict[str, int], last_used: dict[str, float], limit: int | None = None,
                spare=()) -> list[str]:
    """The sessions to release so the rest hold at most `limit` bytes (default
    SPECDEC_SESSION_BYTES): the least recently used first; those in `spare` (the session of the
    request being served, those with a request running) last, and only when the others are not
    enough."""
    limit = limits.SESSION_BYTES if limit is None else limit
    total = sum(sizes.values())
    order = sorted(sizes, key=lambda h: (h in spare, last_used.get(h, 0.0)))
    victims = []
    for session_hash in order:
        if total <= limit:
            break
        if sizes[session_hash] > 0:
            victims.append(session_hash)
            total -= sizes[session_hash]
    return victims


SIZER = Sizer()   # the process's sizes (one app per process)


# ---------------------------------------------------------------- telling the visitor

_TOLD: OrderedDict[str, str] = OrderedDict()   # session hash -> what to tell them at their next action
_TOLD_MAX = 10_000
_TOLD_LOCK = threading.Lock()


def released_message() -> str:
    return (f"To make room for other visitors, the server let go of your run: it keeps at most "
            f"{limits.SESSION_BYTES / MB:,.0f} MB of visitors' runs and imported traces "
            "(SPECDEC_SESSION_BYTES), and yours was the least recently used. Reload the page to run it "
            "again: the link in the address bar reproduces it, at the round you were on (an imported "
            "trace must be imported again). Your exports stay downloadable.")


def tell(session_hash: str, message: str) -> None:
    """Keep a message for a visitor, shown at their next action (`take_message`)."""
    with _TOLD_LOCK:
        _TOLD[session_hash] = message
        _TOLD.move_to_end(session_hash)
        while len(_TOLD) > _TOLD_MAX:
            _TOLD.popitem(last=False)


def take_message(session_hash: str | None) -> str | None:
    """The message kept for this visitor, once (None if there is none)."""
    if not session_hash:
        return None
    with _TOLD_LOCK:
        return _TOLD.pop(session_hash, None)
