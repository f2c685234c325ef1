"""Writing a run's results: requests and steps tables, summary.json, report.html."""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim.results.report import write_report


def _clean(v):
    """JSON has no NaN or infinity: write null."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_results(result, out_dir: str | Path, fmt: str = "parquet") -> dict[str, Path]:
    """Write everything a run produced into ``out_dir``; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, frame in (("requests", result.requests), ("steps", result.steps)):
        path = out / f"{name}.{fmt}"
        if fmt == "parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        paths[name] = path
    summary = {
        "scenario": result.scenario.name,
        "mode": result.mode,
        "loop": result.loop,  # which simulation loop ran it (identical results either way)
        "wall_s": result.wall_s,
        "summary": _clean(result.summary),
        "warnings": result.warnings,
        "config": result.scenario.model_dump(mode="json", exclude={"base_dir"}),
    }
    paths["summary"] = out / "summary.json"
    paths["summary"].write_text(json.dumps(summary, indent=2))
    paths["report"] = write_report(result, out / "report.html")
    return paths
