"""Values built once for everyone who asks for the same one, at the same time or later.

A class on one link asks for the same views and encodings thirty times within a few milliseconds.
A cache that is only checked before building lets all thirty miss and build (py-spy on this 2-core
machine, 30 identical requests: the shared final view built concurrently by the riders held 16 % of
the server's samples). Here the first asker builds and the others wait for its value.

Entries are keyed by (an owner object, a key): a hit needs the same owner object (not a new one at a
reused id; the owner is held by a weak reference, so the table keeps no figure or run alive that its
value does not hold), and the table keeps the last `size` entries.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable


class _Entry:
    def __init__(self, owner):
        self.owner, self.done, self.value, self.failed = weakref.ref(owner), threading.Event(), None, False


class Once:
    """A bounded table of values, each built by its first asker."""

    def __init__(self, size: int):
        self.size = size
        self._table: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, owner, key, build: Callable[[], object]):
        """The value for (owner, key): built now by `build()`, or the one built (or being built)
        for an earlier asker. A failed build is not kept: each waiter then builds its own."""
        full = (id(owner), key)
        with self._lock:
            entry = self._table.get(full)
            mine = entry is None or entry.owner() is not owner or (entry.done.is_set() and entry.failed)
            if mine:
                entry = self._table[full] = _Entry(owner)
                while len(self._table) > self.size:
                    self._table.popitem(last=False)
            else:
                self._table.move_to_end(full)
        if not mine:
            entry.done.wait()
            return entry.value if not entry.failed else build()
        try:
            entry.value = build()
        except BaseException:
            entry.failed = True
            raise
        finally:
            entry.done.set()
        return entry.value

    def __len__(self) -> int:
        return len(self._table)
