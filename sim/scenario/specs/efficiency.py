"""Achievable fractions of a GPU's datasheet peaks, per GPU architecture and math dtype: the GEMM
efficiency curve, HBM streaming, attention kernels, and the small-message latency of a collective
on each link. Fitted constants, in ``sim/scenario/data/calibrated.yaml``; docs/roofline.md gives
the evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from sim.scenario.specs.gpus import GpuSpec

FILE = "calibrated.yaml"


@cache
def calibrated() -> dict:
    """The fitted constants (``benchmarks/published_fit.py`` writes them)."""
    return yaml.safe_load(resources.files("sim.scenario.data").joinpath(FILE).read_text())


def _arch(gpu: GpuSpec) -> dict:
    gpus = calibrated()["gpus"]
    return gpus.get(gpu.arch, gpus["default"])


def math_class(gpu: GpuSpec, dtype: str) -> str:
    """The tensor-core class a GEMM in ``dtype`` runs on: 8-bit (fp8, int8 where the GPU has 8-bit
    tensor cores) or 16-bit (everything else, weight-only formats included)."""
    return "fp8" if gpu.peak_flops(dtype) > gpu.bf16_flops else "bf16"


@dataclass(frozen=True)
class GemmCurve:
    """What a GEMM achieves as a function of its shape. It computes for c = FLOPs / (peak ·
    ``peak_fraction``) and streams its weights and activations for m = bytes / bandwidth; it takes
    (c^k + m^k)^(1/k), a smooth roofline. Small-M GEMMs are bandwidth-bound (c ≪ m), large ones
    run at ``peak_fraction`` of the dtype's peak (m ≪ c); at the ridge (c = m), where neither hides
    the other, they lose a factor 2^(1/k) = 1 + ``overlap``, and the loss fades away from it."""

    peak_fraction: float
    overlap: float

    @property
    def exponent(self) -> float:
        """k of the smooth roofline (0: max(c, m), no loss at the ridge)."""
        return math.log(2.0) / math.log1p(self.overlap) if self.overlap > 1e-9 else 0.0

    def _time(self, c: float, m: float) -> float:
        hi, lo = max(c, m), min(c, m)
        k = self.exponent
        return hi if k == 0.0 or hi <= 0.0 else hi * (1.0 + (lo / hi) ** k) ** (1.0 / k)

    def seconds(self, flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
        return self._time(flops / (peak_flops * self.peak_fraction), nbytes / bandwidth)

    def fraction(self, rows: float, ridge_rows: float) -> float:
        """Share of the dense peak a GEMM of ``rows`` reaches, where ``ridge_rows`` is the shape's
        ridge (compute = streaming)."""
        return self.peak_fraction * (rows / ridge_rows) / self._time(rows / ridge_rows, 1.0)


def gemm_curve(gpu: GpuSpec, dtype: str) -> GemmCurve:
    peak, overlap = _arch(gpu)[f"gemm_{math_class(gpu, dtype)}"]
    return GemmCurve(float(peak), float(overlap))


def hbm_fraction(gpu: GpuSpec) -> float:
    return float(_arch(gpu)["hbm_fraction"])


def attention(gpu: GpuSpec) -> dict[str, float]:
    a = _arch(gpu)
    return {"prefill_fraction": float(a["attn_prefill_fraction"]), "decode_row_s": float(a["decode_row_s"])}


def collective_latency(gpu: GpuSpec, tp: int) -> float:
    """Seconds of one small all-reduce among ``tp`` GPUs of a node on ``gpu``'s interconnect: a
    base latency plus one per peer (the steps of NCCL's ring and tree algorithms grow with the
    group)."""
    base, per_peer = (calibrated().get("links") or {}).get(gpu.interconnect, (gpu.link.latency_s, 0.0))
    return float(base) + float(per_peer) * (tp - 1)
