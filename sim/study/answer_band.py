"""The error band (``sim.pricing.trust``) of a study's answer: its configuration's scenario as
the runs simulated it, priced as they were priced."""

from __future__ import annotations

from sim.pricing.trust import ErrorBand, error_band
from sim.scenario.load import scenario_from_dict


def answer_band(run) -> ErrorBand | None:
    """The band of the answer's configuration, or None when the study has no answer."""
    best = run.outcome.best
    if best is None:
        return None
    plan = run.plan
    config = next((c for c in plan.configs if c.label == best.get("config")), None)
    if config is None:
        return None
    return error_band(scenario_from_dict(config.data, f"{plan.source} [{config.label}]", plan.base_dir))


def answer_band_json(run) -> dict | None:
    band = answer_band(run)
    return None if band is None else band.to_json()


def answer_band_text(run) -> str | None:
    """One line for the answer's table: each metric's ± figure (answer.json gives the basis)."""
    band = answer_band(run)
    return None if band is None else f"{band.short()} (answer.json: error_band)"
