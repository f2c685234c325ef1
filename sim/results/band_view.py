"""A run's error band (``sim.pricing.trust``) as summary.json holds it and as the summary's
table shows it, in the terminal and in report.html alike. A run that was measured (on the
engine or an endpoint) predicts nothing: it says so instead."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.pricing.trust import ErrorBand

TITLE = "Error band: how far to trust these figures"
NOTE = ("Roofline pricing: the median |error| of the held-out published measurements nearest to this run "
        "(benchmarks/published/, never fitted on), a typical error and not a bound: half of those cases were "
        "off by more. A profile: the errors its last servesim validate measured. "
        "README, \"Accuracy against published measurements\".")


def run_band(result, cost=None) -> ErrorBand:
    # Imported here: sim.pricing loads the compiled core, which a first run must not wait for
    # before it chooses to run as Python (sim/cli/prebuild.py); this module is imported before that.
    from sim.pricing.trust import ErrorBand, error_band

    if result.mode != "simulate":
        return ErrorBand("measured", {}, [f"not predicted but measured (mode: {result.mode}): no model error to state"])
    return error_band(result.scenario, cost)


def band_json(result, cost=None) -> dict:
    """summary.json's ``error_band``: per metric the ± figure (``error``), the cases it stands on,
    and the basis in words."""
    return run_band(result, cost).to_json()


def band_table(result, cost=None) -> tuple[str, list[list[str]], list[str], str]:
    """(title, rows, headers, note) of the summary's error band table (a ``summary_view.Block``)."""
    from sim.pricing.trust import LABELS

    band = run_band(result, cost)
    rows = [[f"error of {LABELS[m]}", f"not validated: {b.basis}" if b.error is None else f"±{b.error:.0%}: {b.basis}"]
            for m, b in band.bands.items()]
    rows += [["note", n] for n in band.notes]
    return TITLE, rows, [], NOTE
