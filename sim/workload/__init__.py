"""Workloads: arrival times and prompt/output lengths as numpy arrays, seeded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.workload.arrivals import arrival_times
from sim.workload.lengths import sample_lengths
from sim.workload.traces import Trace, read_azure_trace, rescale_times


@dataclass(frozen=True)
class Workload:
    arrival: np.ndarray  # float64 seconds, sorted
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.arrival)


def build_workload(scenario) -> Workload:
    """Generate (or replay) the scenario's traffic. Independent random streams for arrivals,
    prompts and outputs, so changing one distribution leaves the others' draws unchanged."""
    w = scenario.workload
    arrivals_rng, prompt_rng, output_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(scenario.seed).spawn(3))

    if w.trace is not None:
        tr = read_azure_trace(scenario.resolve(w.trace.path))
        t = tr.arrival
        keep = t >= w.trace.start_s
        if w.trace.duration_s is not None:
            keep &= t < w.trace.start_s + w.trace.duration_s
        t, p, o = t[keep], tr.prompt_len[keep], tr.output_len[keep]
        if w.num_requests is not None and "num_requests" in w.model_fields_set:
            t, p, o = t[: w.num_requests], p[: w.num_requests], o[: w.num_requests]
        return Workload(rescale_times(t, w.trace.time_scale, w.trace.rate), p, o)

    a = w.arrival
    if a.process == "trace":
        t = rescale_times(read_azure_trace(scenario.resolve(a.path), "workload.arrival.path").arrival,
                          a.time_scale, a.rate)
        if w.duration_s is not None:
            t = t[t < w.duration_s]
        if w.num_requests is not None:
            t = t[: w.num_requests]
    else:
        t = arrival_times(a.process, a.rate, arrivals_rng, num_requests=w.num_requests,
                          duration_s=w.duration_s, cv=getattr(a, "cv", 1.0))
    n = len(t)
    return Workload(t, _lengths(scenario, "prompt_len", n, prompt_rng),
                    _lengths(scenario, "output_len", n, output_rng))


def _lengths(scenario, field: str, n: int, rng: np.random.Generator) -> np.ndarray:
    spec = getattr(scenario.workload, field)
    empirical = None
    if spec.dist == "empirical":
        tr: Trace = read_azure_trace(scenario.resolve(spec.path), f"workload.{field}.path")
        empirical = tr.prompt_len if spec.column == "ContextTokens" else tr.output_len
    return sample_lengths(spec, n, rng, empirical)


__all__ = ["Trace", "Workload", "build_workload", "read_azure_trace", "rescale_times"]
