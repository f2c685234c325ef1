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

from sim.scenario.specs.gpus import LINKS, GpuSpec, Link

FILE = "calibrated.yaml"


@cache
def calibrated() -> dict:
    """The fitted constants (``benchmarks/published_fit.py`` writes them)."""
    return yaml.safe_load(resources.files("sim.scenario.data").joinpath(FILE).read_text())


def _arch(gpu: GpuSpec) -> dict:
    gpus = calibrated()["gpus"]
    return gpus.get(gpu.arch, gpus["default"])


def math_class(gpu: GpuSpec, dtype: str) -> str:
    """The tensor-core class a GEMM in ``dtype`` runs on: 4-bit (fp4 where the GPU has FP4 tensor
    cores), 8-bit (fp8, int8 where it has 8-bit ones), 16-bit with 4-bit weights dequantized in the
    kernel (``w4``: int4, or fp4 on a GPU without FP4 tensor cores; W4A16 kernels such as Marlin's
    or the MXFP4 MoE kernels on Hopper), or 16-bit (everything else)."""
    if gpu.peak_flops(dtype) <= gpu.bf16_flops:
        return "w4" if dtype in ("int4", "fp4") else "bf16"
    return "fp4" if dtype == "fp4" else "fp8"


# the curve a class takes where its architecture has none fitted: FP4 math its 8-bit curve (at the
# FP4 peak), 4-bit weights on 16-bit math the 16-bit one
FALLBACK = {"fp4": "fp8", "w4": "bf16"}


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
    arch, cls = _arch(gpu), math_class(gpu, dtype)
    peak, overlap = arch.get(f"gemm_{cls}") or arch[f"gemm_{FALLBACK.get(cls, cls)}"]
    return GemmCurve(float(peak), float(overlap))


def hbm_fraction(gpu: GpuSpec) -> float:
    return float(_arch(gpu)["hbm_fraction"])


def moe_gemm_fraction(gpu: GpuSpec) -> float:
    """Share of the dense GEMM plateau the experts' grouped GEMMs reach (many small GEMMs, one per
    expert, with their tokens gathered and scattered; 1 where none is fitted)."""
    return float(_arch(gpu).get("moe_gemm_fraction", 1.0))


def attention(gpu: GpuSpec) -> dict[str, float]:
    """The attention kernels' constants: prefill's share of the dense peak, decode's fixed seconds
    per row and layer, and the share of the HBM bandwidth decode reaches reading the KV cache
    (paged-attention kernels stream it in their own way: where none is fitted, the weights' share)."""
    a = _arch(gpu)
    return {"prefill_fraction": float(a["attn_prefill_fraction"]), "decode_row_s": float(a["decode_row_s"]),
            "decode_hbm_fraction": float(a.get("attn_decode_hbm_fraction", a["hbm_fraction"]))}


REFERENCE_LINK = "nvlink4"  # the fitted link the others derive from (most published cases: H100/H200)


def link_constants(link: Link) -> tuple[float, float, str]:
    """(base, per_peer) seconds of a small all-reduce over ``link`` and how they were set. Fitted
    links take their constants from ``calibrated.yaml``. The others are derived by one rule: the
    reference link's fitted constants (the software floor the engines' cases measure: launch,
    synchronisation, one step per peer), with the base moved by the difference of the links' stated
    hop latencies (``gpus.LINKS``): NVLink 5 runs the same NVSwitch topology and kernels as NVLink 4
    (one hop through the switch, in an 8-GPU node or an NVL72 rack alike), an Infinity Fabric mesh
    the same one-shot kernels, and PCIe adds its switches' latency."""
    fitted = calibrated().get("links") or {}
    if link.name in fitted:
        base, per_peer = fitted[link.name]
        return float(base), float(per_peer), "fitted"
    if REFERENCE_LINK not in fitted:
        return link.latency_s, 0.0, "stated"
    base, per_peer = fitted[REFERENCE_LINK]
    shift = link.latency_s - LINKS[REFERENCE_LINK].latency_s
    return float(base) + shift, float(per_peer), f"derived from {REFERENCE_LINK}"


FITTED_GROUP = 8  # the largest TP group the published cases fit (an 8-GPU node)


def _steps(n: int) -> float:
    """Peer steps of a small all-reduce among ``n`` GPUs of one domain: one per peer up to the
    fitted group, then one per doubling (NCCL's tree and NVLink SHARP algorithms, which large
    groups such as an NVL72 rack run, grow with log2 of the group)."""
    if n <= FITTED_GROUP:
        return n - 1.0
    return FITTED_GROUP - 1.0 + math.log2(n / FITTED_GROUP)


def collective_latency(gpu: GpuSpec, tp: int) -> float:
    """Seconds of one small all-reduce among ``tp`` GPUs on ``gpu``'s links: within a domain, a
    base latency plus one per peer step (``_steps``); a group spanning several domains adds the
    ring's 2·(domains − 1) steps over the scale-out link (a hierarchical all-reduce:
    reduce-scatter and all-gather between domains)."""
    inner, outer = gpu.links_for(tp)
    base, per_peer, _ = link_constants(inner)
    seconds = base + per_peer * _steps(min(tp, gpu.link_domain))
    if outer is not None:
        seconds += 2 * (gpu.domains_spanned(tp) - 1) * outer.latency_s
    return seconds


def collective_bandwidth(gpu: GpuSpec, tp: int) -> float:
    """Bytes/s per GPU and direction an all-reduce or all-to-all among ``tp`` GPUs moves at: the
    domain's link, or the scale-out link (each GPU's NIC) when the group spans domains — a ring
    across nodes runs at the slowest link it crosses."""
    _, outer = gpu.links_for(tp)
    return gpu.interconnect_bandwidth if outer is None else min(outer.bandwidth, gpu.interconnect_bandwidth)
