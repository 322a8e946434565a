"""A long-lived process's heap, moved out of the cyclic garbage collector's way once it is built.

The hub freezes it once its capacity inventory is loaded (``hub.capacity``), the user's server
once its event loop runs (``server.app``).
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_once() -> bool:
    """Collect, then move every object alive into the permanent generation, which collections
    skip; the collector stays on for everything allocated later. Once per process: freezing
    again would also freeze whatever the process holds at that moment. True when this call
    froze the heap."""
    global _frozen
    if _frozen:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    return True
