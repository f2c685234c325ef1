"""What Triton has compiled of the project's kernels: a count of the binaries in its caches.

Kept out of :mod:`kernels.variants`, which every kernel module imports to launch: this module
imports every kernel module.
"""

from __future__ import annotations

from typing import Any

from kernels.dispatch import HAS_TRITON


def all_kernels() -> list[Any]:
    """Every jitted kernel the public functions launch."""
    from kernels import activation, attention, kv_cache, norm, rotary, sampling

    return [norm._rms_norm_kernel, activation._silu_and_mul_kernel, rotary._rope_kernel,
            kv_cache._write_kv_kernel, attention._paged_attention_kernel,
            attention._combine_splits_kernel, sampling._sample_kernel]


def compiled_variants() -> int | None:
    """Binaries Triton holds in its in-memory caches (all kernels, all devices); ``None``
    when the kernels are interpreted or Triton is missing (nothing is compiled then)."""
    if not HAS_TRITON:
        return None
    total, seen = 0, False
    for fn in all_kernels():
        caches = getattr(fn, "device_caches", None)
        if caches is None:
            continue
        seen = True
        for entry in caches.values():
            total += len(entry[0])
    return total if seen else None
