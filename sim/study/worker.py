"""One run, in whatever process executes it: never raises, a failure becomes a record."""

from __future__ import annotations

import time
import traceback

from sim.results.jsonsafe import json_safe as _clean
from sim.study.plan import RunSpec


def execute_run(spec: RunSpec) -> dict:
    """Simulate one configuration; returns the run's record (``requests`` only if asked)."""
    wall = time.perf_counter()
    try:
        from sim.loops.run import simulate
        from sim.scenario.load import scenario_from_dict

        scenario = scenario_from_dict(spec.data, spec.source, spec.base_dir)
        result = simulate(scenario)
    except Exception as e:  # a broken run is recorded; the study goes on
        return {"key": spec.key, "status": "error", "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(limit=-3), "summary": {},
                "warnings": [], "wall_s": time.perf_counter() - wall}
    record = {"key": spec.key, "status": "ok", "error": None,
              "summary": {k: _clean(v) for k, v in result.summary.items()},
              "warnings": list(result.warnings), "wall_s": time.perf_counter() - wall}
    if spec.keep_requests:  # compare draws them, with the inter-token gaps' histogram
        record["requests"] = result.requests
        record["itl"] = result.itl
    return record
