"""GPU catalog: memory, dense peak FLOP/s per dtype, HBM and interconnect bandwidth, link domain,
power, rental price — each entry with its datasheet, the figures it states and their date, and
a dated price source (``sim/scenario/data/gpus.yaml``, which says the units and which figures
are estimates).

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
from importlib import resources

import yaml

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
    idle_w: float = 0.0  # draw with nothing running (0: the rule of sim/pricing/power.py from power_w)
    hbm_w: float = 0.0  # draw above idle at the datasheet HBM bandwidth
    tensor_w: float = 0.0  # draw above idle at the datasheet dense tensor-core peak
    memory_estimated: bool = False  # memory_bytes estimated, not a driver report
    source: str = ""  # the datasheet the figures come from
    source_date: str = ""
    price_source: str = ""
    price_date: str = ""
    figures: str = field(default="", compare=False)  # what the source states, in its words

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


def _entry(name: str, e: dict) -> GpuSpec:
    peaks, link, price = e["peaks"], e["link"], e["price"]
    return GpuSpec(name, e["memory_mib"] * MiB, peaks["bf16"] * TFLOPS, peaks["fp8"] * TFLOPS, e["hbm_gb_s"] * GB,
                   link["gb_s"] * GB, link["type"], price["usd_per_hour"], e["host_gb_s"] * GB,
                   peaks["int8"] * TFLOPS, e["arch"], peaks["fp4"] * TFLOPS, link["domain"], link["scale_out"],
                   e["power_w"], e["power"]["idle_w"], e["power"]["hbm_w"], e["power"]["tensor_w"],
                   e.get("memory_estimated", False), e["source"], e["date"], price["source"],
                   price["date"], figures=e["figures"])


def _catalog() -> dict[str, GpuSpec]:
    text = resources.files("sim.scenario.data").joinpath("gpus.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {name: _entry(name, e) for name, e in yaml.load(text, Loader=loader).items()}


GPU_CATALOG: dict[str, GpuSpec] = _catalog()

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
