"""A GPU as a scenario writes it: a catalog name, or a definition — a whole new GPU
(``{name, memory_gib, hbm_tb_s, peaks: {bf16, fp8, fp4, int8}, link}``) or a catalog GPU with
fields replaced (``{base: H100-SXM, memory_gib: 94}``). Figures are in the datasheets' units:
memory in GiB as the driver reports it, HBM in TB/s, dense peaks in TFLOP/s, links in GB/s per
GPU and direction. A GPU defined without base takes, where it leaves them out, an HGX-style
node's layout (``link.domain`` 8, ``link.scale_out`` ib400), 50 GB/s to the host, and the
default (unfitted) efficiencies (``arch``); the run's "what was simulated" spells them out."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Discriminator, Field, PositiveInt, Tag, field_validator, model_validator

from sim.scenario.specs.gpus import GB, LINKS, SCALE_OUT, TFLOPS, GpuSpec, get_gpu
from sim.traffic.schema import Strict

GiB = 2**30
DOMAIN_LINKS = tuple(n for n in LINKS if n not in SCALE_OUT)
Big = Annotated[float, Field(gt=0, le=1e7)]  # beyond this a figure is a typo (10 PB, 10 EFLOP/s…)
Peak = Annotated[float, Field(ge=0, le=1e7)]


class Peaks(Strict):
    """Dense tensor-core peaks in TFLOP/s (0: the GPU has no such tensor cores)."""

    bf16: Big | None = None
    fp8: Peak | None = None
    fp4: Peak | None = None
    int8: Peak | None = None


class LinkDefinition(Strict):
    """The GPU's link within its domain, and what lies beyond the domain."""

    type: Literal[DOMAIN_LINKS] | None = None  # type: ignore[valid-type]  # its hop latency
    bandwidth_gb_s: Big | None = None  # per GPU and direction (default: the type's)
    domain: PositiveInt | None = None  # GPUs reached over it: 8 (a node), 72 (an NVL72 rack)
    scale_out: Literal[(*SCALE_OUT, "none")] | None = None  # type: ignore[valid-type]


BRANCH_TAGS = ("<name>", "<mapping>")  # a name_or field's branches (error locations leave them out)


def _name_or_definition(v) -> str:
    return BRANCH_TAGS[1] if isinstance(v, dict | Strict) else BRANCH_TAGS[0]


def name_or(model: type, names: type = str):
    """A field that is a name (``names``) or a mapping validated as ``model``, told apart by the
    value's type (so an error names the field of the branch the user wrote)."""
    return Annotated[Annotated[names, Tag(BRANCH_TAGS[0])] | Annotated[model, Tag(BRANCH_TAGS[1])],
                     Discriminator(_name_or_definition)]


class GpuDefinition(Strict):
    base: str | None = None  # a catalog GPU whose figures the others replace
    name: str | None = None
    memory_gib: Annotated[float, Field(gt=0, le=1e5)] | None = None
    hbm_tb_s: Big | None = None
    peaks: Peaks | None = None
    link: name_or(LinkDefinition, Literal[DOMAIN_LINKS]) | None = None  # type: ignore[valid-type]
    host_gb_s: Big | None = None  # GPU ↔ host memory, per direction (swap)
    power_w: Big | None = None  # TDP
    idle_w: Big | None = None  # the power model's figures (sim/pricing/power.py); default: its rule
    hbm_w: Big | None = None
    tensor_w: Big | None = None
    arch: str | None = None  # whose efficiency tables apply (ampere, hopper, …); default: none fitted

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, v: str | None) -> str | None:
        from sim.scenario.specs.gpus import GPU_CATALOG

        known = sorted({g.arch for g in GPU_CATALOG.values()} | {"default"})
        if v is not None and v not in known:
            raise ValueError(f"unknown architecture {v!r}; expected one of {', '.join(known)}")
        return v

    @field_validator("base")
    @classmethod
    def _known_base(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return get_gpu(v).name
        except KeyError as e:
            raise ValueError(e.args[0]) from None

    @model_validator(mode="after")
    def _complete(self):
        if self.base is None:
            missing = [f for f, v in (("name", self.name), ("memory_gib", self.memory_gib),
                                      ("hbm_tb_s", self.hbm_tb_s), ("link", self.link)) if v is None]
            if self.peaks is None or self.peaks.bf16 is None:
                missing.append("peaks.bf16")
            if isinstance(self.link, LinkDefinition) and self.link.type is None:
                missing.append("link.type")
            if missing:
                raise ValueError(f"a GPU without base needs {', '.join(missing)} (or base: a catalog GPU "
                                 "whose figures the others replace)")
        return self

    def spec(self) -> GpuSpec:
        """The GpuSpec this definition describes."""
        base = get_gpu(self.base) if self.base else None
        link = self.link if isinstance(self.link, LinkDefinition) else LinkDefinition(type=self.link)
        kind = link.type or (base.interconnect if base else None)
        fields: dict = {"name": self.name or f"{base.name} (custom)",
                        "source": "hardware.gpu" + (f" (base {base.name}: {base.source})" if base else ""),
                        "source_date": base.source_date if base else "", "figures": "",
                        "price_source": "catalog " + base.name if base else ""}
        if self.memory_gib is not None:
            fields["memory_bytes"], fields["memory_estimated"] = self.memory_gib * GiB, False
        if self.hbm_tb_s is not None:
            fields["hbm_bandwidth"] = self.hbm_tb_s * 1e12
        peaks = self.peaks or Peaks()
        for key, attr in (("bf16", "bf16_flops"), ("fp8", "fp8_flops"), ("fp4", "fp4_flops"), ("int8", "int8_flops")):
            value = getattr(peaks, key)
            if value is not None:
                fields[attr] = value * TFLOPS
        if kind is not None:
            fields["interconnect"] = kind
        if link.bandwidth_gb_s is not None:
            fields["interconnect_bandwidth"] = link.bandwidth_gb_s * GB
        elif link.type is not None and (base is None or link.type != base.interconnect):
            fields["interconnect_bandwidth"] = LINKS[link.type].bandwidth  # the type's own
        if link.domain is not None:
            fields["link_domain"] = link.domain
        if link.scale_out is not None:
            fields["scale_out"] = "" if link.scale_out == "none" else link.scale_out
        for key, attr, unit in (("host_gb_s", "host_bandwidth", GB), ("power_w", "power_w", 1.0)):
            if getattr(self, key) is not None:
                fields[attr] = getattr(self, key) * unit
        if self.power_w is not None:  # a new TDP: the base's draw figures no longer apply (the rule does)
            fields |= {"idle_w": 0.0, "hbm_w": 0.0, "tensor_w": 0.0}
        for key in ("idle_w", "hbm_w", "tensor_w"):
            if getattr(self, key) is not None:
                fields[key] = getattr(self, key)
        if self.arch is not None:
            fields["arch"] = self.arch
        if base is not None:
            return replace(base, **fields)
        return GpuSpec(**{"fp8_flops": 0.0, "price_per_hour": 0.0, **fields})


GpuField = name_or(GpuDefinition)
