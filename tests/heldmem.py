"""Memory a process still holds: what its allocators have handed out and not had back.

The soak (test_server.py) asks its server for this after each run's garbage collection. Resident
size (RSS) is the wrong signal for a leak there: glibc keeps freed chunks it cannot give back
whole (fragmentation). Over a 120-run soak of the bundled pair, RSS rose 0.11 MB a run while
malloc's bytes in use rose 0.007 MB a run after a one-time step, and the arenas' free space grew
from 14.7 to 22.7 MB. A leak keeps its bytes allocated, so it shows here at full size.

Two allocators hand out a CPython process's memory, and both are counted:
- glibc's malloc (mallinfo2: bytes in use in its arenas, plus its mmapped chunks): C extensions,
  torch's and numpy's buffers, and Python objects over 512 bytes;
- pymalloc, CPython's allocator for smaller objects, which takes its arenas with mmap, outside
  malloc's count: `sys._debugmallocstats()` prints its "bytes in allocated blocks".

`held_mb()` is None where either cannot be read (another libc, glibc older than 2.33, a Python
without pymalloc): callers then fall back to RSS.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back (None off glibc 2.33+)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def pymalloc_in_use() -> int | None:
    """Bytes in pymalloc's allocated blocks, read from `sys._debugmallocstats()` (it writes to the C
    stderr, so fd 2 is pointed at a file for the call). None where it prints no such line."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else None


def held_mb() -> float | None:
    """malloc's bytes in use plus pymalloc's, in MB; None if either cannot be read here."""
    malloc, small = malloc_in_use(), pymalloc_in_use()
    return None if malloc is None or small is None else (malloc + small) / 2 ** 20
