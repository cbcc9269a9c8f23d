"""The process's heap after a large load: what a long-running bot does once much has been read that
lives as long as it does (the start-up itself, a memory scope's items and vectors)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def settle_after_load() -> None:
    """Hand the load's freed temporaries back to the system and keep what it left out of garbage collection.

    glibc keeps freed blocks for reuse and, once large temporary arrays were freed, raises its mmap
    threshold, so the temporaries of a large load stay resident until asked to trim; where there is no
    glibc the trim is skipped.

    What is alive after the load (modules, the loaded index, caches) stays alive, but every full
    collection of the cyclic garbage collector would walk it again, on the reply path of whichever
    message set it off. Frozen, it is never walked again; objects freed by their reference count are
    still freed. Garbage is collected first, so that none is frozen: that walks only what is not frozen
    yet, all of it once at start-up, and after that what came since the last load.
    """
    gc.collect()
    gc.freeze()
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
