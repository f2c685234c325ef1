"""Registry of CLI commands provided by other packages (engine, calibration, studies).

Each entry is ``module:function`` where the function takes the argparse sub-parsers object.
Modules are imported lazily, so ``servesim run`` never imports torch.
"""

from __future__ import annotations

import importlib

EXTRA = [
    "sim.commands_builtin:register",
    "sim.study.cli:register",
]


def registered():
    for entry in EXTRA:
        mod, fn = entry.split(":")
        yield getattr(importlib.import_module(mod), fn)
