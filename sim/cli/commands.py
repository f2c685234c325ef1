"""Registry of CLI commands provided by other packages (engine, calibration, studies).

Each entry is ``module:function`` where the function takes the argparse sub-parsers object.
Modules are imported lazily, so ``servesim run`` never imports torch.
"""

from __future__ import annotations

import importlib

EXTRA = [
    "engine.cli:register",
    "calibration.cli:register",
    "endpoint.cli:register",
    "sim.study.cli:register",
    "sim.study.plan_cli:register",
]


def registered():
    for entry in EXTRA:
        mod, fn = entry.split(":")
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue  # that package is not installed or not written yet
            raise
        yield getattr(module, fn)
