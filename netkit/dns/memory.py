"""The C allocator's side of `netkit dns`'s memory (glibc only; elsewhere these do nothing).

- `limit_arenas()`: one malloc arena per two cores at most, instead of up to eight per core. The view
  is built on worker threads, and each thread that allocates gets an arena of its own; what a build
  leaves free in a thread's arena is not reused by the event loop's thread, so it stays resident.
- `trim()`: hand the heap's free pages back to the kernel (`malloc_trim(0)`), after a list or a view
  swap has dropped its garbage, so the resident size follows what is held, not what was held once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # mallopt's parameter number (glibc malloc.h)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()


def limit_arenas() -> None:
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, max(1, (os.cpu_count() or 2) // 2))


def trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
