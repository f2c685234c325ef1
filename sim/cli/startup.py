"""Start-up without the cyclic garbage collector's passes over what imports leave behind.

Importing numpy, pandas, pyarrow, numba and pydantic allocates a few hundred thousand objects
that live as long as the process; each collection pass walks them all and frees nothing. On a
small run that was a third of its CPU. A command collects nothing until its imports are done
(``quiet``), then ``settle`` freezes what they left out of the collector's sight (once per
process) and turns it back on: every collection after that walks only the run's own objects.
"""

from __future__ import annotations

import gc

_frozen = False


def quiet() -> None:
    gc.disable()


def settle() -> None:
    global _frozen
    if not gc.isenabled():
        if not _frozen:
            gc.freeze()
            _frozen = True
        gc.enable()
