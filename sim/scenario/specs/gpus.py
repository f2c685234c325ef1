"""GPU catalog: memory, dense peak FLOP/s per dtype, HBM and interconnect bandwidth, link domain,
power, rental price — each entry with its source and the date of that source.

Units are the vendor's: FLOP/s and bandwidths are the datasheets' decimal figures for dense
(non-sparse) math, i.e. the "with sparsity" numbers halved; memory is what the driver reports
(``nvidia-smi`` / ``torch.cuda.mem_get_info`` total, in MiB), because an "80GB" card holds
80 GiB-class memory, not 80·10⁹ bytes. Where no driver report was at hand the memory is an
estimate (``memory_estimated``): the nominal capacity in GiB less the share the driver keeps on
the nearest card of the same memory kind (B200's 4.5% for Blackwell HBM3e, MI300X's 16 MiB for
AMD). Prices are on-demand USD per GPU-hour with a dated source; ``estimate`` marks those no
listing was found for. Set ``hardware.price_per_gpu_hour`` (or a study's ``prices``) to replace
them.

Datasheets (dense figures; all TFLOP/s):

==============  ======================================================================  ==========
GPU             source                                                                  date
==============  ======================================================================  ==========
A100-40/80GB    NVIDIA A100 datasheet: BF16 312, INT8 624, HBM2e 1,555 / 2,039 GB/s,    2021-06
                NVLink 3 600 GB/s (bidirectional), 400 W
H100-SXM        NVIDIA H100 datasheet (SXM): BF16 989, FP8/INT8 1,979, HBM3 3.35 TB/s,  2023-09
                NVLink 4 900 GB/s, 700 W
H100-PCIe       NVIDIA H100 datasheet (PCIe): BF16 756, FP8/INT8 1,513, HBM2e 2.0 TB/s,  2023-09
                PCIe Gen5 128 GB/s, 350 W
H100-NVL        NVIDIA H100 datasheet (NVL): 94 GB HBM3 3.9 TB/s, BF16 835, FP8 1,671,   2023-09
                NVLink bridge 600 GB/s between a pair, 400 W
H200            NVIDIA H200 datasheet: compute as H100 SXM, HBM3e 141 GB, 4.8 TB/s, 700W 2024-11
GH200           NVIDIA GH200 Grace Hopper datasheet: 96 GB HBM3 4 TB/s, compute as      2024-05
                H100 SXM, NVLink-C2C 900 GB/s to the Grace CPU, module 450–1,000 W
H20             NVIDIA H20 (China export part; willitrunai.com/gpus/h20-96gb): 96 GB     2024-02
                HBM3 4.0 TB/s, BF16 148, FP8/INT8 296, NVLink 900 GB/s, 400 W
L4              NVIDIA L4 datasheet: 24 GB GDDR6 300 GB/s, BF16 121, FP8/INT8 242,      2023-03
                PCIe Gen4, 72 W
L40S            NVIDIA L40S datasheet: BF16 362, FP8/INT8 733, GDDR6 864 GB/s, 350 W     2023-08
A10G            AWS's A10 variant; no NVIDIA datasheet. 24 GB GDDR6 600 GB/s (AWS G5     2023-07
                docs); tensor BF16 70, INT8 140 (Baseten, "A10 vs A10G"), 300 W
B200            NVIDIA HGX B200 datasheet: BF16 2,250, FP8/INT8 4,500, FP4 9,000,       2024-03
                HBM3e 8 TB/s, NVLink 5 1.8 TB/s, 1,000 W
B300            NVIDIA HGX B300 (Blackwell Ultra; glennklockwood.com/garden/processors/ 2025-08
                B300, acecloud.ai HGX B300): 288 GB HBM3e 8 TB/s, BF16 2,250, FP8 4,500,
                FP4 13,125, INT8 125 (DGX B300: 2 POPS sparse for 8 GPUs), NVLink 5,
                ConnectX-8 800 Gb/s per GPU, 1,100 W
GB200-NVL72     NVIDIA GB200 NVL72 datasheet, per GPU: BF16 2,500, FP8/INT8 5,000,       2024-03
                FP4 10,000, 186 GB HBM3e 8 TB/s, NVLink 5 across the 72-GPU rack, 1,200 W
GB300-NVL72     NVIDIA GB300 NVL72 datasheet, per GPU: FP4 1.1 EF dense / 72 = 15,000,  2025-03
                FP8 5,000, BF16 2,500, INT8 160 (23 POPS sparse / 72), 288 GB HBM3e,
                NVLink 5 across the rack, ConnectX-8 800 Gb/s, 1,400 W
MI300X          AMD Instinct MI300X datasheet: BF16 1,307, FP8/INT8 2,615, 192 GB HBM3   2023-12
                5.3 TB/s, 7 Infinity Fabric links of 128 GB/s (bidirectional), 750 W
MI325X          AMD Instinct MI325X datasheet: compute as MI300X, 256 GB HBM3e 6 TB/s,   2024-10
                1,000 W
MI355X          AMD Instinct MI355X (Hot Chips 2025; tomshardware.com, ISC 2025): BF16   2025-06
                2,500, FP8/INT8 5,000, FP4 10,050 (20.1 PF sparse), 288 GB HBM3e 8 TB/s,
                Infinity Fabric 4 7 × 153.6 GB/s, 1,400 W
RTX-PRO-6000    NVIDIA RTX PRO 6000 Blackwell Server Edition: 96 GB GDDR7 ECC 1,597      2025-03
                GB/s, 4,000 AI TOPS FP4 sparse (FP4 2,000, FP8/INT8 1,000, BF16 500
                dense), PCIe Gen5, 600 W
==============  ======================================================================  ==========

Memory as the driver reports it (MiB): A100-SXM4-80GB 81,920, A100-SXM4-40GB 40,960, H100 80GB
HBM3 81,559, H100 PCIe 81,559, H100 NVL 95,830, H200 143,771, GH200 97,871, H20 97,871, L4 23,034,
L40S 46,068, A10G 23,028, B200 183,359, RTX PRO 6000 97,887, MI300X 196,592 (PyTorch on ROCm).
Estimates (``memory_estimated``): B300, GB300-NVL72 (288 GB: 275,040), GB200-NVL72 (186 GB:
189,471), MI325X (262,128), MI355X (294,896).

Links. ``interconnect`` names the link within the GPU's domain (``link_domain`` GPUs: an 8-GPU
NVSwitch node, a 72-GPU NVL72 rack, an 8-GPU Infinity Fabric mesh, an NVLink-bridged pair, a
server's PCIe cards, one GH200 superchip); ``scale_out`` names the link beyond it (a NIC per GPU:
InfiniBand or RoCE at 200/400/800 Gb/s, or 100 GbE). A TP (or expert-parallel) group larger
than the domain spans whole domains and is priced over the scale-out link (see
``efficiency.collective_latency``); one that splits a domain, or a GPU with no scale-out link, is
refused with the reason (``tp_refusal``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

GB = 1e9
MiB = 2**20
TFLOPS = 1e12


@dataclass(frozen=True)
class Link:
    """A GPU-to-GPU link: bandwidth per GPU and direction, and the latency of one step of a small
    collective over it (a hop through the switch or NIC). Fitted links (``calibrated.yaml``'s
    ``links``) replace that latency with their fitted all-reduce constants; the others derive
    theirs from it (``efficiency.collective_latency``)."""

    name: str
    bandwidth: float  # bytes/s per GPU and direction
    latency_s: float
    description: str = ""


# Hop latencies: stated, small-message figures (µs) of one step over the link, as nccl-tests and the
# engines' one-shot all-reduce kernels measure it (a few µs through an NVSwitch, ~10–20 µs through
# PCIe switches); the scale-out links' are the same as the disaggregation links' (schema.LINKS).
LINKS: dict[str, Link] = {lk.name: lk for lk in [
    Link("nvlink3", 300 * GB, 6e-6, "NVLink 3 through NVSwitch (A100 HGX)"),
    Link("nvlink4", 450 * GB, 5e-6, "NVLink 4 through NVSwitch (H100/H200 HGX), or a bridge"),
    Link("nvlink5", 900 * GB, 4e-6, "NVLink 5 through NVSwitch (HGX B200/B300, NVL72 racks)"),
    Link("xgmi", 448 * GB, 5e-6, "AMD Infinity Fabric mesh, 7 peer links (MI300X/MI325X)"),
    Link("xgmi4", 537.6 * GB, 5e-6, "AMD Infinity Fabric 4 mesh, 7 peer links (MI355X)"),
    Link("pcie4", 32 * GB, 15e-6, "PCIe Gen4 x16 through the server's switches"),
    Link("pcie5", 64 * GB, 12e-6, "PCIe Gen5 x16 through the server's switches"),
    Link("ib200", 25 * GB, 5e-6, "InfiniBand/RoCE 200 Gb/s, one NIC per GPU (HDR)"),
    Link("ib400", 50 * GB, 5e-6, "InfiniBand/RoCE 400 Gb/s, one NIC per GPU (NDR, ConnectX-7)"),
    Link("ib800", 100 * GB, 5e-6, "InfiniBand/RoCE 800 Gb/s, one NIC per GPU (XDR, ConnectX-8)"),
    Link("eth100", 12.5 * GB, 30e-6, "100 Gb Ethernet per GPU (TCP, no RDMA)"),
]}
SCALE_OUT = ("ib200", "ib400", "ib800", "eth100")  # links between nodes (domain unbounded)


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float  # as the driver reports it
    bf16_flops: float  # dense BF16/FP16 tensor-core peak
    fp8_flops: float  # 0: no fp8 tensor cores (fp8 runs at bf16 rate)
    hbm_bandwidth: float  # bytes/s
    interconnect_bandwidth: float  # bytes/s per direction within the link domain
    interconnect: str  # a LINKS name
    price_per_hour: float
    host_bandwidth: float = 50e9  # bytes/s between GPU and host memory (PCIe or C2C, per direction)
    int8_flops: float = 0.0  # dense INT8 tensor-core peak (0: as fp8, else bf16)
    arch: str = ""  # efficiency tables are shared by GPUs of one architecture (H100, H200: hopper)
    fp4_flops: float = 0.0  # dense FP4 tensor-core peak (0: none; fp4 weights run weight-only)
    link_domain: int = 8  # GPUs that reach each other over ``interconnect``
    scale_out: str = "ib400"  # the LINKS name beyond the domain ("": none)
    power_w: float = 0.0  # TDP / board power
    memory_estimated: bool = False  # memory_bytes estimated, not a driver report
    source: str = ""  # the datasheet the figures come from
    source_date: str = ""
    price_source: str = ""
    price_date: str = ""
    note: str = field(default="", compare=False)  # e.g. which card an ambiguous name means

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak for math in ``dtype``: the fastest math the GPU runs weights of
        that dtype with. fp8/int8 run W8A8 on 8-bit tensor cores where the GPU has them, fp4 on
        FP4 tensor cores (Blackwell, MI355X); otherwise they are weight-only (bf16 math), as is
        int4. fp32 is the TF32 tensor-core rate."""
        if dtype == "fp32":
            return self.bf16_flops / 2
        candidates = [self.bf16_flops]
        if dtype == "int8":
            candidates.append(self.int8_flops or self.fp8_flops)
        elif dtype == "fp8":
            candidates.append(self.fp8_flops)
        elif dtype == "fp4":
            candidates.append(self.fp4_flops)
        return max(candidates)

    @property
    def link(self) -> Link:
        return LINKS[self.interconnect]

    def links_for(self, tp: int) -> tuple[Link, Link | None]:
        """The link a group of ``tp`` GPUs reduces over within its domain, and the scale-out link
        between domains (None: the group fits the domain)."""
        if tp <= self.link_domain:
            return self.link, None
        return self.link, LINKS[self.scale_out]

    def tp_refusal(self, tp: int) -> str | None:
        """Why a TP (or expert-parallel) group of ``tp`` GPUs cannot be laid out on this GPU's
        domains, or None."""
        d = self.link_domain
        if tp <= d:
            return None
        if not self.scale_out:
            return (f"TP {tp} exceeds {self.name}'s link domain of {d} GPU{'s' * (d > 1)} over "
                    f"{self.interconnect}, and the GPU has no scale-out link to price the rest over; "
                    f"expected tp ≤ {d}, or a gpu with link.scale_out")
        if tp % d:
            return (f"TP {tp} would split one of {self.name}'s {d}-GPU {self.interconnect} domains "
                    f"({tp // d} whole domain{'s' * (tp // d > 1)} and {tp % d} GPUs of another): expected "
                    f"tp ≤ {d} or a multiple of {d}")
        return None

    def domains_spanned(self, tp: int) -> int:
        return max(1, math.ceil(tp / self.link_domain))


def _spec(name: str, arch: str, *, mib: float, bf16: float, fp8: float, int8: float, fp4: float = 0.0,
          hbm_gbs: float, link: str, link_gbs: float, domain: int, out: str, host_gbs: float, power: float,
          price: float, source: str, date: str, price_source: str, price_date: str,
          estimated: bool = False) -> GpuSpec:
    return GpuSpec(name, mib * MiB, bf16 * TFLOPS, fp8 * TFLOPS, hbm_gbs * GB, link_gbs * GB, link, price,
                   host_gbs * GB, int8 * TFLOPS, arch, fp4 * TFLOPS, domain, out, power, estimated, source,
                   date, price_source, price_date)


_CATALOG_2025 = "servesim catalog 2025 (within Mercatus' cloud GPU pricing ranges, May 2026)"
_NO_LISTING = "estimate: no on-demand listing found; set hardware.price_per_gpu_hour"

GPU_CATALOG: dict[str, GpuSpec] = {g.name: g for g in [
    _spec("A100-40GB", "ampere", mib=40960, bf16=312, fp8=0, int8=624, hbm_gbs=1555, link="nvlink3",
          link_gbs=300, domain=8, out="ib200", host_gbs=25, power=400, price=1.29,
          source="NVIDIA A100 Tensor Core GPU datasheet", date="2021-06",
          price_source=_CATALOG_2025, price_date="2025-06"),
    _spec("A100-80GB", "ampere", mib=81920, bf16=312, fp8=0, int8=624, hbm_gbs=2039, link="nvlink3",
          link_gbs=300, domain=8, out="ib200", host_gbs=25, power=400, price=1.79,
          source="NVIDIA A100 Tensor Core GPU datasheet", date="2021-06",
          price_source=_CATALOG_2025, price_date="2025-06"),
    _spec("H100-SXM", "hopper", mib=81559, bf16=989, fp8=1979, int8=1979, hbm_gbs=3350, link="nvlink4",
          link_gbs=450, domain=8, out="ib400", host_gbs=50, power=700, price=2.49,
          source="NVIDIA H100 Tensor Core GPU datasheet (SXM5)", date="2023-09",
          price_source=_CATALOG_2025, price_date="2025-06"),
    _spec("H100-PCIe", "hopper", mib=81559, bf16=756, fp8=1513, int8=1513, hbm_gbs=2000, link="pcie5",
          link_gbs=64, domain=8, out="ib400", host_gbs=50, power=350, price=2.49,
          source="NVIDIA H100 Tensor Core GPU datasheet (PCIe)", date="2023-09",
          price_source="Lambda on-demand list, 1× H100 PCIe", price_date="2025-01"),
    _spec("H100-NVL", "hopper", mib=95830, bf16=835, fp8=1671, int8=1671, hbm_gbs=3900, link="nvlink4",
          link_gbs=300, domain=2, out="ib400", host_gbs=50, power=400, price=2.99,
          source="NVIDIA H100 Tensor Core GPU datasheet (NVL: bridged pairs)", date="2023-09",
          price_source=_NO_LISTING, price_date="2026-11"),
    _spec("H200", "hopper", mib=143771, bf16=989, fp8=1979, int8=1979, hbm_gbs=4800, link="nvlink4",
          link_gbs=450, domain=8, out="ib400", host_gbs=50, power=700, price=3.49,
          source="NVIDIA H200 Tensor Core GPU datasheet", date="2024-11",
          price_source=_CATALOG_2025, price_date="2025-06"),
    _spec("GH200", "hopper", mib=97871, bf16=989, fp8=1979, int8=1979, hbm_gbs=4000, link="nvlink4",
          link_gbs=450, domain=1, out="ib400", host_gbs=450, power=1000, price=1.49,
          source="NVIDIA GH200 Grace Hopper Superchip datasheet (96 GB HBM3; one superchip per node)",
          date="2024-05", price_source="Lambda on-demand list, 1× GH200", price_date="2025-01"),
    _spec("H20", "hopper", mib=97871, bf16=148, fp8=296, int8=296, hbm_gbs=4000, link="nvlink4",
          link_gbs=450, domain=8, out="ib400", host_gbs=50, power=400, price=1.49,
          source="NVIDIA H20 (willitrunai.com/gpus/h20-96gb)", date="2024-02",
          price_source=_NO_LISTING, price_date="2026-11"),
    _spec("L4", "ada", mib=23034, bf16=121, fp8=242, int8=242, hbm_gbs=300, link="pcie4", link_gbs=32,
          domain=8, out="eth100", host_gbs=25, power=72, price=0.80,
          source="NVIDIA L4 Tensor Core GPU datasheet", date="2023-03",
          price_source="AWS g6.xlarge on-demand, us-east-1", price_date="2024-06"),
    _spec("L40S", "ada", mib=46068, bf16=362, fp8=733, int8=733, hbm_gbs=864, link="pcie4", link_gbs=32,
          domain=8, out="ib400", host_gbs=25, power=350, price=0.99,
          source="NVIDIA L40S datasheet", date="2023-08",
          price_source=_CATALOG_2025, price_date="2025-06"),
    _spec("A10G", "ampere", mib=23028, bf16=70, fp8=0, int8=140, hbm_gbs=600, link="pcie4", link_gbs=32,
          domain=8, out="eth100", host_gbs=25, power=300, price=1.01,
          source="AWS EC2 G5 documentation; Baseten, 'NVIDIA A10 vs A10G for ML model inference'",
          date="2023-07", price_source="AWS g5.xlarge on-demand, us-east-1", price_date="2024-06"),
    _spec("B200", "blackwell", mib=183359, bf16=2250, fp8=4500, int8=4500, fp4=9000, hbm_gbs=8000,
          link="nvlink5", link_gbs=900, domain=8, out="ib400", host_gbs=50, power=1000, price=5.99,
          source="NVIDIA HGX B200 datasheet", date="2024-03",
          price_source=_CATALOG_2025 + "; Spheron on-demand $6.03 (2026-03)", price_date="2025-06"),
    _spec("B300", "blackwell", mib=275040, bf16=2250, fp8=4500, int8=125, fp4=13125, hbm_gbs=8000,
          link="nvlink5", link_gbs=900, domain=8, out="ib800", host_gbs=100, power=1100, price=7.49,
          source="NVIDIA HGX/DGX B300 (Blackwell Ultra) specifications", date="2025-08",
          price_source=_NO_LISTING, price_date="2026-11", estimated=True),
    _spec("GB200-NVL72", "blackwell", mib=189471, bf16=2500, fp8=5000, int8=5000, fp4=10000, hbm_gbs=8000,
          link="nvlink5", link_gbs=900, domain=72, out="ib400", host_gbs=225, power=1200, price=4.54,
          source="NVIDIA GB200 NVL72 datasheet (per GPU)", date="2024-03",
          price_source="Spheron on-demand, $9.08 per GB200 superchip of 2 GPUs", price_date="2026-03",
          estimated=True),
    _spec("GB300-NVL72", "blackwell", mib=275040, bf16=2500, fp8=5000, int8=160, fp4=15000, hbm_gbs=8000,
          link="nvlink5", link_gbs=900, domain=72, out="ib800", host_gbs=225, power=1400, price=7.99,
          source="NVIDIA GB300 NVL72 datasheet (per GPU)", date="2025-03",
          price_source=_NO_LISTING, price_date="2026-11", estimated=True),
    _spec("MI300X", "cdna3", mib=196592, bf16=1307, fp8=2615, int8=2615, hbm_gbs=5300, link="xgmi",
          link_gbs=448, domain=8, out="ib400", host_gbs=50, power=750, price=1.99,
          source="AMD Instinct MI300X datasheet", date="2023-12",
          price_source="median of neocloud listings (cliffcenter.com, AMD inference economics)",
          price_date="2026-05"),
    _spec("MI325X", "cdna3", mib=262128, bf16=1307, fp8=2615, int8=2615, hbm_gbs=6000, link="xgmi",
          link_gbs=448, domain=8, out="ib400", host_gbs=50, power=1000, price=1.95,
          source="AMD Instinct MI325X datasheet", date="2024-10",
          price_source="TensorWave on-demand (cliffcenter.com, AMD inference economics)", price_date="2026-05",
          estimated=True),
    _spec("MI355X", "cdna4", mib=294896, bf16=2500, fp8=5000, int8=5000, fp4=10050, hbm_gbs=8000,
          link="xgmi4", link_gbs=537.6, domain=8, out="ib400", host_gbs=50, power=1400, price=3.49,
          source="AMD Instinct MI355X (Hot Chips 2025; tomshardware.com, ISC 2025)", date="2025-06",
          price_source=_NO_LISTING, price_date="2026-11", estimated=True),
    _spec("RTX-PRO-6000", "blackwell", mib=97887, bf16=500, fp8=1000, int8=1000, fp4=2000, hbm_gbs=1597,
          link="pcie5", link_gbs=64, domain=8, out="ib400", host_gbs=50, power=600, price=0.66,
          source="NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet", date="2025-03",
          price_source="packet.ai on-demand (GPU pricing models compared, 2026)", price_date="2026-06"),
]}

# Names users write for a catalog card. An ambiguous family name resolves to one card, and the run
# says which (``resolution``): the other cards of the family are listed beside it.
_ALIASES = {"A100-80G": "A100-80GB", "A100-40G": "A100-40GB", "H100-SXM5": "H100-SXM",
            "GB200": "GB200-NVL72", "GB300": "GB300-NVL72", "RTX PRO 6000": "RTX-PRO-6000",
            "RTX-PRO-6000-BLACKWELL": "RTX-PRO-6000"}
AMBIGUOUS = {"H100": ("H100-SXM", ("H100-PCIe", "H100-NVL")),
             "A100": ("A100-80GB", ("A100-40GB",))}


def resolution(name: str) -> str | None:
    """What an ambiguous family name (``H100``) was taken to mean, in words; None otherwise."""
    entry = AMBIGUOUS.get(name.strip().upper())
    if entry is None:
        return None
    card, others = entry
    return f"{name} read as {card}; write {' or '.join(others)} for the other {name} card" + \
        ("s" if len(others) > 1 else "")


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by catalog name or alias (case-insensitive). An ambiguous family name
    (``H100``, ``A100``) resolves to its most common card (``AMBIGUOUS``); ``resolution`` says so."""
    key = name.strip().upper()
    aliases = {k.upper(): v for k, v in _ALIASES.items()} | {k: v[0] for k, v in AMBIGUOUS.items()}
    key = aliases.get(key, key).lower()
    by_lower = {k.lower(): v for k, v in GPU_CATALOG.items()}
    if key in by_lower:
        return by_lower[key]
    known = ", ".join(GPU_CATALOG)
    raise KeyError(f"unknown GPU {name!r}; known GPUs: {known} (or define one: hardware.gpu: "
                   "{base: H100-SXM, memory_gib: 94} or {name, memory_gib, hbm_tb_s, peaks, link})")


def with_price(gpu: GpuSpec, price: float | None) -> GpuSpec:
    return gpu if price is None else replace(gpu, price_per_hour=price, price_source="hardware.price_per_gpu_hour",
                                             price_date="")
