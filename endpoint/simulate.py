"""Simulate the very requests a measured run sent, with an endpoint profile.

Open loop: the simulation's arrivals are the measured send times. Closed loop: the
simulator's own closed loop (each of N users sends its next request, in order, when its
previous one finishes in the simulation). The profile's ``request_overhead_s`` is the core's
(sim/pricing: request_overhead_s): each request reaches the scheduler that long after it is
sent, and its TTFT and E2E carry it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from sim.loops.run import RunResult, simulate
from sim.pricing.profile import Profile, save_profile
from sim.scenario.load import apply_overrides, scenario_from_dict
from sim.scenario.schema import Scenario
from sim.traffic import Workload


def with_profile(scenario: Scenario, profile_path: str | Path, source: str,
                 extra: list[str] = ()) -> Scenario:
    # only what was set: a full dump would set fields that apply to some formats only
    data = scenario.model_dump(mode="json", exclude={"base_dir"}, exclude_unset=True)
    data = apply_overrides(data, ["cost.model=profile", f"cost.profile={Path(profile_path).resolve()}",
                                  *extra], source)
    return scenario_from_dict(data, source, scenario.base_dir)


def simulate_measured(scenario: Scenario, workload: Workload, sends: np.ndarray,
                      prompt_tokens: np.ndarray | None = None, output_tokens: np.ndarray | None = None,
                      closed: int | None = None, think_s: float = 0.0) -> RunResult:
    """Simulate ``workload``'s requests (lengths as measured where given) sent at ``sends``
    (open loop), or by ``closed`` users (the simulator's own loop; ``sends`` unused)."""
    w = workload
    if prompt_tokens is not None:
        w = replace(w, prompt_len=np.asarray(prompt_tokens, dtype=np.int64))
    if output_tokens is not None:
        w = replace(w, output_len=np.maximum(np.asarray(output_tokens, dtype=np.int64), 1))
    sends = np.asarray(sends, dtype=float)

    def once(s: np.ndarray) -> RunResult:
        # the simulator wants arrivals sorted: permute, then give requests back their ids
        order = np.argsort(s, kind="stable")
        if (order == np.arange(len(s))).all():
            return simulate(scenario, workload=replace(w, arrival=s, closed_loop=None))
        res = simulate(scenario, workload=_take(replace(w, closed_loop=None), order, s[order]))
        df = res.requests.copy()
        df["request_id"] = order[df["request_id"].to_numpy()]
        return replace(res, requests=df.sort_values("request_id").reset_index(drop=True))

    if closed is None:
        return once(sends)
    return simulate(scenario, workload=replace(w, arrival=np.zeros(len(sends)), closed_loop=(closed, think_s)))


def _take(w: Workload, order: np.ndarray, arrival: np.ndarray) -> Workload:
    from sim.traffic.ragged import take_rows

    cols = {k: getattr(w, k)[order] for k in ("prompt_len", "output_len", "class_id", "priority",
                                                "slo_ttft", "slo_tpot", "slo_e2e", "session_id")
            if getattr(w, k) is not None}
    if w.prefix_offsets is not None:
        cols["prefix_offsets"], cols["prefix_hashes"] = take_rows(w.prefix_offsets, w.prefix_hashes, order)
    return replace(w, arrival=arrival, **cols)


def scaled_profile(profile: Profile, factor: float, path: Path) -> Path:
    """A copy of the profile whose every step (and per-request overhead) takes ``factor``
    times as long: the server's drift since calibration, for the drift-adjusted error."""
    step = profile.step.model_copy(update={"coef": [c * factor for c in profile.step.coef]})
    p = profile.model_copy(update={"step": step, "overhead_s": profile.overhead_s * factor,
                                   "request_overhead_s": profile.request_overhead_s * factor})
    return save_profile(p, path)
