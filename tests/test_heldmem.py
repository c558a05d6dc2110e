"""The soak's leak probe (tests/heldmem.py) sees kept memory from both of CPython's allocators at
its full size, and sees freed memory go: what the soak's leak bar relies on."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from heldmem import held_mb, malloc_in_use, pymalloc_in_use

if held_mb() is None:
    pytest.skip("no allocator counts here (not glibc 2.33+, or no pymalloc): the soak falls back to RSS",
                allow_module_level=True)

MB = 2 ** 20


def _reading() -> tuple[int, int]:
    gc.collect()
    return malloc_in_use(), pymalloc_in_use()


def _small_strings(n: int) -> list[str]:
    return [f"{i:08d}" * 5 for i in range(n)]   # 40 characters: 89 bytes each, pymalloc's


def test_kept_memory_shows_at_its_size_in_both_allocators():
    """A kept 8 MB array (malloc) and 60,000 small strings (pymalloc, ~5 MB) raise the held bytes
    by their own size: within 3 % plus 0.2 MB of what nbytes and sys.getsizeof say, each small
    object rounded up to pymalloc's 16-byte blocks (the test's own bookkeeping allocates a little); after `del`,
    the held bytes come back within the same margin."""
    before = _reading()
    array = np.ones(8 * MB // 8)
    strings = _small_strings(60_000)
    after = _reading()
    want_malloc = array.nbytes + sys.getsizeof(strings)
    want_small = sum(-(-sys.getsizeof(s) // 16) * 16 for s in strings)
    got_malloc, got_small = after[0] - before[0], after[1] - before[1]
    assert abs(got_malloc - want_malloc) <= 0.03 * want_malloc + 0.2 * MB, (got_malloc, want_malloc)
    assert abs(got_small - want_small) <= 0.03 * want_small + 0.2 * MB, (got_small, want_small)
    del array, strings
    back = _reading()
    assert abs(back[0] - before[0]) <= 0.2 * MB and abs(back[1] - before[1]) <= 0.2 * MB, (before, back)


def test_negative_control_malloc_alone_misses_small_objects():
    """Why pymalloc is counted too: a leak of small Python objects (~5 MB of strings) moves
    malloc's count by less than a tenth of its size, the strings' list alone."""
    before = malloc_in_use()
    strings = _small_strings(60_000)
    gc.collect()
    grew = malloc_in_use() - before
    size = sum(sys.getsizeof(s) for s in strings)
    assert grew < 0.1 * size, (grew, size)
    del strings
