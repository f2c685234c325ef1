"""GPU catalog: memory, dense peak FLOP/s, HBM and interconnect bandwidth, rental price.

Figures are vendor datasheet numbers for dense (non-sparse) math; prices are typical
on-demand cloud rates in USD per GPU-hour (override them in a study).
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
TFLOPS = 1e12


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float
    bf16_flops: float
    fp8_flops: float  # 0: no fp8 tensor cores (fp8 runs at bf16 rate)
    hbm_bandwidth: float  # bytes/s
    interconnect_bandwidth: float  # bytes/s per direction (NVLink, or PCIe)
    interconnect: str
    price_per_hour: float
    host_bandwidth: float = 50e9  # bytes/s between GPU and host memory (PCIe, per direction)

    def peak_flops(self, dtype: str) -> float:
        if dtype in ("fp8", "int8") and self.fp8_flops > 0:
            return self.fp8_flops  # W8A8 on 8-bit tensor cores (int4 is weight-only: bf16 math)
        if dtype == "fp32":
            return self.bf16_flops / 2  # TF32 tensor-core rate
        return self.bf16_flops


GPU_CATALOG: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("A100-40GB", 40 * GB, 312 * TFLOPS, 0.0, 1555 * GB, 300 * GB, "nvlink3", 1.29, 25 * GB),
        GpuSpec("A100-80GB", 80 * GB, 312 * TFLOPS, 0.0, 2039 * GB, 300 * GB, "nvlink3", 1.79, 25 * GB),
        GpuSpec("H100-SXM", 80 * GB, 989 * TFLOPS, 1979 * TFLOPS, 3350 * GB, 450 * GB, "nvlink4",
                2.49),
        GpuSpec("H200", 141 * GB, 989 * TFLOPS, 1979 * TFLOPS, 4800 * GB, 450 * GB, "nvlink4",
                3.49),
        GpuSpec("L40S", 48 * GB, 362 * TFLOPS, 733 * TFLOPS, 864 * GB, 32 * GB, "pcie4", 0.99, 25 * GB),
        GpuSpec("B200", 180 * GB, 2250 * TFLOPS, 4500 * TFLOPS, 8000 * GB, 900 * GB, "nvlink5",
                5.99),
    ]
}

_ALIASES = {"H100": "H100-SXM", "A100": "A100-80GB", "A100-80G": "A100-80GB",
            "A100-40G": "A100-40GB"}


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by catalog name or alias (case-insensitive)."""
    by_lower = {k.lower(): v for k, v in GPU_CATALOG.items()}
    key = _ALIASES.get(name.upper() if name.upper() in _ALIASES else name, name).lower()
    if key in by_lower:
        return by_lower[key]
    known = ", ".join(GPU_CATALOG)
    raise KeyError(f"unknown GPU {name!r}; known GPUs: {known}")
