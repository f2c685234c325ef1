"""GPU catalog: memory, dense peak FLOP/s per dtype, HBM and interconnect bandwidth, rental price.

Units are the vendor's: FLOP/s and bandwidths are the datasheets' decimal figures for dense
(non-sparse) math; memory is what the driver reports (``nvidia-smi`` total, in MiB), because
"80GB" HBM is 80 GiB-class memory, not 80·10⁹ bytes. Prices are typical on-demand cloud rates
in USD per GPU-hour (override them in a study).

Sources (dense figures, i.e. the datasheets' "with sparsity" numbers halved):
- A100: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16/FP16 312 TFLOPS, INT8 624 TOPS,
  TF32 156 TFLOPS, HBM2e 1,935 GB/s (PCIe) / 2,039 GB/s (SXM 80GB), 1,555 GB/s (40GB),
  NVLink 3 600 GB/s (bidirectional).
- H100 SXM: NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 989 TFLOPS, FP8 1,979 TFLOPS,
  INT8 1,979 TOPS, HBM3 3.35 TB/s, NVLink 4 900 GB/s.
- H200: NVIDIA H200 Tensor Core GPU datasheet (2024): compute as H100 SXM, HBM3e 141 GB, 4.8 TB/s.
- L40S: NVIDIA L40S datasheet (2023): BF16 362 TFLOPS, FP8 733 TFLOPS, INT8 733 TOPS, GDDR6
  864 GB/s, PCIe Gen4 x16 (64 GB/s bidirectional).
- B200: NVIDIA HGX B200 datasheet (2024): per GPU BF16 2.25 PFLOPS, FP8/INT8 4.5 PFLOPS,
  HBM3e 8 TB/s, NVLink 5 1.8 TB/s.
- Memory as the driver reports it (``nvidia-smi`` "Total"): A100-SXM4-80GB 81,920 MiB,
  A100-SXM4-40GB 40,960 MiB, H100 80GB HBM3 81,559 MiB, H200 143,771 MiB, L40S 46,068 MiB,
  B200 183,359 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
MiB = 2**20
TFLOPS = 1e12


@dataclass(frozen=True)
class Link:
    """A GPU-to-GPU interconnect: bandwidth per GPU and direction, and the latency of one small
    all-reduce among the GPUs of a node (a one-shot kernel over NVLink, NCCL's LL protocol over PCIe)."""

    name: str
    bandwidth: float  # bytes/s per direction
    latency_s: float


# Collective latencies: the small-message all-reduce latency among up to 8 GPUs of one node, as
# nccl-tests and the engines' one-shot all-reduce kernels measure it (a few µs over NVSwitch,
# ~10–20 µs through PCIe switches). ``sim/scenario/data/efficiency.yaml`` may refine them.
LINKS: dict[str, Link] = {lk.name: lk for lk in [
    Link("nvlink3", 300 * GB, 6e-6),
    Link("nvlink4", 450 * GB, 5e-6),
    Link("nvlink5", 900 * GB, 4e-6),
    Link("pcie4", 32 * GB, 15e-6),
    Link("pcie5", 64 * GB, 12e-6),
]}


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float  # as the driver reports it
    bf16_flops: float  # dense BF16/FP16 tensor-core peak
    fp8_flops: float  # 0: no fp8 tensor cores (fp8 runs at bf16 rate)
    hbm_bandwidth: float  # bytes/s
    interconnect_bandwidth: float  # bytes/s per direction (NVLink, or PCIe)
    interconnect: str  # a LINKS name
    price_per_hour: float
    host_bandwidth: float = 50e9  # bytes/s between GPU and host memory (PCIe, per direction)
    int8_flops: float = 0.0  # dense INT8 tensor-core peak (0: as fp8, else bf16)
    arch: str = ""  # efficiency tables are shared by GPUs of one architecture (H100, H200: hopper)

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak for math in ``dtype``: fp8/int8 weights run W8A8 on 8-bit
        tensor cores where the GPU has them (int4 is weight-only: bf16 math)."""
        if dtype == "int8" and self.int8_flops > 0:
            return self.int8_flops
        if dtype in ("fp8", "int8") and self.fp8_flops > 0:
            return self.fp8_flops
        if dtype == "fp32":
            return self.bf16_flops / 2  # TF32 tensor-core rate
        return self.bf16_flops

    @property
    def link(self) -> Link:
        return LINKS[self.interconnect]


GPU_CATALOG: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("A100-40GB", 40960 * MiB, 312 * TFLOPS, 0.0, 1555 * GB, 300 * GB, "nvlink3", 1.29, 25 * GB,
                624 * TFLOPS, "ampere"),
        GpuSpec("A100-80GB", 81920 * MiB, 312 * TFLOPS, 0.0, 2039 * GB, 300 * GB, "nvlink3", 1.79, 25 * GB,
                624 * TFLOPS, "ampere"),
        GpuSpec("H100-SXM", 81559 * MiB, 989 * TFLOPS, 1979 * TFLOPS, 3350 * GB, 450 * GB, "nvlink4", 2.49,
                50 * GB, 1979 * TFLOPS, "hopper"),
        GpuSpec("H200", 143771 * MiB, 989 * TFLOPS, 1979 * TFLOPS, 4800 * GB, 450 * GB, "nvlink4", 3.49,
                50 * GB, 1979 * TFLOPS, "hopper"),
        GpuSpec("L40S", 46068 * MiB, 362 * TFLOPS, 733 * TFLOPS, 864 * GB, 32 * GB, "pcie4", 0.99, 25 * GB,
                733 * TFLOPS, "ada"),
        GpuSpec("B200", 183359 * MiB, 2250 * TFLOPS, 4500 * TFLOPS, 8000 * GB, 900 * GB, "nvlink5", 5.99,
                50 * GB, 4500 * TFLOPS, "blackwell"),
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
