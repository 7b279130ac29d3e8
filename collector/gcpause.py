"""Pausing the cyclic garbage collector around bulk work on plain JSON data."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    # Parsed or generated API objects are acyclic, but hundreds of thousands of dicts make the
    # cyclic GC rescan a growing heap again and again: pausing it takes about half off a big
    # read or generation. The few cycles made meanwhile are collected once it is back on.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
