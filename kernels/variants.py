"""Which compiled variant of a Triton kernel a launch needs, known without compiling it.

Triton compiles one binary per *specialisation* of a kernel: its constexpr values, the dtype
of each pointer and whether it is 16-byte aligned, and for each integer argument whether it
is 1 or a multiple of 16 (unless the kernel lists it in ``do_not_specialize``). The first
launch of a new specialisation compiles it (about a second on an H100), so a run whose
warm-up missed one pays that in a timed step.

Every launch in ``kernels`` goes through :func:`launch`, which can record the
specialisation key — computed with Triton's own rule (``native_specialize_impl``), so the
same on a CPU as on a GPU — in the active :func:`recording`. A test can then check, under the
interpreter, that a run needs nothing its warm-up did not compile. On a GPU,
:func:`kernels.compiled.compiled_variants` counts what Triton really holds in its caches.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

VariantKey = tuple[str, tuple]

_RECORDINGS: list[set[VariantKey]] = []


@cache
def _params(fn: Any) -> tuple[tuple[str, bool, bool], ...]:
    """(name, is_constexpr, specialised) for each parameter of a jitted kernel."""
    raw = getattr(fn, "fn", fn)
    dns = getattr(fn, "do_not_specialize", None)
    if dns is None:  # the interpreter keeps the decorator's arguments in ``kwargs``
        dns = (getattr(fn, "kwargs", None) or {}).get("do_not_specialize") or ()
    names = list(inspect.signature(raw).parameters.values())
    out = []
    for i, p in enumerate(names):
        constexpr = "constexpr" in str(p.annotation)
        out.append((p.name, constexpr, p.name not in dns and i not in dns))
    return tuple(out)


def specialize_in_python(value: Any, specialise: bool) -> tuple[str, Any]:
    """Triton's specialisation of one non-constexpr argument, as its binder computes it (for a
    Triton without ``native_specialize_impl``): ints are ``1`` (a constant) or carry ``"D"``
    when divisible by 16, tensors their dtype and ``"D"`` when 16-byte aligned."""
    import torch

    if value is None:
        return ("constexpr", None)
    if isinstance(value, bool):
        return ("u1", None)
    if isinstance(value, int):
        ty = "i32" if -(2**31) <= value < 2**31 else "u64" if value >= 2**63 else "i64"
        if not specialise:
            return (ty, None)
        if value == 1:
            return ("constexpr", 1)
        return (ty, "D" if value % 16 == 0 else "")
    if isinstance(value, float):
        return ("fp32", None)
    if isinstance(value, torch.Tensor):
        names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int64: "i64",
                 torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}
        ty = "*" + names.get(value.dtype, str(value.dtype))
        return (ty, ("D" if value.data_ptr() % 16 == 0 else "") if specialise else None)
    raise TypeError(f"no specialisation for {type(value).__name__}")


def _specialize(value: Any, specialise: bool) -> tuple[str, Any]:
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
    except ImportError:  # pragma: no cover - older Triton
        return specialize_in_python(value, specialise)
    return tuple(native_specialize_impl(BaseBackend, value, False, specialise, True))


def variant_key(fn: Any, args: tuple, kwargs: dict) -> VariantKey:
    """The specialisation Triton would compile for ``fn[grid](*args, **kwargs)``."""
    params = _params(fn)
    names = {p[0] for p in params}
    values = dict(zip((p[0] for p in params), args, strict=False))
    values.update({k: v for k, v in kwargs.items() if k in names})
    key = []
    for name, constexpr, specialise in params:
        v = values.get(name)
        if constexpr:
            key.append((name, v))
        else:
            key.append((name, _specialize(v, specialise)))
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in names))  # num_warps...
    return getattr(fn, "__name__", str(fn)), (*key, *options)


def launch(fn: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
    """``fn[grid](*args, **kwargs)``, recording the variant in every active recording."""
    if _RECORDINGS:
        key = variant_key(fn, args, kwargs)
        for rec in _RECORDINGS:
            rec.add(key)
    fn[grid](*args, **kwargs)


@contextmanager
def recording() -> Iterator[set[VariantKey]]:
    """Collect the variant keys of every kernel launched inside the block."""
    rec: set[VariantKey] = set()
    _RECORDINGS.append(rec)
    try:
        yield rec
    finally:
        _RECORDINGS.remove(rec)
